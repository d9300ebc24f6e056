"""What a run shows in a notebook (``repr``): what it simulated and assumed, not its arrays."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import kvbudget as kb
from kvbudget.results.run_result import RunResult


def test_a_runs_repr_says_what_it_simulated_and_assumed(tmp_path: Path) -> None:
    trace = tmp_path / "lengths.csv"  # lengths only: no arrivals, no tier, no max_tokens
    trace.write_text("prompt_tokens,output_tokens\n" + "".join(
        f"{p},{o}\n" for p, o in zip(range(100, 700, 20), range(10, 310, 10), strict=True)))
    loaded = kb.load_trace(trace, kb.TraceOptions(format="generic"))
    run = kb.simulate(loaded.workload, kb.make_policy("conservative"), kb.SimConfig())
    lines = repr(run).splitlines()
    assert lines[0] == "RunResult: conservative, 30 requests offered: 30 completed"
    assert lines[1].startswith("simulated: Llama-3.1-8B on H100-SXM (given as H100-80GB)")
    said = [ln.split(":")[0] for ln in lines if not ln.startswith("  ")]
    assert said[2:] == ["warning", "assumed", "assumed", "overall", ".records (30 rows), .timeline "
                        f"({len(run.timeline):,} rows), .token_gaps, .summary (every figure)"]
    assert "array(" not in repr(run)
    # a run read back from its directory shows the same
    run.write(tmp_path / "run")
    assert repr(kb.read_run(tmp_path / "run")) == repr(run)


def test_a_bare_or_measured_runs_repr_has_no_setting_line() -> None:
    bare = RunResult({"request_id": np.arange(3)}, {}, {"policy": "p", "executor": "live",
                     "overall": {"offered": 3, "completed": 1, "expired": 2}})
    assert repr(bare).splitlines() == [
        "RunResult: p, 3 requests offered: 1 completed, 2 expired",
        ".records (3 rows), .timeline (0 rows), .summary (every figure)"]
