"""``kvbudget validate --records`` and ``calibrate --records`` compare and fit TTFT and TPOT
over the requests that did not get their whole answer in one read, on both sides, and say so
under the table (``Recording.records``, ``analysis/validation.py`` ``same_requests``,
``analysis/whole_answer.py``).

In rate8.json 15 of 20 requests got their 15 tokens after the first within 0.1 ms in all (the
CPU client read each stream in one go): their measured TPOT, a few microseconds, made the TPOT
p50 error +100,000 % and their TTFT, about their E2E, the TTFT's; calibrating on them fitted a
decode step to the client's reads. Now those rows take the other 5, E2E all 20.
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


def _row(table: pd.DataFrame, metric: str) -> pd.Series:
    return table[(table["stage"] == "all") & (table["metric"] == metric)].iloc[0]


def test_validate_compares_ttft_and_tpot_over_the_requests_not_read_at_once(
        tmp_path: Path) -> None:
    out = _validate("rate8.json", tmp_path / "v")
    doc = json.loads((VLLM / "rate8.json").read_text())
    itls = [np.array(row) for row in doc["itls"]]
    fast = np.array([row.mean() < 1e-4 for row in itls])
    output = np.array(doc["output_lens"], dtype=float)
    ttft, e2e = np.array(doc["ttfts"]), np.array(doc["latencies"])
    tpot = (e2e - ttft) / (output - 1)
    # the simulated requests in the file's order: the reader numbers them by send time, as
    # the file holds them
    sim = pd.read_parquet(tmp_path / "v" / "sim" / "requests.parquet").sort_values("request_id")
    assert (np.diff(doc["start_times"]) >= 0).all()
    assert int(fast.sum()) == 15
    table = pd.read_csv(tmp_path / "v" / "validation.csv")
    for metric, meas in (("ttft", ttft), ("tpot", tpot)):
        row = _row(table, f"{metric}_p50_s")
        assert float(row["measured"]) == float(np.median(meas[~fast]))
        assert float(row["simulated"]) == float(np.median(sim[f"{metric}_s"].to_numpy()[~fast]))
    row = _row(table, "e2e_p50_s")
    assert float(row["measured"]) == float(np.median(e2e))
    assert float(row["simulated"]) == float(np.median(sim["e2e_s"]))
    per_request = json.loads((tmp_path / "v" / "validation.json").read_text())["per_request"]
    pairs = {r["metric"]: r["num_pairs"] for r in per_request}
    assert pairs == {"ttft_s": 5, "tpot_s": 5, "e2e_s": 20}
    assert ("TTFT and TPOT: 15 of the 20 compared requests got their whole answer in one read"
            in out)
    assert ("the TTFT and TPOT rows and per-request MAPEs take the other 5 only, on both sides "
            "(E2E: all 20)") in out
    said = json.loads((tmp_path / "v" / "validation.json").read_text())["said"]
    # the others: vllm bench serve's peak beside the simulated one (test_vllm_bench_peak), and
    # how few requests the percentiles are over (test_screens77)
    assert [s for s in said if not s.startswith(("peak concurrent requests", "few requests"))
            ] == [said[0]]
    assert said[0].startswith("TTFT and TPOT: 15 of the 20")


def test_calibrate_fits_ttft_and_tpot_over_the_requests_not_read_at_once(
        tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["calibrate", "--records", str(VLLM / "rate8.json"), "--model",
                                   "Llama-3.1-8B", "--out", str(tmp_path / "cost.json"),
                                   "--max-evals", "1"])
    assert res.exit_code == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert ("TTFT and TPOT: 15 of the 20 compared requests got their whole answer in one read"
            in out)
    assert "the fit and the TTFT and TPOT rows above take the other 5 only" in out


def test_validate_of_steady_streams_says_nothing_of_it(tmp_path: Path) -> None:
    out = _validate("concurrency4.json", tmp_path / "v")
    assert "whole answer in one read" not in out
    said = json.loads((tmp_path / "v" / "validation.json").read_text())["said"]
    assert [s for s in said if not s.startswith(("peak concurrent requests", "few requests"))
            ] == []
