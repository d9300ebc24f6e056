"""Files kvbudget reads besides scenarios and run directories (issue 20's campaign): model
``config.json`` files given to ``--model`` and the part files a study keeps for ``--resume``.
Each damaged or absurd file ends in one line naming it (and its field), exit 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from tests.conftest import REPO, small_scenario_dict

runner = CliRunner()
LLAMA = json.loads((REPO / "perf" / "model_configs" / "Llama-3.1-8B.json").read_text())


def _one_line(res: Any, *needles: str) -> None:
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    err = res.stderr.strip()
    assert res.exit_code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def _config(**change: Any) -> str:
    return json.dumps({**LLAMA, **change})


CONFIGS: dict[str, tuple[str, str]] = {
    "not JSON": ("{", "config.json"),
    "a list": ("[1]", "config.json"),
    "empty": ("", "config.json"),
    "positions beyond any model": (_config(max_position_embeddings=10**30),
                                   "max_position_embeddings"),
    "layers beyond any model": (_config(num_hidden_layers=10**12), "num_hidden_layers"),
    "no heads": (_config(num_attention_heads=0), "num_attention_heads"),
    "negative hidden size": (_config(hidden_size=-1), "hidden_size"),
    "hidden size as text": (_config(hidden_size="abc"), "hidden_size"),
    "a fraction of a layer": (_config(num_hidden_layers=1.5), "num_hidden_layers"),
    "a switch for a count": (_config(vocab_size=True), "vocab_size"),
    "kv heads not dividing the heads": (_config(num_key_value_heads=3), "num_key_value_heads"),
}


@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_a_bad_model_config_is_one_line(tmp_path: Path, case: str) -> None:
    path = tmp_path / "m" / "config.json"
    path.parent.mkdir()
    path.write_text(CONFIGS[case][0])
    res = runner.invoke(app, ["simulate", "--model", str(path), "--set",
                              "workload.num_requests=3"])
    _one_line(res, CONFIGS[case][1])


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    import tomli_w

    root = tmp_path_factory.mktemp("sweep")
    scn = root / "s.toml"
    scn.write_text(tomli_w.dumps(small_scenario_dict(n=20)))
    out = root / "done"
    args = ["sweep", "--scenario", str(scn), "--grid", "engine.num_gpu_blocks=2000,2500",
            "--policies", "conservative", "-r", "1", "-j", "1", "--no-plot", "--out"]
    res = runner.invoke(app, [*args, str(out)])
    assert res.exit_code == 0, res.stderr
    return out, args


def _damage_part(out: Path, how: str) -> Path:
    import pandas as pd

    (part,) = sorted((out / "parts").glob("part-*.parquet"))
    if how == "truncated":
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    elif how == "empty":
        part.write_bytes(b"")
    elif how == "without run_key":
        pd.read_parquet(part).drop(columns=["run_key"]).to_parquet(part)
    return part


@pytest.mark.parametrize("how", ["truncated", "empty", "without run_key"])
def test_a_damaged_part_file_is_named_on_resume(tmp_path: Path,
                                                finished_sweep: tuple[Path, list[str]],
                                                how: str) -> None:
    done, args = finished_sweep
    out = tmp_path / "sw"
    shutil.copytree(done, out)
    part = _damage_part(out, how)
    _one_line(runner.invoke(app, [*args, str(out), "--resume"]), str(part))


def test_leftovers_of_an_interrupted_flush_are_ignored(tmp_path: Path,
                                                      finished_sweep: tuple[Path, list[str]]
                                                      ) -> None:
    import pandas as pd

    done, args = finished_sweep
    out = tmp_path / "sw"
    shutil.copytree(done, out)
    (out / "parts" / "part-0-x-00009.tmp").write_bytes(b"half a file")
    res = runner.invoke(app, [*args, str(out), "--resume"])
    assert res.exit_code == 0, res.stderr
    assert len(pd.read_parquet(out / "sweep.parquet")) == 2
