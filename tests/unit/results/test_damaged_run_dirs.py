"""Damaged run directories (issue 20's campaign): everything kvbudget reads back from a
``--out`` run directory (``report``, ``validate --records``, ``calibrate --records``) is checked
where it is read (:func:`kvbudget.results.run_result.read_run`). A damaged directory is one clean
line naming the file (and row and column), never a traceback or a report of nonsense.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.run_result import read_run
from tests.conftest import mixed_workload

Damage = Callable[[Path], object]


def _rewrite(name: str, change: Callable[[pd.DataFrame], pd.DataFrame]) -> Damage:
    def damage(run: Path) -> None:
        change(pd.read_parquet(run / name)).to_parquet(run / name, index=False)
    return damage


def _column(name: str, column: str, value: Any, row: int | None = None) -> Damage:
    def change(df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        if row is None:
            df[column] = value
        else:
            df[column] = df[column].astype(object if isinstance(value, str) else df[column].dtype)
            df.loc[row, column] = value
        return df
    return _rewrite(name, change)


def _summary(change: Callable[[dict[str, Any]], object]) -> Damage:
    def damage(run: Path) -> None:
        s = json.loads((run / "summary.json").read_text())
        (run / "summary.json").write_text(json.dumps(change(s)))
    return damage


def _truncate(name: str, fraction: float) -> Damage:
    def damage(run: Path) -> None:
        data = (run / name).read_bytes()
        (run / name).write_bytes(data[: int(len(data) * fraction)])
    return damage


def _set(s: dict[str, Any], value: Any, *keys: str) -> dict[str, Any]:
    node = s
    for k in keys[:-1]:
        node = node[k]
    node[keys[-1]] = value
    return s


REQ, TL, SUM = "requests.parquet", "timeline.parquet", "summary.json"

# damage -> (what the one-line error names, besides the file)
DAMAGES: dict[str, tuple[Damage, str]] = {
    **{f"missing {n}": ((lambda run, n=n: (run / n).unlink()), "is missing") for n in (REQ, TL, SUM)},
    **{f"empty {n}": ((lambda run, n=n: (run / n).write_bytes(b"")), n) for n in (REQ, TL, SUM)},
    **{f"garbage {n}": ((lambda run, n=n: (run / n).write_bytes(bytes(range(256)) * 8)), n)
       for n in (REQ, TL, SUM)},
    **{f"{n} truncated to {f:.0%}": (_truncate(n, f), "not a readable Parquet file")
       for n in (REQ, TL) for f in (0.5, 0.95)},
    "summary cut short": (lambda run: (run / SUM).write_text((run / SUM).read_text()[:-9]),
                          "not valid JSON"),
    "summary a list": (_summary(lambda s: [1, 2]), "expected a JSON object"),
    "summary null": (_summary(lambda s: None), "expected a JSON object"),
    "summary tiers a list": (_summary(lambda s: _set(s, [1], "tiers")), "'tiers'"),
    "summary tier block a number": (_summary(lambda s: _set(s, 3, "tiers", "interactive")),
                                    "tiers.interactive"),
    "summary policy a number": (_summary(lambda s: _set(s, 5, "policy")), "'policy'"),
    "summary duration negative": (_summary(lambda s: _set(s, -5, "duration_s")), "'duration_s'"),
    "summary offered beside other records": (_summary(lambda s: _set(s, 999, "overall",
                                                                     "offered")), "999"),
    "summary complete, records empty": (_rewrite(REQ, lambda df: df.iloc[:0]), "0 rows"),
    **{f"records without {c}": (_rewrite(REQ, lambda df, c=c: df.drop(columns=[c])), repr(c))
       for c in ("ttft_s", "arrival_s", "prompt_tokens", "status", "tier", "request_id")},
    "ttft_s as text": (_column(REQ, "ttft_s", "fast"), "'ttft_s'"),
    "prompt_tokens as floats": (_rewrite(REQ, lambda df: df.assign(
        prompt_tokens=df.prompt_tokens + 0.5)), "'prompt_tokens'"),
    "prompt_tokens as text": (_rewrite(REQ, lambda df: df.assign(
        prompt_tokens=df.prompt_tokens.astype(str))), "'prompt_tokens'"),
    "tier as numbers": (_column(REQ, "tier", 3), "'tier'"),
    "tier empty": (_column(REQ, "tier", ""), "'tier'"),
    "tier missing a value": (_column(REQ, "tier", None), "'tier'"),
    "status unknown": (_column(REQ, "status", "weird", row=2), "row 2, column 'status'"),
    "ttft_s inf": (_column(REQ, "ttft_s", np.inf, row=1), "row 1, column 'ttft_s'"),
    "ttft_s negative": (_column(REQ, "ttft_s", -1.0, row=1),
                        "row 1, column 'ttft_s': not a duration >= 0 (-1.0)"),
    "e2e_s negative": (_column(REQ, "e2e_s", -3.0), "'e2e_s'"),
    "e2e_s below ttft_s": (_rewrite(REQ, lambda df: df.assign(e2e_s=df.ttft_s / 2)), "'e2e_s'"),
    # (a completed request may lack its TTFT: kvbudget serve does not see a whole answer's)
    "completed without e2e_s": (_column(REQ, "e2e_s", np.nan), "'e2e_s'"),
    "arrival_s NaN": (_column(REQ, "arrival_s", np.nan, row=3), "row 3, column 'arrival_s'"),
    "arrival_s inf": (_column(REQ, "arrival_s", np.inf, row=3), "row 3, column 'arrival_s'"),
    "arrival_s 1e300": (_column(REQ, "arrival_s", 1e300, row=3), "ten years"),
    "prompt_tokens negative": (_column(REQ, "prompt_tokens", -5, row=0), "'prompt_tokens'"),
    # the value as written in the file, not numpy's repr ("np.int64(1000000000000)")
    "prompt_tokens 1e12": (_column(REQ, "prompt_tokens", 10**12, row=0),
                           "'prompt_tokens': tokens outside 0..10,000,000 (1000000000000)"),
    "output_tokens negative": (_column(REQ, "output_tokens", -5, row=0), "'output_tokens'"),
    "output_tokens 1e12": (_column(REQ, "output_tokens", 10**12, row=0), "'output_tokens'"),
    "request ids duplicated": (_column(REQ, "request_id", 1), "duplicated"),
    "timeline without time_s": (_rewrite(TL, lambda df: df.drop(columns=["time_s"])),
                                "'time_s'"),
    "timeline time_s NaN": (_column(TL, "time_s", np.nan), "'time_s'"),
    "timeline going back in time": (_rewrite(TL, lambda df: df.iloc[::-1]), "'time_s'"),
    "timeline kv as text": (_column(TL, "kv_used_tokens", "x"), "'kv_used_tokens'"),
    "timeline kv negative": (_column(TL, "kv_used_tokens", -10), "'kv_used_tokens'"),
    "attempts garbage": (lambda run: (run / "attempts.parquet").write_bytes(b"PAR1garbage"),
                         "attempts.parquet"),
    "attempts without columns": (lambda run: pd.DataFrame({"x": [1]}).to_parquet(
        run / "attempts.parquet"), "attempts"),
}


@pytest.fixture(scope="module")
def good_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kvbudget.policies import make_policy
    from kvbudget.simulator.run import SimConfig, simulate

    run = tmp_path_factory.mktemp("good") / "run"
    w = mixed_workload(30, 4.0, seed=3)
    simulate(w, make_policy("conservative"), SimConfig()).write(run)
    return run


def _damaged(good_run: Path, tmp_path: Path, case: str) -> Path:
    run = tmp_path / "run"
    shutil.copytree(good_run, run)
    DAMAGES[case][0](run)
    return run


def test_the_undamaged_run_reads_back(good_run: Path) -> None:
    back = read_run(good_run)
    assert len(back.records) == 30 and back.summary["overall"]["offered"] == 30


@pytest.mark.parametrize("case", sorted(DAMAGES))
def test_a_damaged_run_directory_is_refused_naming_the_file(good_run: Path, tmp_path: Path,
                                                            case: str) -> None:
    run = _damaged(good_run, tmp_path, case)
    with pytest.raises((ValueError, FileNotFoundError)) as err:
        read_run(run)
    message = str(err.value)
    assert str(run) in message and len(message.splitlines()) == 1, message
    assert DAMAGES[case][1] in message, message


# the commands that read a run directory: each damage ends in one line, exit 2
COMMANDS: dict[str, Callable[[Path, Path], list[str]]] = {
    "report": lambda run, out: ["report", str(run), "--out", str(out)],
    "report --measured": lambda run, out: ["report", str(run.parent / "ok"), "--measured",
                                           str(run), "--out", str(out)],
    "validate --records": lambda run, out: ["validate", "--records", str(run), "--out",
                                            str(out)],
    "calibrate --records": lambda run, out: ["calibrate", "--records", str(run), "--out",
                                             str(out / "c.json"), "--max-evals", "1"],
}
SAMPLE = ["summary a list", "summary null", "tier missing a value", "summary complete, "
          "records empty", f"{REQ} truncated to 95%", "ttft_s negative", "status unknown"]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("case", SAMPLE)
def test_commands_reading_a_damaged_run_say_so_in_one_line(good_run: Path, tmp_path: Path,
                                                           case: str, command: str) -> None:
    run = _damaged(good_run, tmp_path, case)
    shutil.copytree(good_run, tmp_path / "ok")
    res = CliRunner().invoke(app, COMMANDS[command](run, tmp_path / "out"))
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2, res.stderr
    lines = res.stderr.strip().splitlines()
    assert lines[-1].startswith("error: ") and str(run) in lines[-1], res.stderr
    assert "Traceback" not in res.stderr
    assert not (tmp_path / "out" / "report.html").exists()
