"""Figures the docs quote in prose (outside the examples tests/docs/test_docs.py runs and the
benchmark tables tests/benchmarks recomputes), each computed here from the library at the
precision shown. A failure says what the sentence should read."""

from __future__ import annotations

import ast
import dataclasses
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pydantic import ValidationError

import kvbudget as kb
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.kv_capacity import num_gpu_blocks
from kvbudget.perf.models import get_model
from kvbudget.results.said import context_cut
from kvbudget.simulator.engine_config import ENGINE_NAMES, EngineConfig
from kvbudget.simulator.scenario import EngineSpec, scenario_from_dict
from kvbudget.workloads.spec import FixedCapSpec, TierSpec
from kvbudget.workloads.traces import load_trace
from tests.conftest import SHARED

REPO = Path(__file__).resolve().parents[2]
ENGINE_START_S = 14.18  # the autoscaler's default engine_start_s (docs/autoscaling.md's table)


def flat(doc: str) -> str:
    return " ".join((REPO / "docs" / doc).read_text().split())


def cold_start_s(gpu: str, model: str, tp: int) -> tuple[float, float]:
    """(seconds, GB a GPU): the weights of one GPU over its PCIe link, then the engine start."""
    weights = get_model(model).weight_bytes(tp)
    return weights / get_gpu(gpu).pcie_bandwidth_bytes_s + ENGINE_START_S, weights / 1e9


def test_autoscaling_cold_starts() -> None:
    text = flat("autoscaling.md")
    small, small_gb = cold_start_s("H100-80GB", "Llama-3.1-8B", 1)
    big, big_gb = cold_start_s("A100-80GB", "Llama-3.1-70B", 2)
    should = (f"comes up in {small:.2f} s by default ({small_gb:.2f} GB of bf16 weights at the "
              f"H100's 64 GB/s, then 14.18 s); Llama-3.1-70B at `tensor_parallel_size = 2` on "
              f"A100-80GB in {big:.2f} s ({big_gb:.1f} GB a GPU at 32 GB/s)")
    assert should in text, should
    assert f"the new replicas take requests {small:.1f} s later" in text, small
    assert f"a 70B replica takes {big:.1f} s to come up" in text, big


def servegen_block() -> dict[str, Any]:
    """The scenario of docs/autoscaling.md's ServeGen example, as its python block writes it."""
    doc = (REPO / "docs" / "autoscaling.md").read_text()
    text = doc.split('name = "servegen-tenant-returns"', 1)[1].split('"""', 1)[0]
    data = tomllib.loads('name = "servegen-tenant-returns"' + text)
    data["workload"]["path"] = str(SHARED / data["workload"]["path"].removeprefix("../shared/"))
    return data


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "traces" / "servegen").is_dir(), reason="needs ../shared")
def test_autoscaling_servegen_prose() -> None:
    """"the tenant returns at 1,800 s, the second replica boots at the 1,890 s evaluation ...
    the third at the 2,010 s one (up at 2,027 s); it touches four ...: 14 % fewer GPU-hours"
    (the autoscaled run; the fixed fleet holds three replicas of two GPUs for two hours)."""
    scenario = scenario_from_dict(servegen_block(), Path("."))
    run = kb.simulate(scenario.workload(), scenario.make_policy(), scenario.sim_config())
    tl, scale = run.timeline, run.summary["engine"]["fleet"]["autoscale"]
    booting = np.asarray(tl["num_replicas_booting"])
    starts = np.asarray(tl["time_s"])[1:][np.diff(booting) > 0]
    ups = np.asarray(tl["time_s"])[1:][np.diff(np.asarray(tl["num_replicas_up"])) > 0]
    fixed_gpu_hours = 3 * scale["gpus_per_replica"] * 7200 / 3600
    fewer = 100 * (1 - scale["gpu_hours"] / fixed_gpu_hours)
    should = (f"returns at {run.records['arrival_s'].min():,.0f} s, the second replica boots at "
              f"the {starts[0]:,.0f} s evaluation (a 70B replica takes "
              f"{scale['scale_up_delay_s']:.1f} s to come up) and the third at the "
              f"{starts[1]:,.0f} s one (up at {ups[1]:,.0f} s); it touches "
              f"{['none', 'one', 'two', 'three', 'four', 'five'][scale['peak_replicas']]} at the "
              f"busiest minutes and comes back down after the 300 s window: the same tail latency "
              f"for {fewer:.0f} % fewer GPU-hours")
    assert should in flat("autoscaling.md"), should


def test_tuning_quotes_the_default_rate() -> None:
    from kvbudget.workloads.spec import DEFAULT_RATE_RPS

    should = f"The default scenario offers {DEFAULT_RATE_RPS:g} requests/s"
    assert should in flat("tuning.md"), should


def test_models_table_figures() -> None:
    """docs/models.md's presets table: the computed parameter counts (and the published one's
    error), active parameters of MoE models, KV bytes per token (bf16, TP1) and the full /
    sliding attention layers, as ``perf.models`` computes them; a failure prints the row."""
    from kvbudget.perf.models import preset_names
    from tests.benchmarks.doc_figures import rewrite, row_line, stale, table_rows

    text = (REPO / "docs" / "models.md").read_text()
    rows = {r[0]: r for r in table_rows(text, "| preset | Hugging Face repo |")}
    assert set(preset_names()) <= set(rows)
    problems = []
    for name in preset_names():
        cells, m = rows[name], get_model(name)
        values = {4: [m.num_params / 1e9], 8: [float(m.kv_bytes_per_token(1))],
                  9: [float(m.num_full_attention_layers), float(m.num_sliding_layers)]
                  + ([float(m.sliding_window)] if m.sliding_window and m.num_sliding_layers
                     else [])}
        if m.num_params_published is not None:
            values[5] = [m.num_params_published / 1e9,
                         100 * (m.num_params / m.num_params_published - 1)]
        if m.moe is not None:
            values[6] = [m.num_active_params / 1e9]
        if any(stale(cells[i], v) for i, v in values.items()):
            now = [rewrite(c, values[i]) if i in values else c for i, c in enumerate(cells)]
            problems.append(f"was {row_line(cells)}\nnow {row_line(now)}")
    assert not problems, "docs/models.md presets table: stale rows\n" + "\n".join(problems)


def test_models_provenance_names_shared_files_as_the_docs_do() -> None:
    """docs/models.md's "config copied from" column names a file of the shared data folder as
    every page does, ``../shared/...`` from the repository (it showed a machine's
    ``/work/shared/bench/...``), and that file is there."""
    from tests.benchmarks.doc_figures import table_rows

    text = (REPO / "docs" / "models.md").read_text()
    cells = [row[1] for row in table_rows(text, "| preset | config copied from |")]
    assert not [c for c in cells if "/work/" in c], "a machine path in the provenance table"
    shared = [p for c in cells for p in re.findall(r"\.\./shared/(\S+)", c)]
    assert shared and all((SHARED / p).is_file() for p in shared), shared


def test_docs_and_bundled_configs_name_no_machine_path() -> None:
    """The pages and the bundled model configs' ``_kvbudget.source`` name files as a reader
    finds them: ``../shared/...`` beside the repository, or a public repository at a commit.
    Llama-2-7B's source and docs/performance.md (twice: ``/work/ref``) named one machine's
    ``/work/...``, which no reader has."""
    pages = [REPO / "README.md", REPO / "DEVELOPERS.md", *sorted((REPO / "docs").glob("*.md"))]
    configs = sorted((REPO / "perf" / "model_configs").glob("*.json"))
    found = [f"{p.relative_to(REPO)}: {m}" for p in (*pages, *configs)
             for m in re.findall(r"(?<![\w.])/work/\S*", p.read_text())]
    assert not found, found
    sources = [str(json.loads(p.read_text()).get("_kvbudget", {}).get("source", ""))
               for p in configs]
    shared = [s for src in sources for s in re.findall(r"\.\./shared/(\S+)", src)]
    assert shared and all((SHARED / s).is_file() for s in shared), shared


@pytest.mark.skipif(not (SHARED / "traces" / "servegen").is_dir(), reason="needs ../shared")
def test_workloads_servegen_fitted_rates() -> None:
    """docs/workloads.md, ServeGen: chunk 143's Weibull window at 600 s (the rate its fit's mean
    gap means, ``scale * Gamma(1 + 1/shape)``, against the measured rate) and how many more
    requests the fits give over its first day than its recorded rates (in expectation)."""
    import csv
    import math

    path = SHARED / "traces" / "servegen" / "language" / "m-large" / "chunk-143-trace.csv"
    with path.open() as f:
        rows = [r for r in csv.reader(f) if r and r[3] in ("Gamma", "Weibull") and float(r[1]) > 0]

    def gap(r: list[str]) -> float:
        shape, scale = float(r[4]), float(r[5])
        return shape * scale if r[3] == "Gamma" else scale * math.gamma(1 + 1 / shape)

    window = next(r for r in rows if float(r[0]) == 600)
    day = [r for r in rows if float(r[0]) < 86_400]
    more = sum(600 / gap(r) for r in day) / sum(600 * float(r[1]) for r in day) - 1
    should = (f"(chunk 143 at 600 s: a {window[3]} fit whose mean gap means {1 / gap(window):.0f} "
              f"req/s against {float(window[1]):.1f} measured), so over a day chunk 143 gets "
              f"about {100 * more:.0f}% more requests than its recorded rates")
    assert should in " ".join((REPO / "docs" / "workloads.md").read_text().split()), should


@pytest.mark.parametrize(("config", "shown"), [
    ({"model_type": "rwkv"}, "error: {path}: model_type: 'rwkv' is not supported (supported: "
                             "llama, "),
    ({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100,
      "intermediate_size": 128, "max_position_embeddings": 128},
     "error: {path}: num_hidden_layers: missing (needed to size the model)"),
])
def test_models_refusals_are_the_shown_lines(tmp_path: Path, config: dict[str, Any],
                                             shown: str) -> None:
    """docs/models.md, "What is read": the two refusal lines it shows (exit 2; the doc's
    ``...`` elides the list of families)."""
    import json
    import subprocess
    import sys

    doc = (REPO / "docs" / "models.md").read_text()
    assert shown.format(path="/models/" + ("x" if "rwkv" in shown else "y") + "/config.json") \
        .removesuffix("llama, ") in doc
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    res = subprocess.run([sys.executable, "-c", "from kvbudget.cli.main import main; main()",
                          "simulate", "--model", str(path), "--set", "workload.duration_s=1"],
                         capture_output=True, text=True, check=False, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith(shown.format(path=path)), res.stderr


def test_the_tuning_docs_summarize_the_throughput_that_tells_configurations_apart() -> None:
    """docs/tuning.md's sweep snippet summarised ``batch_output_tokens_per_s``, the batch tokens
    over the arrival window, equal at every configuration that completes the same requests: a
    newcomer copying it compared a figure that cannot differ. It summarises the tables'
    ``out tok/s`` (first arrival to last finish), and the column list says which is which."""
    text = flat("tuning.md")
    assert ('summarize_points(df, ["interactive_ttft_p99_s", '
            '"batch_sustained_output_tokens_per_s"])') in text
    assert ("`batch_output_tokens_per_s` (the same tokens over the arrival window: equal for "
            "every configuration that completes the same requests)") in text


@pytest.mark.skipif(not (SHARED / "traces" / "burstgpt").is_dir(), reason="needs ../shared")
def test_workloads_publishers_columns_figures() -> None:
    """docs/workloads.md, "What each format's columns mean": the BurstGPT ``_3`` slice's first
    ``Timestamp`` (the rebased clock's origin, in days and seconds after the file's midnight),
    that ``Total tokens`` is the sum of the other two, and that the shared Mooncake trace has
    ``ceil(input_length / 512)`` hashes a row; each as the loader reads it."""
    import csv
    import json
    import math

    doc = " ".join((REPO / "docs" / "workloads.md").read_text().split())
    path = SHARED / "traces" / "burstgpt" / "burstgpt3_slice.csv"
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    first = min(float(r["Timestamp"]) for r in rows)
    days, rest = divmod(first, 86_400)
    should = (f"the `_3` slice's first request is at {first:,.0f} s, {days:.0f} days and "
              f"{rest:.0f} s in")
    assert should in doc, should
    assert load_trace(path).workload.arrival_s[0] == 0.0  # rebased to that request
    windowed = load_trace(path, kb.TraceOptions(window=(19_440_000.0, 19_443_600.0)))
    said = next(a for a in windowed.report.assumed if a.startswith("the window"))
    assert f"`assumed: {said.split(' (')[0]} ...`" in doc, said
    for name in ("burstgpt_slice.csv", "burstgpt3_slice.csv"):
        with (SHARED / "traces" / "burstgpt" / name).open(newline="") as fh:
            assert all(int(r["Request tokens"]) + int(r["Response tokens"])
                       == int(r["Total tokens"]) for r in csv.DictReader(fh))
    assert "`Total tokens` is their sum" in doc
    mooncake = SHARED / "traces" / "mooncake" / "synthetic_trace.jsonl"
    with mooncake.open() as fh:
        records = [json.loads(line) for line in fh]
    assert all(len(r["hash_ids"]) == math.ceil(r["input_length"] / 512) for r in records)
    assert "(true of every row of `../shared/traces/mooncake/synthetic_trace.jsonl`)" in doc
    one = load_trace(SHARED / "traces" / "burstgpt" / "burstgpt_slice.csv")
    models = next(a for a in one.report.assumed if "models" in a)
    assert f"`assumed: {models.split(' column)')[0]} column) ...`" in doc, models


def test_the_tuning_docs_say_which_throughput_compare_replications_weighs() -> None:
    """docs/tuning.md said compare -r's throughput was over the offered window, so policies
    completing the same batch tokens would show 'same': compare weighs the tables' out tok/s
    (first arrival to last finish), which the paragraph now says."""
    from kvbudget.simulator.scenario import scenario_from_dict
    from kvbudget.studies.compare import default_metrics
    from tests.conftest import small_scenario_dict

    metrics = default_metrics(scenario_from_dict(small_scenario_dict(40, 4.0), Path(".")))
    assert "batch_sustained_output_tokens_per_s" in metrics
    assert "batch_output_tokens_per_s" not in metrics
    text = flat("tuning.md")
    assert ("(batch throughput is the tables' `out tok/s`, output tokens over first arrival to "
            "last finish: of two policies that complete the same batch tokens, the one that "
            "finishes them sooner shows more;") in text
    assert "throughput is over the offered window: policies that complete" not in text


def live_validation_runs() -> list[dict[str, float]]:
    """docs/live.md's table of past ``calibrate`` / ``validate`` runs, its percentages and the
    measured p50 TPOT as numbers."""
    lines = (REPO / "docs" / "live.md").read_text().splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("| run | p50 TTFT"))
    header = [c.strip() for c in lines[first].strip("|").split("|")]
    assert header[3] == "output tok/s (arrival window)", header  # the definition of its day
    runs = []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        runs.append({"ttft": float(cells[1].rstrip("%")), "tpot": float(cells[2].rstrip("%")),
                     "tpot_ms": float(cells[8].removesuffix(" ms"))})
    return runs


def test_the_live_validation_prose_is_what_its_table_shows() -> None:
    """The counts and ranges docs/live.md draws from its table of one-off live runs (which no
    test can redo: their run directories were not kept) are the table's."""
    runs = live_validation_runs()
    both = [i for i, r in enumerate(runs, start=1) if abs(r["ttft"]) <= 15 and abs(r["tpot"]) <= 15]
    ttft = sum(abs(r["ttft"]) <= 15 for r in runs)
    words = {8: "eight", 9: "nine"}
    lo, hi = min(r["tpot_ms"] for r in runs), max(r["tpot_ms"] for r in runs)
    text = flat("live.md")
    assert both == [1, 2, 3, 8, 9], both
    assert (f"p50 TTFT and p50 TPOT are both within 15% in runs 1-3, 8 and 9; p50 TTFT alone in "
            f"{words[ttft]} of the {words[len(runs)]}.") in text
    assert f"ranged from {lo:.1f} to {hi:.1f} ms" in text
    # one-off runs: the prose dates them and says which throughput they compared
    assert "on 2026-11-29 with the cost model and calibration of that day" in text
    assert ("completed output tokens over first to last arrival, `validate`'s definition that "
            "day") in text


def test_the_live_docs_claim_no_accuracy_the_live_test_does_not_check() -> None:
    """docs/live.md said the live test checks ``validate`` within 15% on throughput and 50% on
    p50 TTFT and TPOT; it asserts only that each error is finite (``KEY_METRICS``' note)."""
    live_test = (REPO / "tests" / "live" / "test_live_vllm.py").read_text()
    assert "math.isfinite(err)" in live_test and "0.15" not in live_test
    cpu_section = flat("live.md").split("## The CPU vLLM of the tests", 1)[1]
    assert "within 15% on throughput" not in cpu_section
    assert ("runs end to end with a finite relative error for p50 TTFT, p50 TPOT and output "
            "tok/s") in cpu_section


def test_the_analysis_docs_size_the_token_gaps_as_a_run_writes_them(tmp_path: Path) -> None:
    """docs/analysis.md sized ``token_gaps.parquet`` at "2.2 M gaps in 137,000 rows" for
    10,000 conversation requests, a figure nothing computed: ``conv_n10000_q6`` on the defaults
    writes 130,219 rows. The sentence names its run now, and its figures are that run's at the
    precision shown (rows to the thousand, gaps to 0.1 M, files to 0.1 MB)."""
    text = flat("analysis.md")
    quoted = re.search(r"conv_n10000_q6\.jsonl`, 10,000 conversation requests on the default "
                       r"H100 and Llama-3\.1-8B: ([\d.]+) M gaps in ([\d,]+) rows, ([\d.]+) MB, "
                       r"beside ([\d.]+) MB of records", text)
    assert quoted, "docs/analysis.md no longer sizes token_gaps.parquet on conv_n10000_q6"
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "kvbudget", "simulate", "--trace",
         str(SHARED / "bench" / "conv_n10000_q6.jsonl"), "--out", str(out)],
        capture_output=True, text=True, cwd=REPO, check=False)
    assert done.returncode == 0, done.stderr
    gaps = pd.read_parquet(out / "token_gaps.parquet")
    shown = (f"{gaps['num_gaps'].sum() / 1e6:.1f}", f"{round(len(gaps), -3):,}",
             f"{(out / 'token_gaps.parquet').stat().st_size / 1e6:.1f}",
             f"{(out / 'requests.parquet').stat().st_size / 1e6:.1f}")
    assert quoted.groups() == shown, f"should read: {shown}"


def test_the_docs_count_the_identity_checks_cases_as_the_script_has_them() -> None:
    """docs/clients.md said a run without clients left "the 26 reference cases of the
    byte-identity check" unchanged, while ``scripts/engine_identity.py`` has 50: a reader who
    ran it found twice as many. A count of its cases the docs state in the present is the
    script's (docs/performance.md is a dated log: each entry's count is that day's)."""
    spec = importlib.util.spec_from_file_location(
        "engine_identity", REPO / "scripts" / "engine_identity.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    num_cases = len(script.cases())
    quoted = re.search(r"`scripts/engine_identity\.py`, (\d+) now", flat("clients.md"))
    assert quoted, "docs/clients.md no longer says how many cases the identity check has"
    assert int(quoted.group(1)) == num_cases, f"should read: {num_cases} now"
    for doc in sorted((REPO / "docs").glob("*.md")):
        if doc.name != "performance.md":
            stale = re.findall(r"\b(\d+) reference cases", flat(doc.name))
            assert all(int(n) == num_cases for n in stale), (doc.name, stale, num_cases)


def test_the_live_docs_say_the_burst_the_live_test_sends() -> None:
    """docs/live.md said the live test's burst was "12 requests of 128 prompt and 384 output
    tokens"; the test sends 128 + 256 (384 in all, 3 blocks of 128). The sentence is the call's
    arguments, read from the test itself."""
    source = (REPO / "tests" / "live" / "test_live_vllm.py").read_text()
    test = next(node for node in ast.parse(source).body if isinstance(node, ast.FunctionDef)
                and node.name == "test_conservative_never_preempts_overcommit_does")
    call = next(node for node in ast.walk(test) if isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "burst_trace")
    n, prompt, output = (ast.literal_eval(a) for a in call.args[1:4])
    blocks = -(-(prompt + output) // 128)
    should = (f"{n} requests of {prompt} prompt and {output} output tokens ({blocks} blocks "
              f"each, against 9 usable)")
    assert should in flat("live.md"), should


def test_the_workloads_docs_give_the_fixed_caps_default_where_it_is() -> None:
    """docs/workloads.md's table gave the ``fixed`` rule's ``tokens`` a default of 2,048; a
    scenario's ``max_output = { kind = "fixed" }`` is refused ("max_output.tokens is
    required"): 2,048 is what a tier declares when it gives no ``max_output`` at all."""
    with pytest.raises(ValidationError, match="tokens"):
        FixedCapSpec.model_validate({"kind": "fixed"})
    default = TierSpec.model_fields["max_output"].default
    assert isinstance(default, FixedCapSpec)
    should = ("every request declares `tokens` (required: `{ kind = \"fixed\" }` alone is "
              f"refused; a tier without `max_output` declares {default.tokens:,})")
    assert should in flat("workloads.md"), should


def test_autoscaling_servegen_kv_of_a_pair() -> None:
    """docs/autoscaling.md's ServeGen example: "a pair holds 35,520 tokens of KV, less than one
    request at the model's 131,072-token context", computed as vLLM sizes it (A100-80GB's
    defaults, two GPUs)."""
    model, gpu = get_model("Llama-3.1-70B"), get_gpu("A100-80GB")
    engine = EngineConfig().resolved(gpu)  # vLLM's defaults on the GPU, as presets take them
    tokens = num_gpu_blocks(gpu, model, gpu_memory_utilization=engine.memory_utilization,
                            max_num_seqs=engine.seqs_limit,
                            max_num_batched_tokens=engine.batched_tokens_limit,
                            tensor_parallel_size=2) * 16
    assert tokens < model.max_position_embeddings
    should = (f"a pair holds {tokens:,} tokens of KV, less than one request at the model's "
              f"{model.max_position_embeddings:,}-token context")
    assert should in flat("autoscaling.md"), should


def test_the_scenario_docs_name_every_engine_knob() -> None:
    """docs/scenarios.md's ``[engine]`` row never named ``name`` (the engine whose rules are
    simulated: ``vllm``, ``vllm-swap``, ``tgi``, ``sglang``, ``trtllm``), though the row
    spoke of "engines ``vllm``, ``vllm-swap``", nor the knobs of the other engines
    (``preemption_mode``, ``swap_space_gib``, ``schedule_conservativeness``,
    ``capacity_scheduler_policy``): a scenario author could not find how to pick one. Every
    field of ``[engine]`` is named there now, with its default where it has one."""
    doc = (REPO / "docs" / "scenarios.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `[engine]`"))
    missing = [f.name for f in dataclasses.fields(EngineSpec) if f"`{f.name}`" not in row
               and f.name != "speculative_config"]  # the [engine.speculative_config] row's
    assert not missing, f"docs/scenarios.md's [engine] row does not name {missing}"
    defaults = EngineConfig()
    for engine in ENGINE_NAMES:
        assert f"`{engine}`" in row, engine
    assert f"`{defaults.name}` (the default)" in row
    assert f"`swap_space_gib`, {defaults.swap_space_gib:g}," in row
    assert f"`schedule_conservativeness`, {defaults.schedule_conservativeness:.1f})" in row


def test_the_live_docs_quote_the_context_cut_line_as_it_is_written() -> None:
    """docs/live.md quoted the replay's line as "cut the output of 1 requests at the context
    left"; the line counts its noun (``results.said.context_cut``: "1 request"). The quote is
    the function's line, its tail elided."""
    line = context_cut("max_model_len 1,024 (the server's)", 1)
    head = line.split(": ", 1)[0]
    assert f"`{head}: ...`" in flat("live.md"), head
