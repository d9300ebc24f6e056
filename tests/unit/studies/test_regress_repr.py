"""A regress report in a notebook (``kb.regress``): its headline, each failure and the
scenarios' notes, not a dump of every metric's comparison."""

from __future__ import annotations

from kvbudget.studies.regress import MetricComparison, RegressReport, ScenarioResult


def _comparison(metric: str, now: float, verdict: str) -> MetricComparison:
    return MetricComparison(scenario="small", metric=metric, worse="higher", rel_tol=0.1,
                            abs_tol=0.0, baseline=(1.0, 1.0), now=(now, now),
                            baseline_mean=1.0, now_mean=now, allowed=0.1, test="exact",
                            p_value=None, verdict=verdict)  # type: ignore[arg-type]


def test_a_regress_reports_repr_gives_its_headline_failures_and_notes() -> None:
    report = RegressReport([ScenarioResult(
        "small", None, (0, 1), (_comparison("ttft_p99_s", 2.0, "regressed"),
                                 _comparison("tpot_p99_s", 1.0, "ok")),
        notes=("compared with the baseline's seeds [0, 1]",))], alpha=0.05, wall_time_s=1.5)
    lines = repr(report).splitlines()
    assert lines[0] == ("RegressReport: regress REGRESSED: 1 regressed, 0 improved, 1 ok of 2 "
                        "metrics in 1 scenarios (2 runs, 1.5 s)")
    assert lines[1].startswith("small: ttft_p99_s regressed: 1 -> 2 (change +1")
    assert lines[2] == "note: small: compared with the baseline's seeds [0, 1]"
    assert lines[3].startswith(".comparisons, .failures")
    assert len(lines) == 4 and "MetricComparison(" not in repr(report)
