"""What a study's result shows in a notebook (``repr``): what it was, over what (model, GPU,
workload, what loading the workload warned of or assumed), what it found, where its tables
are; not a dump of its frames and specs."""

from __future__ import annotations

from pathlib import Path

import kvbudget as kb


def _scenario(tmp_path: Path) -> kb.Scenario:
    trace = tmp_path / "lengths.csv"  # lengths only: no arrivals, no tier, no max_tokens
    trace.write_text("prompt_tokens,output_tokens\n" + "".join(
        f"{p},{o}\n" for p, o in zip(range(100, 500, 20), range(10, 210, 10), strict=True)))
    return kb.make_scenario(trace=trace, trace_format="generic")


def _said(text: str) -> list[str]:
    return [ln.split(":")[0] for ln in text.splitlines() if not ln.startswith("  ")]


def test_a_replicated_comparisons_repr_says_what_it_ran_over_and_found(tmp_path: Path) -> None:
    c = kb.compare(_scenario(tmp_path), ["conservative", "overcommit"], replications=2)
    lines = repr(c).splitlines()
    assert lines[0] == ("Comparison: conservative, overcommit; 2 replications each on common "
                        "random numbers, 95% intervals")
    # what `kvbudget compare -r` says on stderr, kept on the result: the trace's warning and
    # what was assumed in place of its missing columns
    assert lines[1] == "model Llama-3.1-8B on H100-SXM (given as H100-80GB); workload lengths: " \
                       "20 requests"
    assert c.setting == tuple(lines[1:len(c.setting) + 1])
    assert _said(repr(c))[2:5] == ["warning", "assumed", "assumed"]
    assert lines[-2].startswith("overcommit against conservative on 12 metrics: ")
    assert lines[-1] == ".table (24 rows: metric x policy), .runs (4 rows), .params"
    assert "DataFrame" not in repr(c) and "runs=" not in repr(c)


def test_a_one_run_comparisons_repr_gives_each_runs_outcome(tmp_path: Path) -> None:
    c = kb.compare(_scenario(tmp_path), ["conservative", "overcommit"])
    lines = repr(c).splitlines()
    assert lines[0] == "Comparison: conservative, overcommit; one run each on the scenario's seed"
    assert lines[1].startswith("simulated: Llama-3.1-8B on H100-SXM")
    assert lines[-3:] == ["conservative: 20 of 20 completed, SLO attainment 1",
                          "overcommit: 20 of 20 completed, SLO attainment 1",
                          ".table (24 rows: metric x policy), .runs (2 rows), .results, .params"]
