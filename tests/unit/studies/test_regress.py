"""``kvbudget regress``: comparison rules, baseline files, reports and the command end to end."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.studies.regress import (
    BaselineFile,
    MetricBaseline,
    RegressInputError,
    RegressReport,
    ScenarioResult,
    compare_metric,
    default_metrics,
    default_tolerance,
    dump_baseline,
    get_metric,
    infer_worse,
    load_suite,
    one_sided_welch,
    read_baseline,
    render_junit,
    render_markdown,
    render_text,
)

REPO = Path(__file__).resolve().parents[3]
SHARED = REPO.parent / "shared"
TRACE = SHARED / "bench" / "conv_n2000_q6.jsonl"

runner = CliRunner()


def entry(values: list[float | None], worse: str = "higher", rel: float = 0.1,
          abs_: float = 0.0) -> MetricBaseline:
    return MetricBaseline.model_validate(
        {"worse": worse, "rel_tol": rel, "abs_tol": abs_, "values": values})


# --- metric paths and directions ----------------------------------------------------------------
SUMMARY: dict[str, Any] = {
    "policy": "conservative",
    "overall": {"offered": 10, "output_tokens_per_s": 100.0,
                "sustained_output_tokens_per_s": 80.0, "goodput_rps": 2.0,
                "num_preemptions": 3, "ttft_s": {"p99": 0.5}},
    "tiers": {"interactive": {"offered": 10, "ttft_s": {"p99": 0.5, "p50": None}},
              "batch": {"offered": 0, "ttft_s": {"p99": None}}},
    "kv": {"reservation_efficiency": 0.8},
}


def test_get_metric_walks_dotted_paths() -> None:
    assert get_metric(SUMMARY, "tiers.interactive.ttft_s.p99") == 0.5
    assert get_metric(SUMMARY, "overall.num_preemptions") == 3
    assert get_metric(SUMMARY, "tiers.interactive.ttft_s.p50") is None


def test_get_metric_names_the_missing_part() -> None:
    with pytest.raises(KeyError, match="no 'chat' in tiers; tiers has: batch, interactive"):
        get_metric(SUMMARY, "tiers.chat.ttft_s.p99")
    with pytest.raises(KeyError, match="not a number"):
        get_metric(SUMMARY, "tiers.interactive.ttft_s")


@pytest.mark.parametrize(("metric", "worse"), [
    ("tiers.interactive.ttft_s.p99", "higher"),
    ("overall.e2e_s.mean", "higher"),
    ("overall.num_preemptions", "higher"),
    ("tiers.batch.rejected_overloaded", "higher"),
    ("overall.output_tokens_per_s", "lower"),
    ("overall.sustained_output_tokens_per_s", "lower"),
    ("tiers.interactive.goodput_rps", "lower"),
    ("tiers.interactive.slo_attainment", "lower"),
    ("kv.reservation_efficiency", "lower"),
    ("kv.used_mean", None),
])
def test_direction_of_worse(metric: str, worse: str | None) -> None:
    assert infer_worse(metric) == worse


def test_default_metrics_skip_tiers_without_traffic() -> None:
    metrics = default_metrics(SUMMARY)
    assert "tiers.interactive.ttft_s.p99" in metrics
    assert not any(m.startswith("tiers.batch.") for m in metrics)
    # the run's throughput over the time the work took, not over the arrival window (where a
    # slower engine that completes the same requests shows the same figure)
    assert "overall.sustained_output_tokens_per_s" in metrics
    assert "overall.output_tokens_per_s" not in metrics
    assert all(infer_worse(m) is not None for m in metrics)
    assert default_tolerance("overall.sustained_output_tokens_per_s") == (0.05, 0.0)
    assert default_tolerance("tiers.interactive.slo_attainment") == (0.0, 0.02)


# --- the comparison rule ------------------------------------------------------------------------
def test_identical_values_are_ok_and_exact() -> None:
    c = compare_metric("s", "overall.ttft_s.p99", entry([1.0, 1.2, 1.1]), [1.0, 1.2, 1.1], 0.05)
    assert c.verdict == "ok"
    assert c.p_value is not None and c.p_value > 0.4


def test_exact_worsening_beyond_tolerance_regresses() -> None:
    c = compare_metric("s", "overall.ttft_s.p99", entry([1.0]), [1.2], 0.05)
    assert (c.verdict, c.test) == ("regressed", "exact")
    assert c.change == pytest.approx(0.2)
    assert c.change_rel == pytest.approx(0.2)
    within = compare_metric("s", "overall.ttft_s.p99", entry([1.0]), [1.09], 0.05)
    assert within.verdict == "ok"


def test_direction_lower_is_worse() -> None:
    e = entry([100.0, 100.0], worse="lower", rel=0.05)
    assert compare_metric("s", "overall.goodput_rps", e, [90.0, 90.0], 0.05).verdict == "regressed"
    assert compare_metric("s", "overall.goodput_rps", e, [120.0, 120.0], 0.05).verdict == "improved"


def test_absolute_tolerance_when_larger() -> None:
    e = entry([0.90], worse="lower", rel=0.0, abs_=0.02)
    assert compare_metric("s", "x.slo_attainment", e, [0.885], 0.05).verdict == "ok"
    assert compare_metric("s", "x.slo_attainment", e, [0.87], 0.05).verdict == "regressed"
    # allowed = max(abs_tol, rel_tol * |baseline|)
    e2 = entry([10.0], rel=0.1, abs_=0.5)
    assert compare_metric("s", "a.ttft_s.p99", e2, [10.9], 0.05).allowed == pytest.approx(1.0)


def test_noise_beyond_tolerance_is_not_a_regression() -> None:
    # the mean moved 20 % but the replications overlap: Welch cannot tell it from noise
    e = entry([1.0, 2.0, 0.5, 1.5])
    c = compare_metric("s", "a.ttft_s.p99", e, [1.9, 0.6, 2.2, 1.3], 0.05)
    assert c.change_rel is not None and c.change_rel > 0.1
    assert c.test == "welch"
    assert c.p_value is not None and c.p_value > 0.05
    assert c.verdict == "ok"


def test_significant_worsening_beyond_tolerance_regresses() -> None:
    e = entry([1.00, 1.02, 0.98, 1.01])
    c = compare_metric("s", "a.ttft_s.p99", e, [1.30, 1.32, 1.29, 1.31], 0.05)
    assert c.test == "welch"
    assert c.p_value is not None and c.p_value < 1e-4
    assert c.verdict == "regressed"


def test_significant_but_small_change_is_ok() -> None:
    e = entry([1.000, 1.001, 1.002])
    c = compare_metric("s", "a.ttft_s.p99", e, [1.05, 1.051, 1.052], 0.05)
    assert c.p_value is not None and c.p_value < 0.05
    assert c.verdict == "ok"  # 5 % < 10 % tolerance


def test_welch_matches_scipy_and_degenerates_to_exact() -> None:
    from scipy import stats

    p = one_sided_welch([3.0, 4.0, 5.0], [1.0, 2.0, 2.5], "higher")
    ref = stats.ttest_ind([3.0, 4.0, 5.0], [1.0, 2.0, 2.5], equal_var=False,
                          alternative="greater").pvalue
    assert p == pytest.approx(float(ref))
    assert one_sided_welch([2.0, 2.0], [1.0, 1.0], "higher") is None
    assert one_sided_welch([2.0], [1.0, 1.5], "higher") is None


def test_missing_values() -> None:
    gone = compare_metric("s", "tiers.batch.ttft_s.p99", entry([1.0, 2.0]), [None, None], 0.05)
    assert gone.verdict == "missing" and gone.failed
    new = compare_metric("s", "tiers.batch.ttft_s.p99", entry([None, None]), [1.0, 2.0], 0.05)
    assert new.verdict == "new" and not new.failed
    none = compare_metric("s", "tiers.batch.ttft_s.p99", entry([None]), [None], 0.05)
    assert none.verdict == "ok"


# --- baseline files -----------------------------------------------------------------------------
def sample_baseline() -> BaselineFile:
    return BaselineFile(scenario="demo", seeds=[0, 1], metrics={
        "tiers.interactive.ttft_s.p99": entry([0.1234567890123, None]),
        "overall.num_preemptions": entry([3, 4], rel=0.1, abs_=2.0),
        "overall.goodput_rps": entry([1e-7, 2.5], worse="lower", rel=0.05),
    })


@pytest.mark.parametrize("suffix", [".toml", ".json"])
def test_baseline_round_trips_exactly(tmp_path: Path, suffix: str) -> None:
    b = sample_baseline()
    path = tmp_path / f"demo{suffix}"
    path.write_text(dump_baseline(b, suffix))
    back = read_baseline(path)
    assert back == b
    assert back.metrics["overall.num_preemptions"].values == [3, 4]


@pytest.mark.parametrize(("text", "message"), [
    ("format = 1\nscenario = 'x'\nseeds = [0]\n[metrics.\"a.ttft_s.p99\"]\nworse = 'up'\n"
     "rel_tol = 0.1\nabs_tol = 0.0\nvalues = [1.0]\n",
     "metrics.\"a.ttft_s.p99\".worse: Input should be 'higher' or 'lower', got 'up'"),
    ("format = 1\nscenario = 'x'\nseeds = [0, 1]\n[metrics.\"a.ttft_s.p99\"]\nworse = 'higher'\n"
     "rel_tol = 0.1\nabs_tol = 0.0\nvalues = [1.0]\n",
     "metrics.\"a.ttft_s.p99\".values: has 1 values for 2 seeds"),
    ("format = 1\nscenario = 'x'\nseeds = [0]\n[metrics.\"a.ttft_s.p99\"]\nworse = 'higher'\n"
     "rel_tol = -1\nabs_tol = 0.0\nvalues = [1.0]\n",
     "metrics.\"a.ttft_s.p99\".rel_tol: Input should be greater than or equal to 0, got -1"),
    ("format = 1\nscenario = 'x'\nseeds = [0]\n[metrics.\"a.ttft_s.p99\"]\nworse = 'higher'\n"
     "rel_tol = 0.1\nabs_tol = 0.0\nvalues = ['fast']\n",
     "metrics.\"a.ttft_s.p99\".values.0"),
    ("format = 1\nscenario = 'x'\nseeds = [0]\n[metrics\n", "not valid TOML"),
])
def test_bad_baselines_name_file_and_field(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "x.toml"
    path.write_text(text)
    with pytest.raises(RegressInputError) as err:
        read_baseline(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_truncated_json_baseline(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text(dump_baseline(sample_baseline(), ".json")[:120])
    with pytest.raises(RegressInputError, match=r"x\.json: not valid JSON"):
        read_baseline(path)


# --- reports ------------------------------------------------------------------------------------
def sample_report() -> RegressReport:
    bad = compare_metric("demo", "tiers.interactive.ttft_s.p99", entry([1.0, 1.01]),
                         [2.0, 2.02], 0.05)
    good = compare_metric("demo", "overall.goodput_rps", entry([5.0, 5.0], worse="lower"),
                          [5.0, 5.0], 0.05)
    return RegressReport(
        scenarios=[ScenarioResult("demo", Path("b/demo.toml"), (0, 1), (bad, good))],
        alpha=0.05, wall_time_s=1.5)


def test_reports_name_the_failing_metric() -> None:
    report = sample_report()
    assert report.regressed
    text = render_text(report)
    assert "FAIL demo: tiers.interactive.ttft_s.p99 regressed" in text
    assert "REGRESSED" in text and "regress REGRESSED: 1 regressed" in text
    root = ET.fromstring(render_junit(report))
    assert root.get("failures") == "1" and root.get("tests") == "2"
    failed = [c for c in root.iter("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failed] == ["tiers.interactive.ttft_s.p99"]
    md = render_markdown(report)
    assert md.startswith("## kvbudget regress: regressions found")
    assert "| metric | worse | baseline | now | change |" in md
    assert "| `tiers.interactive.ttft_s.p99` | higher | 1.005 | 2.01 |" in md


# --- end to end ---------------------------------------------------------------------------------
SCENARIO = """\
name = "tiny"
seed = 0
policy = "overcommit"

[policy_params]
overcommit_ratio = 0.5

[engine]
num_gpu_blocks = {blocks}

[workload]
kind = "trace"
path = "{trace}"

[workload.options]
window = [0, 40]
tier_shares = {{ interactive = 0.7, batch = 0.3 }}
"""


def _write_scenario(folder: Path, blocks: int = 1500) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny.toml").write_text(SCENARIO.format(blocks=blocks, trace=TRACE))
    (folder / "suite.toml").write_text("replications = 3\n")


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    if not TRACE.is_file():
        pytest.skip(f"benchmark workload {TRACE} is missing")
    folder = tmp_path / "suite"
    _write_scenario(folder)
    res = runner.invoke(app, ["regress", str(folder), "--baseline", str(tmp_path / "base"),
                              "--update", "--jobs", "1"])
    assert res.exit_code == 0, res.output
    return folder


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["regress", *args, "--jobs", "1"])


def test_unchanged_code_exits_0(suite: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    res = invoke(str(suite), "--baseline", str(base))
    assert res.exit_code == 0, res.output
    assert "regress ok: 0 regressed" in res.output
    assert "tiers.interactive.ttft_s.p99" in res.output


def test_worst_case_reservations_exit_1_naming_the_metric(suite: Path, tmp_path: Path) -> None:
    # overcommit_ratio 0.5 -> 1.0: every request reserves its worst case, fewer fit, TTFT rises
    res = invoke(str(suite), "--baseline", str(tmp_path / "base"),
                 "--set", "policy_params.overcommit_ratio=1.0")
    assert res.exit_code == 1, res.output
    assert "FAIL tiny: tiers.interactive.ttft_s.p99 regressed" in res.output
    line = next(x for x in res.output.splitlines() if x.startswith("tiers.interactive.ttft_s.p99"))
    assert line.split()[-3:-1][0] == "welch" and float(line.split()[-2]) < 0.05
    assert line.endswith("REGRESSED")
    assert "regress REGRESSED:" in res.output


def test_fewer_kv_blocks_exit_1_with_reports(suite: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    junit, md = tmp_path / "r" / "junit.xml", tmp_path / "r" / "summary.md"
    res = invoke(str(suite), "--baseline", str(base), "--set", "engine.num_gpu_blocks=1000",
                 "--junit", str(junit), "--markdown", str(md))
    assert res.exit_code == 1, res.output
    assert "FAIL tiny: tiers.interactive.ttft_s.p99 regressed" in res.output
    root = ET.parse(junit).getroot()
    assert int(root.get("failures", "0")) >= 1
    failed = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None}
    assert "tiers.interactive.ttft_s.p99" in failed
    assert {c.get("classname") for c in root.iter("testcase")} == {"kvbudget.regress.tiny"}
    text = md.read_text()
    assert text.startswith("## kvbudget regress: regressions found")
    assert "- `tiny`: tiers.interactive.ttft_s.p99 regressed:" in text
    assert "| `tiers.interactive.ttft_s.p99` | higher |" in text and "**REGRESSED**" in text


def test_an_improvement_passes(suite: Path, tmp_path: Path) -> None:
    # the same KV blocks on a GPU with more HBM bandwidth: every step is faster
    res = invoke(str(suite), "--baseline", str(tmp_path / "base"), "--set", "gpu=H200-141GB")
    assert res.exit_code == 0, res.output
    assert "improved" in res.output and "regress ok: 0 regressed" in res.output


def test_a_slower_engine_regresses_the_throughput(suite: Path, tmp_path: Path) -> None:
    """The same KV blocks on a GPU with less HBM bandwidth: every step is slower, the same
    requests complete later; the baseline's throughput (over first arrival to last finish)
    says so, where the arrival window's would show the same figure."""
    res = invoke(str(suite), "--baseline", str(tmp_path / "base"), "--set", "gpu=A100-80GB")
    assert res.exit_code == 1, res.output
    line = next(x for x in res.output.splitlines()
                if x.startswith("overall.sustained_output_tokens_per_s"))
    assert line.endswith("REGRESSED"), line


def test_corrupted_baseline_exits_2_with_one_line(suite: Path, tmp_path: Path) -> None:
    path = tmp_path / "base" / "tiny.toml"
    text = path.read_text()
    path.write_text(text.replace('worse = "higher"', 'worse = "up"', 1))
    res = invoke(str(suite), "--baseline", str(tmp_path / "base"))
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"error: {path}: metrics.")
    assert ".worse: Input should be 'higher' or 'lower', got 'up'" in lines[0]
    path.write_text(text[: len(text) // 2])
    res = invoke(str(suite), "--baseline", str(tmp_path / "base"))
    assert res.exit_code == 2 and "not valid TOML" in res.stderr


def test_missing_baseline_and_unknown_metric_exit_2(suite: Path, tmp_path: Path) -> None:
    res = invoke(str(suite), "--baseline", str(tmp_path / "nowhere"))
    assert res.exit_code == 2 and "no baseline for scenario 'tiny'" in res.stderr
    path = tmp_path / "base" / "tiny.toml"
    path.write_text(path.read_text().replace("tiers.interactive.ttft_s.p99",
                                             "tiers.chat.ttft_s.p99"))
    res = invoke(str(suite), "--baseline", str(tmp_path / "base"))
    assert res.exit_code == 2
    assert "metrics.\"tiers.chat.ttft_s.p99\"" in res.stderr and "no 'chat' in tiers" in res.stderr


def test_update_keeps_tolerances_and_writes_values_from_the_run(
    suite: Path, tmp_path: Path
) -> None:
    path = tmp_path / "base" / "tiny.toml"
    edited = path.read_text().replace("rel_tol = 0.1\n", "rel_tol = 0.25\n", 1)
    path.write_text(edited)
    res = invoke(str(suite), "--baseline", str(tmp_path / "base"), "--update",
                 "--set", "engine.num_gpu_blocks=1000")
    assert res.exit_code == 0, res.output
    assert f"wrote {path}" in res.output
    b = read_baseline(path)
    assert b.metrics["tiers.interactive.ttft_s.p50"].rel_tol == 0.25
    assert b.seeds == [0, 1, 2]
    # the values are the run's: with the same override the new baseline passes
    res = invoke(str(suite), "--baseline", str(tmp_path / "base"),
                 "--set", "engine.num_gpu_blocks=1000")
    assert res.exit_code == 0, res.output


def test_json_baseline_and_bad_suite_file(suite: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    b = read_baseline(base / "tiny.toml")
    (base / "tiny.toml").unlink()
    (base / "tiny.json").write_text(json.dumps(b.model_dump(), indent=1))
    assert invoke(str(suite), "--baseline", str(base)).exit_code == 0
    (suite / "suite.toml").write_text("replications = 0\n")
    res = invoke(str(suite), "--baseline", str(base))
    assert res.exit_code == 2
    assert "suite.toml: replications: Input should be greater than or equal to 1, got 0" in (
        res.stderr)


def test_replications_use_consecutive_seeds(tmp_path: Path) -> None:
    if not TRACE.is_file():
        pytest.skip(f"benchmark workload {TRACE} is missing")
    folder = tmp_path / "s"
    _write_scenario(folder)
    (folder / "suite.toml").write_text("replications = 2\n[scenarios.tiny]\nseeds = [4, 9]\n")
    shutil.copy(folder / "tiny.toml", folder / "other.toml")
    s = load_suite(folder)
    assert {x.name: x.seeds for x in s.scenarios} == {"other": (0, 1), "tiny": (4, 9)}
    assert s.alpha == 0.05


def test_bad_scenarios_exit_2_naming_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    _write_scenario(folder)
    scenario = folder / "tiny.toml"
    good = scenario.read_text()
    scenario.write_text(good.replace("num_gpu_blocks = 1500", "num_gpu_blocks = 0"))
    res = invoke(str(folder), "--baseline", str(tmp_path / "b"), "--update")
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {scenario}: engine.num_gpu_blocks")
    # a trace that is not there is found when the workload is built, in the run
    scenario.write_text(good.replace(str(TRACE), str(tmp_path / "gone.jsonl")))
    res = invoke(str(folder), "--baseline", str(tmp_path / "b"), "--update")
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {scenario}: ") and "gone.jsonl" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    res = invoke(str(tmp_path / "nothing"), "--baseline", str(tmp_path / "b"))
    assert res.exit_code == 2 and "no such suite folder or scenario file" in res.stderr
