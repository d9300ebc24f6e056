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


# --- trace files ------------------------------------------------------------------------------
CSV_HEADERS = {
    "azure": ("TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 18:17:03.0000000,10,2"),
    "burstgpt": ("Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,"
                 "Total tokens,Log Type", "5.0,s1,1,GPT-4,10,2,12,Conversation log"),
    "lengths": ("num_prefill_tokens,num_decode_tokens,num_total_tokens,pd_ratio", "10,2,12,0.5"),
    "generic": ("arrival_s,prompt_tokens,output_tokens", "0,10,2"),
}


@pytest.mark.parametrize("fmt", sorted(CSV_HEADERS))
def test_a_malformed_line_that_is_not_utf8_is_one_line(tmp_path: Path, fmt: str) -> None:
    """pyarrow printed "Exception ignored ... UnicodeDecodeError" twice before the error."""
    header, row = CSV_HEADERS[fmt]
    path = tmp_path / "t.csv"
    path.write_bytes(f"{header}\n{row}\n".encode() + "caf\xe9,\xff\n".encode("latin-1"))
    args = ["trace", "stats", str(path)] + ([] if fmt == "generic" else ["--format", fmt])
    res = runner.invoke(app, args)
    assert "Exception ignored" not in res.stderr
    _one_line(res, str(path), "UTF-8")


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_line_longer_than_a_read_block_is_refused_without_reading_it_whole(
        tmp_path: Path, suffix: str) -> None:
    """The guard against a gigabyte-long line: the readers parse 4 MiB blocks, and a line
    longer than a block is refused (a 1 GiB line is refused in under a second in 0.1 GB of
    memory; 8 MiB proves the same bound here)."""
    path = tmp_path / f"long{suffix}"
    pad = b"9" * (8 << 20)
    if suffix == ".csv":
        path.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0," + pad + b",1\n1,10,1\n")
    else:
        path.write_bytes(b'{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 1, "pad": "'
                         + pad + b'"}\n{"arrival_s": 1, "prompt_tokens": 5, "output_tokens": 1}\n')
    _one_line(runner.invoke(app, ["trace", "stats", str(path)]), str(path))
