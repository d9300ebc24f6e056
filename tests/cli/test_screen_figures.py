"""The figures a first screen prints are written as its tables write them (``1,548``, not
``1548.36``), with their units said, and its lines fit the tables' width."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import pytest
import tomli_w
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.said import WIDTH, figure
from kvbudget.studies.tune import Constraint, Evaluation, tiebreak
from kvbudget.workloads.traces import load_trace
from tests.conftest import small_scenario_dict


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def _tune(tmp_path: Path, *extra: str) -> tuple[str, dict[str, object]]:
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(small_scenario_dict(120, 8.0, policy_params={
        "overcommit_ratio": 0.5})))
    out = tmp_path / "tuned"
    code, stdout, stderr = run(
        "tune", "--scenario", scenario, "--out", out, "--param",
        "policy_params.overcommit_ratio=0.2:1", "-r", "2", "--grid-points", "3",
        "--refine-evals", "0", "--validate", "0", "-j", "1", *extra)
    assert code == 0, stderr
    return stdout, json.loads((out / "tune.json").read_text())


def test_tune_flat_line_is_wrapped_and_in_the_tables_figures(tmp_path: Path) -> None:
    """``kvbudget tune``'s "flat:" line ran on for 260 columns and printed its objective raw
    ("is 1548.36 .. 1548.36") under a table that shows 1,548, and its tie-break said "the most
    constraint slack (1 of its tightest limit)". It is wrapped like the lines around it, its
    figures as the table writes them, the slack a share of the limit."""
    stdout, said = _tune(tmp_path, "--constraint", "overall_slo_attainment>=0.5",
                         "--objective", "batch_output_tokens_per_s")
    flat = said["objective_flatness"]
    assert isinstance(flat, dict) and flat["flat"] is True
    assert max(len(line) for line in stdout.splitlines() if not line.startswith("wrote ")) \
        <= WIDTH, stdout
    text = " ".join(stdout.split())
    assert (f"flat: batch_output_tokens_per_s is {figure(flat['low'])} .. "
            f"{figure(flat['high'])} over 2 feasible settings") in text, text
    assert f"{flat['low']:.6g}" not in text, text
    kept_by = flat["kept_by"]
    assert isinstance(kept_by, str) and f"chosen by {kept_by}" in text, text
    # the settings tie on slack here: the sustained rate chose, in the table's figures
    assert kept_by.startswith("the highest batch_sustained_output_tokens_per_s (output tokens "
                              "over first arrival to last finish: "), kept_by
    assert not re.search(r"\d\.\d{3,}|\d{4}", kept_by), kept_by


def test_a_tie_broken_by_slack_says_the_slack_as_a_share_of_the_limit() -> None:
    """The tie-break said "the most constraint slack (1 of its tightest limit)": 1 what."""
    limit = Constraint.parse("overall_slo_attainment>=0.5")
    evals = [Evaluation(i, "grid", {"x": i}, (100.0, 99.0, 101.0), [(limit, True, b, b)],
                        [{"obj": 100.0}]) for i, b in enumerate((0.6, 0.75))]
    assert tiebreak(evals, evals[1], "obj", True) == (
        "the most constraint slack (50% of the limit to spare on its tightest constraint)")


def test_tune_best_line_is_in_the_tables_figures(tmp_path: Path) -> None:
    """The "best:" line printed "= 1791.66 (95% CI 1700.23 .. 1883.09, ...)" beside a table of
    1,792; it writes them as the table does. The table's header ran to 111 columns on the
    default objective's full name: it takes sweep's short name (the line below says the
    full one)."""
    stdout, said = _tune(tmp_path)
    assert max(len(line) for line in stdout.splitlines() if not line.startswith("wrote ")) \
        <= WIDTH, stdout
    assert stdout.splitlines()[0].split()[2:6] == ["batch", "out", "tok/s", "(mean)"], stdout
    best = said["best"]
    assert isinstance(best, dict)
    objective = best["objective"]
    assert isinstance(objective, dict)
    mean, low, high = objective["mean"], objective["ci_low"], objective["ci_high"]
    text = " ".join(stdout.split())
    assert (f"batch_sustained_output_tokens_per_s = {figure(mean)} (95% CI {figure(low)} .. "
            f"{figure(high)}, 2 replications)") in text, text
    assert f"{mean:.6g}" not in text


def test_the_kv_table_says_its_token_columns_and_res_eff(tmp_path: Path) -> None:
    """The KV table put "used p99 371,418" beside "KV used 0.738" with no unit for the one (the
    note said only that KV used/reserved are fractions), and "res. eff.", "preempt" and
    "revoke" were not explained. The note says them; the column is the tokens in use, the 99th
    percentile of the timeline's samples."""
    import numpy as np
    import pandas as pd

    code, stdout, stderr = run("simulate", "--set", "workload.duration_s=20", "--out",
                               tmp_path / "run")
    assert code == 0, stderr
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    timeline = pd.read_parquet(tmp_path / "run" / "timeline.parquet")
    used_p99 = summary["kv"]["used_p99"]
    assert used_p99 == float(np.percentile(timeline["kv_used_tokens"], 99))
    row = next(ln.split() for ln in stdout.splitlines() if ln.startswith("conservative ")
               and len(ln.split()) == 9)
    assert row[4] == figure(used_p99) and row[5] == figure(summary["kv_capacity_tokens"]), row
    note = " ".join(stdout.split())
    assert ("used p99: the tokens in use, 99th percentile of the timeline's samples, and KV "
            "capacity in tokens; res. eff.: KV used over KV reserved; preempt, revoke: the "
            "engine's preemptions, the gateway's revocations;") in note, note
    code, stdout, stderr = run("simulate", "--set", "workload.duration_s=20", "--wide")
    assert code == 0, stderr
    wide = " ".join(stdout.split())
    assert "KV used p99: the tokens in use" in wide, wide
    assert "wall s: the wall-clock time the run itself took to compute or replay" in wide, wide


def test_the_presets_notes_are_wrapped_to_the_width() -> None:
    """``kvbudget presets`` printed its FP8, aliases and engine-defaults notes as single lines
    of 150 to 370 columns; they are wrapped like its other notes, an alias beside its name."""
    from kvbudget.perf.hardware import GPU_ALIASES

    code, stdout, stderr = run("presets")
    assert code == 0, stderr
    lines = stdout.splitlines()
    for start in ("FP8 -: ", "aliases: ", "and on every GPU "):
        first = next(i for i, ln in enumerate(lines) if ln.startswith(start))
        rest = list(itertools.takewhile(lambda ln: ln.startswith("  "), lines[first + 1:]))
        assert all(len(ln) <= WIDTH for ln in [lines[first], *rest]), [lines[first], *rest]
        if start == "aliases: ":
            note = "\n".join([lines[first], *rest])
            assert all(f"{alias} = {name}" in note for alias, name in GPU_ALIASES.items()), note


def test_the_presets_engine_defaults_note_names_each_knob() -> None:
    """``kvbudget presets`` said '--engine-defaults kvbudget-0.1 for 256 / 8192 / 0.9 / off':
    four figures without their knobs (the note before them named three knobs in another
    order), 8192 without the separator the table above gives 8,192. Each figure is now said with
    its knob's name, from the resolved configurations."""
    from kvbudget.perf.hardware import GPUS
    from kvbudget.simulator.engine_config import EngineConfig

    code, stdout, stderr = run("presets")
    assert code == 0, stderr
    said = " ".join(stdout.split())
    old = EngineConfig().resolved(GPUS["H100-SXM"], "kvbudget-0.1")
    assert (f"--engine-defaults kvbudget-0.1 for max_num_seqs {old.max_num_seqs:,}, "
            f"max_num_batched_tokens {old.max_num_batched_tokens:,}, gpu_memory_utilization "
            f"{old.gpu_memory_utilization:g}, prefix caching off, block_size {old.block_size} on "
            "every GPU") in said, said
    assert "256 / 8192" not in said


def test_every_presets_line_fits_the_width() -> None:
    """Its GPU table (9 columns) ran to 120 columns and its KV-capacity table (a column a GPU)
    to 159: the GPU's figures and vLLM's defaults are two tables, and the capacity table is
    split by GPUs into tables that fit (``render_fitting``), every model in each."""
    from kvbudget.perf.hardware import GPUS

    code, stdout, stderr = run("presets")
    assert code == 0, stderr
    lines = stdout.splitlines()
    assert max(len(ln) for ln in lines) <= WIDTH
    heads = [ln.split() for ln in lines if ln.startswith("model ") and "type" not in ln]
    assert len(heads) >= 2 and all(h[0] == "model" for h in heads)
    assert [g for h in heads for g in h[1:]] == list(GPUS)
    first = lines.index(next(ln for ln in lines if ln.startswith("model ") and "type" not in ln))
    rows = list(itertools.takewhile(bool, lines[first + 2:]))
    start = lines.index(next(ln for ln in lines if ln.split() == heads[1]))
    assert [r.split()[0] for r in lines[start + 2:start + 2 + len(rows)]] == \
        [r.split()[0] for r in rows]


def test_capacity_says_what_its_columns_are(tmp_path: Path) -> None:
    """``kvbudget capacity`` printed "capacity req/s 5.14, per GPU 5.14, bracket high 5.19,
    attain. at cap 0.909" and said nowhere what "bracket high" or "attain. at cap" were, nor
    what "per GPU" divided by; and its criteria line ran past the width. A note says them; the
    figures are capacity.json's."""
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(small_scenario_dict(120, 8.0)))
    out = tmp_path / "cap"
    code, stdout, stderr = run("capacity", "--scenario", scenario, "--out", out, "--policies",
                               "conservative", "-r", "1", "--rel-tol", "0.2", "-j", "1")
    assert code == 0, stderr
    (found,) = json.loads((out / "capacity.json").read_text())["policies"]
    row = next(ln.split() for ln in stdout.splitlines() if ln.startswith("conservative "))
    assert row[1:5] == [figure(found["capacity_rps"]), figure(found["capacity_rps_per_gpu"]),
                        figure(found["bracket_rps"][1]),
                        figure(found["attainment_at_capacity"]["mean"])], (row, found)
    assert all(len(ln) <= WIDTH for ln in stdout.splitlines() if not ln.startswith("wrote "))
    note = " ".join(stdout.split())
    assert ("capacity req/s: the largest offered rate found to meet the criteria (the mean over "
            "the replications of each run's requests over its arrival window, first to last "
            "arrival; per GPU: over "
            "the deployment's GPUs, replicas x tensor-parallel degree); bracket high: the "
            "smallest rate found to miss them; attain. at cap: the mean overall_slo_attainment "
            "at the capacity") in note, note


def test_an_interval_is_written_without_exponents(tmp_path: Path) -> None:
    """``compare -r 3`` printed "inter. out tok/s 613.9 ± 1.2e+02" and "1,804 ± 1.1e+02": the
    half-width in exponent notation beside a figure written out. Both are written out now, the
    half-width to two significant digits."""
    from kvbudget.cli.tables import plus_minus

    assert plus_minus(613.9, 613.9 - 123.4, 613.9 + 123.4) == "613.9 ± 120"
    assert plus_minus(1804.0, 1804.0 - 1149.0, 1804.0 + 1149.0) == "1,804 ± 1,100"
    assert plus_minus(5.0, 5.0 - 99.6, 5.0 + 99.6) == "5 ± 100"
    assert plus_minus(0.0326, 0.0326 - 0.0027, 0.0326 + 0.0027) == "0.0326 ± 0.0027"
    code, stdout, stderr = run("compare", "--policies", "conservative,overcommit", "-r", "3",
                               "-j", "1", "--set", "workload.duration_s=60")
    assert code == 0, stderr
    rows = [ln for ln in stdout.splitlines() if " ± " in ln and "out tok/s" in ln]
    assert rows and not [ln for ln in rows if "e+" in ln], rows


def test_trace_stats_says_the_span_in_a_unit_it_reads_in(tmp_path: Path) -> None:
    """``trace stats`` wrote every span in hours to two decimals: "span 2.0 s (0.00 h)" for a
    short file, and "3,501.7 s (0.97 h)" for the Azure trace, whose run line says "over 58.4
    min". The span is said in the larger unit as a run's line says it."""
    spans = {2.0: "span 2.0 s   rate", 3501.7: "span 3,501.7 s (58.4 min)   rate",
             90_000.0: "span 90,000.0 s (25.0 h)   rate"}
    for span, said in spans.items():
        trace = tmp_path / f"t{span:g}.csv"
        trace.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,10,5\n{span},10,5\n")
        code, stdout, stderr = run("trace", "stats", trace)
        assert code == 0, stderr
        assert said in stdout, stdout
        assert " h)" not in stdout or span >= 7200, stdout


SAID_RATE = re.compile(r"([\d,]+) requests over ([\d.,]+) (s|min|h) \(([\d.]+) req/s"
                       r"(?: at rate scale 1)?: ([\d,]+) gaps? between arrivals\)")
UNIT_S = {"s": 1.0, "min": 60.0, "h": 3600.0}


def _agree(text: str, num: int, rate_format: str = ".3g") -> None:
    """Each ``N requests over SPAN (RATE req/s: G gaps between arrivals)`` in ``text`` says
    ``num`` requests, their ``num - 1`` gaps, and the rate the gaps over the span as printed
    give, to the digits printed."""
    found = SAID_RATE.findall(" ".join(text.split()))
    assert found, text
    for count, span, unit, rate, gaps in found:
        shown = float(span.replace(",", "")) * UNIT_S[unit]
        assert (int(count.replace(",", "")), int(gaps.replace(",", ""))) == (num, num - 1)
        assert format(int(gaps.replace(",", "")) / shown, rate_format) == rate, (span, rate)


@pytest.mark.parametrize("times", [
    [0, 0.3, 0.5, 0.888],  # 3 / 0.888 = 3.38 req/s, printed "0.9 s": 3 / 0.9 = 3.33
    [round(i * 0.1254, 4) for i in range(80)],  # 79 gaps over 9.907 s: 7.97, "9.9 s" 7.98
    [i * 37.3 for i in range(200)],  # minutes: 199 gaps over 123.7 min
])
def test_a_rate_beside_a_count_and_a_span_is_what_they_give(
        times: list[float], tmp_path: Path) -> None:
    """"80 requests over 9.9 s (7.96 req/s)": the rate is over the 79 gaps between the
    arrivals, where a reader divides 80 / 9.9 = 8.08. simulate's line, a study's (one
    replication: its draw's), a workload's repr and trace stats now say the gaps the rate is
    over and the span to the decimals that give it."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{t},100,10\n" for t in times))
    n = len(times)
    code, stdout, stderr = run("simulate", "--trace", trace)
    assert code == 0, stderr
    _agree(stdout.split("\npolicy ")[0], n)
    code, _, stderr = run("sweep", "--trace", trace, "--policies", "unlimited", "-r", "1",
                          "--out", tmp_path / "sweep")
    assert code == 0, stderr
    _agree(stderr.split("\n\n")[0], n)
    assert SAID_RATE.search(" ".join(repr(load_trace(trace).workload).split()))
    _agree(repr(load_trace(trace).workload).splitlines()[0], n)
    code, stdout, stderr = run("trace", "stats", trace)
    assert code == 0, stderr
    rows = re.search(r"rows ([\d,]+) .* span ([\d.,]+) s.* rate ([\d.,]+) req/s \(([\d,]+) gaps\)",
                     stdout)
    assert rows, stdout
    _agree(f"{rows[1]} requests over {rows[2]} s ({rows[3]} req/s: {rows[4]} gaps between "
           "arrivals)", n, ",.3f")


def test_a_studys_setting_lines_are_wrapped(tmp_path: Path) -> None:
    """A study's first line on stderr ("model Llama-3.1-8B (assumed: the default scenario's) on
    H100-SXM (assumed: the default scenario's H100-80GB);
    workload default: 1,617 requests at the scenario's seed (each replication draws its own
    requests and count)") ran to 130 columns where simulate wraps the same words; it is wrapped
    to the width, its words unchanged."""
    from kvbudget.simulator.scenario import load_scenario
    from kvbudget.studies.setting import study_setting
    from kvbudget.studies.sweep import replication_seeds

    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(small_scenario_dict(30, 8.0)))
    code, _, stderr = run("compare", "--scenario", scenario, "--policies", "conservative",
                          "-r", "2", "-j", "1")
    assert code == 0, stderr
    scn = load_scenario(scenario)
    said, _mix = study_setting(scn, seeds=replication_seeds(scn.seed, 2))  # compare -r 2's
    assert len(said) > WIDTH  # the line this test is about
    lines = stderr.splitlines()
    rest = list(itertools.takewhile(lambda ln: ln.startswith("  "), lines[1:]))
    assert all(len(ln) <= WIDTH for ln in [lines[0], *rest]), lines
    assert " ".join([lines[0], *(ln.strip() for ln in rest)]) == said


def test_validate_records_says_its_settings_and_notes_within_the_width(tmp_path: Path) -> None:
    """``validate --records`` printed its settings line as one line of 1,227 columns on a
    vllm bench file and its notes up to 528: each is wrapped like the other notes, no word
    split (a path stays whole)."""
    rate8 = (Path(__file__).resolve().parents[1] / "fixtures" / "recordings" / "vllm-bench-0.32.0"
             / "rate8.json")
    code, _, stderr = run("validate", "--records", rate8, "--model", "Llama-3.1-8B", "--out",
                          tmp_path / "v")
    assert code == 0, stderr
    lines = stderr.splitlines()
    assert lines[0].startswith("settings: model Llama-3.1-8B")
    assert sum(ln.startswith("note: ") for ln in lines) >= 4
    assert all(len(ln) <= WIDTH or " " not in ln.strip() for ln in lines), stderr
    rest = itertools.takewhile(lambda ln: ln.startswith("  "), lines[1:])
    settings = " ".join(" ".join([lines[0], *rest]).split())
    assert "tensor_parallel_size 1 (ASSUMED: the recording does not say how many GPUs served " \
        "the model; pass --tensor-parallel-size)" in settings
