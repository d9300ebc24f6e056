"""``kvbudget validate --records`` says, under its table, what the requests that got their
whole answer in one read do to its TPOT comparison, and gives it over the others
(``analysis/whole_answer.py``).

In rate8.json 15 of 20 requests got their 15 tokens after the first within 0.1 ms in all (the
CPU client read each stream in one go): their measured TPOT, a few microseconds, made the TPOT
p50 error +100,000 % and the per-request TPOT MAPE as large, unexplained. The table keeps every
request's figures; the line below it counts those requests and compares TPOT over the other 5.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from typer.testing import CliRunner

from kvbudget.cli.main import app

VLLM = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"


def _validate(name: str, out: Path) -> str:
    res = CliRunner().invoke(app, ["validate", "--records", str(VLLM / name), "--model",
                                   "Llama-3.1-8B", "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    return " ".join(res.stdout.split())


def test_validate_gives_tpot_over_the_requests_not_read_at_once(tmp_path: Path) -> None:
    out = _validate("rate8.json", tmp_path / "v")
    doc = json.loads((VLLM / "rate8.json").read_text())
    itls = [np.array(row) for row in doc["itls"]]
    fast = np.array([row.mean() < 1e-4 for row in itls])
    output = np.array(doc["output_lens"], dtype=float)
    tpot = (np.array(doc["latencies"]) - np.array(doc["ttfts"])) / (output - 1)
    # the simulated requests in the file's order: the reader numbers them by send time, as
    # the file holds them
    sim = pd.read_parquet(tmp_path / "v" / "sim" / "requests.parquet").sort_values("request_id")
    assert (np.diff(doc["start_times"]) >= 0).all()
    sim_tpot = sim["tpot_s"].to_numpy()
    s, m = float(np.median(sim_tpot[~fast])), float(np.median(tpot[~fast]))
    mape = float(np.mean(np.abs(sim_tpot[~fast] - tpot[~fast]) / tpot[~fast]))
    assert int(fast.sum()) == 15
    assert ("TPOT: 15 of the 20 compared requests with a TPOT got their whole answer in one "
            "read") in out
    assert (f"over the other 5, TPOT p50 simulated {s * 1e3:.3g} ms, measured {m * 1e3:.3g} ms "
            f"({(s - m) / m:+.1%}), per-request TPOT MAPE {mape:.1%}") in out
    # the table itself still counts every request: its measured TPOT p50 is one read at once
    table = pd.read_csv(tmp_path / "v" / "validation.csv")
    row = table[(table["stage"] == "all") & (table["metric"] == "tpot_p50_s")]
    assert float(row["measured"].iloc[0]) == float(np.median(tpot))
    said = json.loads((tmp_path / "v" / "validation.json").read_text())["said"]
    assert len(said) == 1 and said[0].startswith("TPOT: 15 of the 20")


def test_validate_of_steady_streams_says_nothing_of_it(tmp_path: Path) -> None:
    out = _validate("concurrency4.json", tmp_path / "v")
    assert "whole answer in one read" not in out
    assert json.loads((tmp_path / "v" / "validation.json").read_text())["said"] == []
