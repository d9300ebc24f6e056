"""The compare table's last line is computed from the results: change the load, it changes."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from kvbudget.analysis.conclusion import conclude
from kvbudget.cli.main import app


def _summary(policy: str, interactive: float, batch: float) -> dict[str, object]:
    return {"policy": policy, "offered_window_s": 100.0, "overall": {"offered": 501},
            "tiers": {"interactive": {"offered": 350, "slo_attainment": interactive},
                      "batch": {"offered": 150, "slo_attainment": batch}}}


def test_conclusion_names_who_meets_the_first_tier_and_the_cost() -> None:
    line = conclude([_summary("unlimited", 0.3, 0.8), _summary("conservative", 0.99, 0.9),
                     _summary("preemptive", 1.0, 0.5)])
    assert line.startswith("conclusion at 5 req/s offered: interactive SLO met (attainment "
                           ">= 90 %) by conservative (batch 90 %); preemptive (batch 50 %)")
    # the missing policy's figure is the first tier's attainment, named ("missed by unlimited
    # (30 %)" read as missed by 30 points)
    assert "missed by unlimited (interactive 30 %)" in line
    assert line.endswith("conservative costs the other tiers least")


def test_conclusion_when_no_policy_meets_it() -> None:
    line = conclude([_summary("a", 0.3, 0.8), _summary("b", 0.6, 0.1)])
    assert line == ("conclusion at 5 req/s offered: no policy meets interactive's SLO at 90 %; "
                    "closest b (60 %)")


def _last_line(rate: float) -> str:
    res = CliRunner().invoke(app, ["compare", "--policies", "unlimited,conservative",
                                   "--set", "workload.duration_s=120",
                                   "--set", f"workload.arrival.rate_rps={rate}"])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    return text[text.index("conclusion at"):]


def test_compare_ends_with_the_conclusion_and_it_follows_the_load() -> None:
    light, heavy = _last_line(2.0), _last_line(5.0)
    assert light != heavy
    # light load: both policies keep interactive within its SLO; at the knee unlimited does not
    assert "missed by" not in light and "unlimited" in light.split("missed by")[0]
    assert "missed by unlimited" in heavy


def test_compare_names_the_slo_targets_and_splits_refused_from_expired(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["compare", "--policies", "conservative",
                                   "--set", "workload.duration_s=30"])
    assert res.exit_code == 0, res.output
    header = next(ln for ln in res.output.splitlines() if ln.startswith("policy ")).split()
    assert "refused" in header and "expired" in header
    text = " ".join(res.output.split())
    assert "interactive TTFT<=2 s, TPOT<=0.1 s" in text
    assert "first arrival to last finish" in text


def test_the_conclusion_and_the_setting_line_say_one_arrival_rate(tmp_path: Path) -> None:
    # 4 requests over 0.888 s (printed so: 3 / 0.9 = 3.33): the line above the table said 3.38 req/s ((n - 1) / span), the
    # conclusion under it 4.5 req/s (n / span), for the same arrivals
    from kvbudget.workloads.arrival_rate import mean_arrival_rate

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,100,10\n0.3,100,10\n"
                     "0.5,100,10\n0.888,100,10\n")
    res = CliRunner().invoke(app, ["compare", "--trace", str(trace), "--policies",
                                   "unlimited,conservative"])
    assert res.exit_code == 0, res.output
    text = res.output.replace("\n  ", " ")
    said = re.search(r"4 requests over 0\.888 s \(([\d.]+) req/s: 3 gaps between arrivals\)", text)
    concluded = re.search(r"conclusion at ([\d.]+) req/s offered", text)
    assert said and concluded, text
    assert said.group(1) == concluded.group(1) == f"{mean_arrival_rate(4, 0.888):.3g}"
    assert mean_arrival_rate(1, 5.0) is None and mean_arrival_rate(3, 0.0) is None


def test_the_conclusion_ranks_no_policies_that_tie() -> None:
    """With a slow engine every policy completed no interactive request within its SLO, and
    the line said "closest unlimited (0 %)": the first listed, as if it were better. Ties are
    now named together, and so are policies that cost the other tiers alike."""
    zero = [_summary(p, 0.0, 0.1) for p in ("unlimited", "conservative", "overcommit")]
    assert conclude(zero) == ("conclusion at 5 req/s offered: no policy meets interactive's SLO "
                              "at 90 %; every policy at 0 %")
    some = [_summary("a", 0.5, 0.1), _summary("b", 0.2, 0.1), _summary("c", 0.5, 0.3)]
    assert conclude(some).endswith("closest a and c (50 %)")
    alike = [_summary("a", 0.95, 0.6), _summary("b", 0.99, 0.6), _summary("c", 0.9, 0.2)]
    assert conclude(alike).endswith("; a and b cost the other tiers least, alike")
    all_alike = [_summary("a", 0.95, 0.6), _summary("b", 0.99, 0.6)]
    assert conclude(all_alike).endswith("; they cost the other tiers alike")
    assert conclude([_summary("a", 0.3, 0.8)]).endswith("closest a (30 %)")
