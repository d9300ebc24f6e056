"""What a newcomer's first runs of the study commands print, on the default scenario as the
help's examples give them: a figure that cannot tell settings apart, or an interval that is
not there, misleads at the first screen."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.simulator.scenario import default_scenario
from kvbudget.workloads.arrival_rate import span_said
from kvbudget.workloads.workload import scale_rate


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def test_tune_by_default_tells_the_settings_apart(tmp_path: Path) -> None:
    """``kvbudget tune --policy overcommit --param policy_params.overcommit_ratio=0.1:1``
    (the help's first example) maximised the batch tier's output tokens over the arrival
    window, the same at every setting that completes the same requests: 17 settings at
    3,010 tokens/s, "flat: ... no setting is better than another", while they finished the
    work 5 % apart. Its default objective is now the tables' ``out tok/s`` (first arrival to
    last finish), which names a best; one replication says it has no interval (it printed
    "95% CI nan .. nan, 1 replications")."""
    code, stdout, stderr = run(
        "tune", "--policy", "overcommit", "--param", "policy_params.overcommit_ratio=0.1:1",
        "--grid-points", "3", "--refine-evals", "0", "-r", "1", "--validate", "0", "-j", "1",
        "--out", tmp_path / "tuned")
    assert code == 0, stderr
    assert "flat:" not in stdout, stdout
    said = json.loads((tmp_path / "tuned" / "tune.json").read_text())
    assert said["objective"] == "batch_sustained_output_tokens_per_s", said
    lines = stdout.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith("best: "))
    best = " ".join(" ".join(lines[first:first + 1] + list(  # the line and its wrapped rest
        itertools.takewhile(lambda ln: ln.startswith("  "), lines[first + 1:]))).split())
    assert best.endswith("(no interval from 1 replication)"), best
    assert "nan" not in best


def test_the_tables_say_what_their_latency_quantiles_are_over(tmp_path: Path) -> None:
    """The table's TTFT p99 of a run that refused or expired requests is over the completed
    ones only (a refused request has no TTFT), from arrival at the gateway: the note under the
    table said neither, and a p99 over 80 % of the requests read as over all of them."""
    import numpy as np
    import pandas as pd

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n" + "".join(
        f"{i / 4},{40_000 if i % 5 == 0 else 800},50,64\n" for i in range(20)))
    code, stdout, stderr = run("simulate", "--trace", trace, "--out", tmp_path / "run")
    assert code == 0, stderr
    records = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    done = records[records["status"] == "completed"]
    assert 0 < len(done) < len(records)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    p99 = summary["overall"]["ttft_s"]["p99"]
    assert p99 == float(np.percentile(done["ttft_s"], 99))
    ttft = done["first_token_s"] - done["arrival_s"]
    assert np.allclose(done["ttft_s"], ttft)
    note = " ".join(stdout.split())
    assert ("TTFT and TPOT p99: over the completed requests (refused and expired ones have "
            "none), TTFT from arrival at the gateway, its wait included") in note, stdout


def test_the_tables_say_every_tier_s_out_tok_s_is_over_the_run_s_span() -> None:
    """A tier's out tok/s divides its completed tokens by the whole run's span (first arrival
    to the last finish of any tier): an interactive tier done early reads low beside a batch
    drain. The note said 'the time the work took' without whose: it says the run's, one span for
    every tier's row, and the tiers' rows add up to all's."""
    code, stdout, stderr = run("simulate", "--set", "workload.duration_s=20")
    assert code == 0, stderr
    rows = {line.split()[1]: line.split() for line in stdout.splitlines()
            if line.startswith("conservative ") and len(line.split()) == 10}
    out = {tier: float(r[8].replace(",", "")) for tier, r in rows.items()}
    assert out["all"] == pytest.approx(out["interactive"] + out["batch"], abs=1.0)
    note = " ".join(stdout.split())
    assert ("out tok/s: output tokens of the completed requests over the time the run's work "
            "took, first arrival to last finish, one span for every tier's row (the tiers' add "
            "up to all)") in note, stdout
    # the KV figures' span too: the simulator's token-seconds over first arrival to last finish
    assert "KV used/reserved are time-weighted fractions of capacity over the same span as " \
           "out tok/s" in note


def test_the_wide_tables_say_what_their_own_columns_are() -> None:
    """--wide splits 'refused' into rej and dropped, adds preempt, ITL and E2E quantiles: the
    note explained only the narrow table's columns (and pointed at --wide from within it)."""
    code, stdout, stderr = run("simulate", "--set", "workload.duration_s=20", "--wide")
    assert code == 0, stderr
    note = " ".join(stdout.split())
    assert ("TTFT, TPOT, ITL and E2E quantiles: over the completed requests (refused and "
            "expired ones have none)") in note, stdout
    assert ("rej: answered too-large or overloaded; dropped: dropped after preemption; "
            "preempt: the engine preemptions and gateway revocations of the tier's requests"
            ) in note, stdout
    assert "(--wide)" not in note


def test_the_simulated_line_says_the_context_prefix_caching_and_dtypes(tmp_path: Path) -> None:
    """The line a run opens with named the model, GPU, engine and caps but not the context it
    refused requests against, whether prefix caching was on (and had anything to share), nor
    the weights' and KV cache's dtypes, each of which moves the figures below it."""
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20")
    assert code == 0, stderr
    first = " ".join(stdout.split("\npolicy ")[0].split())
    # whose defaults (vLLM's release), chunked prefill and the KV cache's blocks too
    assert ("(vLLM 0.32.0's defaults for unset knobs, max_num_seqs 1,024, "
            "max_num_batched_tokens 8,192, max_model_len 131,072, chunked prefill on, prefix "
            "caching on (no prefixes to share), bfloat16 weights, 16-bit KV, block_size 16, "
            "gpu_memory_utilization 0.92), KV capacity 438,192 tokens (27,387 blocks), the gateway's "
            "budget;") in first, \
        first
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20", "--model",
                               "Llama-2-7B", "--set", "engine.kv_cache_dtype=fp8", "--set",
                               "engine.enable_prefix_caching=false", "--set",
                               "engine.enable_chunked_prefill=false")
    assert code == 0, stderr
    first = " ".join(stdout.split("\npolicy ")[0].split())
    assert "max_model_len 4,096, chunked prefill off, prefix caching off, float16 weights, fp8 " \
        "KV, block_size 16, gpu_memory_utilization 0.92)" in first, first


def test_validate_records_says_the_front_end_cost_its_simulation_added(tmp_path: Path) -> None:
    """``validate --records`` of a ``vllm bench serve`` file ended with "simulated times include
    a front-end overhead of 0.0 ms per request" while every simulated first token carried the
    modelled API server's 11.3 ms a request: it names that cost, with the figures the run used."""
    import pandas as pd

    fixture = (Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
               / "vllm-bench-0.32.0" / "rate8.json")
    out = tmp_path / "v"
    code, stdout, stderr = run("validate", "--records", fixture, "--model", "Llama-3.1-8B",
                               "--gpu", "H100-80GB", "--out", out)
    assert code == 0, stderr
    summary = json.loads((out / "sim" / "summary.json").read_text())
    per_request_s = summary["frontend"]["per_request_s"]
    assert per_request_s > 0 and summary["frontend_overhead_s"] == 0
    ttft = pd.read_parquet(out / "sim" / "requests.parquet")["ttft_s"]
    assert (ttft > per_request_s).all()  # every first token carries it
    said = " ".join(stdout.split())
    assert "front-end overhead of 0.0 ms" not in said
    assert (f"simulated times include the API server's modelled cost (vllm-api-server: "
            f"{1e3 * per_request_s:.2f} ms a request,") in said, said
    # validation.json said frontend_overhead_s 0.0 alone, the API server's cost in
    # sim/summary.json only: it says what the simulated times included, as the screen does
    validation = json.loads((out / "validation.json").read_text())
    assert validation["frontend_overhead_s"] == 0.0
    assert validation["frontend"] == summary["frontend"]
    included = validation["simulated_times_include"]
    assert included.startswith("simulated times include the API server's modelled cost "
                               f"(vllm-api-server: {1e3 * per_request_s:.2f} ms a request,")
    assert " ".join(included.split()) in said, (included, said)


def test_the_slo_line_names_only_the_tiers_the_run_offered(tmp_path: Path) -> None:
    """A trace with no tier column runs every request as 'interactive'; the SLO line under the
    table still listed the batch tier's targets, a tier with no request in the run."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n" + "".join(
        f"{i / 2},500,20\n" for i in range(10)))
    code, stdout, stderr = run("simulate", "--trace", trace)
    assert code == 0, stderr
    said = " ".join(stdout.split())
    assert ("SLO att: share of offered requests completed within their tier's targets "
            "(interactive TTFT<=2 s, TPOT<=0.1 s)") in said, said
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=40")
    assert "interactive TTFT<=2 s, TPOT<=0.1 s; batch TTFT<=60 s, TPOT<=0.5 s)" in \
        " ".join(stdout.split())


def test_a_study_of_one_run_says_one_run(tmp_path: Path) -> None:
    """A sweep of one configuration and one replication said "1 configurations x 1
    replications = 1 runs" and "1 runs in 0.2 s": the counts go through counted()."""
    code, stdout, stderr = run(
        "sweep", "--set", "workload.num_requests=20", "-r", "1", "-j", "1",
        "--out", tmp_path / "sw")
    assert code == 0, stderr
    said = stdout + stderr
    assert "1 configuration x 1 replication = 1 run (" in said, said
    assert any(ln.startswith("1 run in ") for ln in said.splitlines()), said
    # "790.1 runs per minute" is a rate, not a count: only a count of one is checked.
    assert not re.search(r"(?<![\d.])1 (runs|configurations)\b", said), said


def test_a_one_request_recording_says_one_request(tmp_path: Path) -> None:
    """``validate --records`` of a recording of one request said "1 requests simulated":
    the recording's counts go through counted()."""
    rec = tmp_path / "one.csv"
    rec.write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,500,20,0.05,0.3\n")
    code, stdout, stderr = run("validate", "--records", rec, "--model", "Llama-3.1-8B",
                               "--gpu", "H100-80GB", "--out", tmp_path / "v")
    said = " ".join((stdout + stderr).split())
    assert code == 0, said
    assert "1 request simulated, 1 measured" in said, said
    assert not re.search(r"(?<![\d.])1 requests\b", said), said


def test_the_readme_says_what_goodput_and_attainment_are_over(tmp_path: Path) -> None:
    """README.md's summary.json: goodput is the completed requests meeting their SLO per second
    of the arrival window, SLO attainment the same requests over all offered ones, and the
    latency quantiles are over the completed requests; checked on a run that refuses some."""
    import numpy as np
    import pandas as pd

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert ("goodput — completed requests meeting their tier's SLO per second of the arrival "
            "window — and SLO attainment over all offered requests; latency quantiles are over "
            "the completed requests") in readme
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,max_output_tokens\n" + "".join(
        f"{i / 4},{40_000 if i % 5 == 0 else 800},50,64\n" for i in range(40)))
    code, _, stderr = run("simulate", "--trace", trace, "--out", tmp_path / "run")
    assert code == 0, stderr
    s = json.loads((tmp_path / "run" / "summary.json").read_text())
    overall = s["overall"]
    good = overall["slo_attainment"] * overall["offered"]
    assert overall["completed"] < overall["offered"] and good > 0
    assert abs(overall["goodput_rps"] * s["offered_window_s"] - good) < 1e-6
    done = pd.read_parquet(tmp_path / "run" / "requests.parquet").query("status == 'completed'")
    assert overall["e2e_s"]["p99"] == float(np.percentile(done["e2e_s"], 99))


def test_presets_show_no_fp8_rate_where_a_gpu_has_none() -> None:
    """``kvbudget presets`` showed ``0`` FP8 TFLOP/s for the A10G and the A100s (no FP8 tensor
    cores), while the step model prices an FP8 model's matrix work on them at the 16-bit rate
    (``GPUSpec.peak_flops``): a zero it never uses. It now shows ``-`` and says what it means."""
    from kvbudget.perf.hardware import GPUS

    code, stdout, stderr = run("presets")
    assert code == 0, stderr
    lines = stdout.splitlines()
    header = lines[0].split("  ")
    column = [h.strip() for h in header if h.strip()].index("FP8 TFLOP/s")
    for name, gpu in GPUS.items():
        row = next(ln for ln in lines if ln.split(" ")[0] == name)
        cell = row.split()[column]  # every cell one word (the GPU name is the first)
        if gpu.fp8_flops is None:
            assert cell == "-", row
            assert gpu.peak_flops("fp8") == (gpu.fp16_flops or gpu.bf16_flops)
        else:
            assert float(cell.replace(",", "")) > 0, row
    assert any(gpu.fp8_flops is None for gpu in GPUS.values())
    assert ("FP8 -: no FP8 tensor cores; an FP8 model's matrix work is priced at the 16-bit rate "
            "there") in " ".join(stdout.split())


def test_validate_records_stage_line_says_the_load_as_the_tool_offered_it(tmp_path: Path) -> None:
    """The stage line of ``validate --records`` printed kvbudget's internal load word: a
    GuideLLM closed loop of 4 users ramped up over 2 s read "capped loop; replayed as closed
    loop, 4 users ...", contradicting itself, and a closed loop did not say its users. It now
    says the load in the words the recording's own summary uses."""
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
    cases = {"guidellm-0.8.1/rampup2_concurrent4.json": "closed loop of 4 users ramped up; ",
             "vllm-bench-0.32.0/concurrency4.json": "closed loop of 4 users; ",
             "vllm-bench-0.32.0/rate8.json": "open loop, 8 req/s; "}
    for i, (name, words) in enumerate(cases.items()):
        code, stdout, stderr = run("validate", "--records", fixtures / name, "--model",
                                   "Llama-3.1-8B", "--gpu", "H100-80GB", "--out", tmp_path / str(i))
        assert code == 0, stderr
        (line,) = [ln for ln in stdout.splitlines() if ln.startswith("stage '")]
        assert f"': {words}replayed as " in line, line
        assert "capped loop" not in line, line


def test_a_kv_cache_short_of_the_context_is_refused_as_vllm_refuses_to_start() -> None:
    """``kvbudget presets`` lists Llama-3.1-8B on an A10G at 27,616 tokens of KV, and
    ``simulate --gpu A10G`` simulated a server with max_model_len 131,072 on it (every request
    expired or waited minutes), while vLLM 0.32.0 does not start there: its KV cache cannot
    hold one request of max_model_len (``check_enough_kv_cache_memory``). It is refused now, in
    one line naming the knob and the largest length that fits; with the server's
    ``--max-model-len`` given it runs."""
    code, stdout, stderr = run("simulate", "--gpu", "A10G")
    assert code == 2, stdout
    line = stderr.strip()
    assert "\n" not in line and "Traceback" not in stderr, stderr
    assert line.startswith("error: engine.max_model_len: Llama-3.1-8B on A10G has KV room for "
                           "27,616 tokens, fewer than one request of max_model_len 131,072 "
                           "(the model's context, vLLM's default) needs"), line
    assert "at most 27,600 here" in line, line
    code, stdout, stderr = run("simulate", "--gpu", "A10G", "--set", "engine.max_model_len=16384",
                               "--set", "workload.duration_s=5")
    assert code == 0, stderr
    assert "max_model_len 16,384" in stdout and "KV capacity 27,616 tokens" in stdout, stdout


def test_presets_mark_the_kv_capacities_vllm_does_not_start_with() -> None:
    """The presets' KV table gave 27,616 tokens for Llama-3.1-8B on an A10G as if it were a
    server to plan with; at the model's 131,072-token context (vLLM's default max_model_len)
    vLLM refuses to start there. The models' table now says each model's context and the KV
    table marks the pairs short of it."""
    from kvbudget.perf.hardware import get_gpu
    from kvbudget.perf.kv_capacity import num_gpu_blocks
    from kvbudget.perf.models import get_model

    code, stdout, stderr = run("presets")
    assert code == 0, stderr
    lines = stdout.splitlines()
    model_row = next(ln for ln in lines if ln.startswith("Llama-3.1-8B ") and "llama" in ln)
    assert model_row.split()[-1] == "131,072", model_row
    kv_row = next(ln for ln in lines if ln.startswith("Llama-3.1-8B ") and "llama" not in ln)
    a10g = num_gpu_blocks(get_gpu("A10G"), get_model("Llama-3.1-8B"), max_num_seqs=256,
                          max_num_batched_tokens=2048) * 16
    assert kv_row.split()[1] == f"{a10g:,}*", kv_row
    assert "*" not in kv_row.split()[6], kv_row  # H100-SXM: 438,192 hold 131,072
    assert "*: less than one request at the model's context needs: vLLM refuses to start" in (
        " ".join(stdout.split()))


def test_presets_mark_sliding_window_models_vllm_does_not_start_with() -> None:
    """Gemma-2-9B on an A10G showed 1,584 tokens of KV, unmarked, against its 8,192-token
    context: vLLM refuses to start there (its check counts the sliding layers' window), and
    the '*' check skips models with sliding-window layers. Such pairs are now marked '!', with
    a note saying simulate does not check them; a pair that holds one request is not."""
    code, stdout, stderr = run("presets")
    assert code == 0, stderr
    rows = [ln.split() for ln in stdout.splitlines() if ln.startswith("Gemma-2-9B ")]
    kv_row = rows[1]  # the first KV table: A10G, L4, L40S, A100-40GB, A100-80GB, H100s
    assert kv_row[1:3] == ["1,584!", "1,600!"], kv_row
    assert not any(cell.endswith("!") for cell in kv_row[3:]), kv_row
    assert "!: a model with sliding-window layers" in " ".join(stdout.split())
    assert "simulate does not check these models" in " ".join(stdout.split())
    fidelity = " ".join((Path(__file__).resolve().parents[2] / "docs" / "fidelity.md")
                        .read_text().split())
    assert f"Gemma-2-9B on an A10G, {kv_row[1][:-1]} tokens of KV" in fidelity


def test_a_given_kv_cache_is_said_as_given_not_as_the_gpus(tmp_path: Path) -> None:
    """The shipped scenarios/synth_overcommit.toml sets ``num_gpu_blocks = 4000``; its first
    line read "Llama-3.1-8B on H100-SXM ... KV capacity 64,000 tokens", an H100's KV as far as
    the screen said, where the presets size one at 438,192. It now says the capacity was given;
    a run that gave none keeps its summary as it was (``engine_knobs`` has it only where
    given)."""
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "synth_overcommit.toml"
    code, stdout, stderr = run("simulate", "--scenario", scenario, "--set",
                               "workload.duration_s=5", "--out", tmp_path / "given")
    assert code == 0, stderr
    said = " ".join(stdout.split())
    assert ("KV capacity 64,000 tokens (engine.num_gpu_blocks 4,000 given, not sized from the "
            "GPU's memory)") in said, said
    summary = json.loads((tmp_path / "given" / "summary.json").read_text())
    assert summary["engine_knobs"]["num_gpu_blocks"] == 4000 == summary["num_gpu_blocks"]
    code, stdout, stderr = run("simulate", "--set", "workload.duration_s=5", "--json")
    assert code == 0, stderr
    assert "num_gpu_blocks" not in json.loads(stdout)["engine_knobs"]


def test_a_mistyped_run_directory_is_said_missing_not_damaged(tmp_path: Path) -> None:
    """``kvbudget report runs/oc`` where no ``runs/oc`` exists said "not a run directory
    (requests.parquet is missing)", as of a directory a run left half-written; it now says
    there is no such directory (or that the path is a file)."""
    code, _, stderr = run("report", tmp_path / "nope", "--out", tmp_path / "out")
    assert code == 2
    assert stderr.strip() == f"error: {tmp_path / 'nope'}: not a run directory (no such directory)"
    (tmp_path / "a.csv").write_text("x\n")
    code, _, stderr = run("report", tmp_path / "a.csv", "--out", tmp_path / "out")
    assert code == 2
    assert stderr.strip().endswith("a.csv: not a run directory (a file, not a directory)"), stderr


@pytest.mark.parametrize(("flag", "said"), [
    ("engine.max_num_seq=3", "engine.max_num_seq: extra inputs are not permitted, got 3 "
     "(did you mean engine.max_num_seqs?)"),
    ("max_num_seqs=3", "max_num_seqs: extra inputs are not permitted, got 3 (did you mean "
     "engine.max_num_seqs?)"),
    ("engine.speculative_config.num_speculative_token=2",
     "engine.speculative_config.num_speculative_token: extra inputs are not permitted, got 2 "
     "(did you mean engine.speculative_config.num_speculative_tokens?)"),
    ("foo=3", "foo: extra inputs are not permitted, got 3"),
    # a policy's parameter at the top said nothing more
    ("overcommit_ratio=0.5", "overcommit_ratio: extra inputs are not permitted, got 0.5 (did "
     "you mean policy_params.overcommit_ratio? a parameter of overcommit, preemptive, "
     "early_reject)"),
])
def test_a_misspelt_scenario_key_is_named_with_the_one_meant(flag: str, said: str) -> None:
    """``--set engine.max_num_seq=3`` said only "extra inputs are not permitted"; a key given
    at the top that belongs to a table (``max_num_seqs``) the same; and a misspelt required
    key (``num_speculative_token``) was reported as the other one missing ("num_speculative_
    tokens: field required"). Each now names the misspelt key and the one meant."""
    code, stdout, stderr = run("simulate", "--set", flag)
    assert code == 2, stdout
    assert stderr.strip() == f"error: {said}", stderr


def test_a_study_says_its_replications_draw_their_own_requests(tmp_path: Path) -> None:
    """``kvbudget compare --policies conservative,overcommit ... -r 10`` (the README's "better,
    or noise?") opened with "workload default: 1,617 requests": the scenario seed's draw,
    which no replication runs (replication r draws from the r-th child of the seed: 1,668,
    1,667, 1,702 requests at -r 3). It then said the count was the scenario seed's, but its
    rate beside the tables' means of the replications' (sweep's 'offered req/s' 5.7 under a
    line saying 5.96): two rates for one workload. The line now gives the replications' means,
    the runs' own, and the seed's draw as the seed's."""
    code, _, stderr = run("compare", "--policies", "conservative", "-r", "2", "-j", "1",
                               "--set", "workload.duration_s=20", "--out", tmp_path / "c")
    assert code == 0, stderr
    first = stderr.replace("\n  ", " ").splitlines()[0]  # its wrapped rest joined
    said = re.search(r"; workload default: ([\d.,]+) requests over [\d.]+ s \(([\d.]+) req/s, the mean of "
                     r"the draws' rates, each over its gaps between arrivals\) on average over the 2 replications' draws, each replication drawing its "
                     r"own requests and count; the scenario's seed 0, which no replication runs, "
                     r"draws the mix below: (\d+) requests over [\d.]+ s \([\d.]+ req/s: \d+ gaps "
                     r"between arrivals\)$",
                     first)
    assert said, first
    import pandas as pd

    runs = pd.read_parquet(tmp_path / "c" / "runs.parquet")
    assert float(said.group(1)) == runs["num_requests"].mean(), (first, runs["num_requests"])
    assert said.group(2) == f"{runs['offered_rate_rps'].mean():.3g}", first
    assert int(said.group(3)) not in runs["num_requests"].tolist()  # no replication ran it


def test_the_slo_line_says_the_queue_timeouts_expired_counts() -> None:
    """The tables' ``expired`` column counts requests that "waited past the tier's queue
    timeout", and no line said what the timeouts were (the default tiers' 10 s and 600 s, a
    scenario's own): a deadline nobody set, unsaid. The SLO line now names each tier's; what
    ``expired`` is, the units note says once (the SLO line said it again: 'expired: waited past
    the queue timeout' two lines under 'expired: waited past the tier's queue timeout')."""
    code, stdout, stderr = run("simulate", "--set", "workload.duration_s=20")
    assert code == 0, stderr
    said = " ".join(stdout.split())
    assert ("batch TTFT<=60 s, TPOT<=0.5 s); the tiers' queue timeouts: interactive 10 s, "
            "batch 600 s") in said, said
    assert said.count("expired: ") == 1 and said.count("waited past") == 1, said
    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "synth_overcommit.toml"
    code, stdout, stderr = run("compare", "--scenario", scenario, "--policies", "conservative",
                               "--set", "workload.duration_s=5", "--set",
                               "tiers.1.queue_timeout_s=2.5")
    assert code == 0, stderr
    assert "queue timeouts: interactive 20 s, batch 2.5 s" in " ".join(stdout.split()), stdout
    # one tier: its timeout, not 'the tiers' queue timeouts: interactive 10 s'
    code, stdout, stderr = run("simulate", "--set", "workload.duration_s=5", "--set",
                               'workload.tiers=[{name="interactive", share=1.0, prompt='
                               '{kind="lognormal", mean=500, sigma=0.5}, output={kind="lognormal",'
                               ' mean=50, sigma=0.5}}]')
    assert code == 0, stderr
    assert "; the tier's queue timeout: interactive 10 s" in " ".join(stdout.split()), stdout


def test_a_studys_first_line_says_the_load_as_simulate_does(tmp_path: Path) -> None:
    """``kvbudget plan --trace conv.csv ...`` (the README's "how many H100s?") opened with
    "workload AzureLLMInferenceTrace_conv: 19,366 requests": no span, no rate, where
    ``simulate`` on the same trace says "over 58.4 min (5.53 req/s)" and docs/tuning.md says
    the line above a table gives the offered rate. A study's line now says it as simulate's
    does; ``capacity``, which scales the load, says it is the rate at scale 1."""
    short = ("--set", "workload.duration_s=20")
    code, stdout, _ = run("simulate", *short)
    assert code == 0
    load = re.search(r" over [\d.]+ s \([\d.]+ req/s: \d+ gaps between arrivals\)",
                     stdout.replace("\n  ", " "))
    assert load, stdout
    code, _, stderr = run("plan", *short, "--gpus", "H100-80GB", "--replicas", "1", "-r", "1",
                          "-j", "1", "--out", tmp_path / "p")
    assert code == 0, stderr
    first = stderr.replace("\n  ", " ").splitlines()[0]
    seed = "the scenario's seed 0, which no replication runs, draws the mix below: "
    assert f"{seed}{len(default_scenario(short[1:]).workload())} requests{load.group(0)}" in first, (
        first, load.group(0))
    code, _, stderr = run("capacity", *short, "-r", "1", "--rel-tol", "0.5", "-j", "1",
                          "--out", tmp_path / "c")
    assert code == 0, stderr
    first = stderr.replace("\n  ", " ").splitlines()[0]
    scaled = load.group(0).replace(" req/s:", " req/s at rate scale 1:")
    assert f"requests{scaled}" in first.split(seed)[1], (first, scaled)


@pytest.mark.parametrize(("args", "said"), [
    (["sweep", "--grid", "engine.max_num_seqs=128,256", "--max-num-seqs", "64"],
     "--max-num-seqs: sweep sets engine.max_num_seqs from --grid engine.max_num_seqs in every "
     "run, so 64 given here would go unused"),
    (["sweep", "--grid", "gpu=A100-80GB,L40S", "--set", "gpu=H100"],
     "--set gpu: sweep sets gpu from --grid gpu in every run, so H100 given here"),
    (["tune", "--policy", "overcommit", "--param", "policy_params.overcommit_ratio=0.1:1",
      "--set", "policy_params.overcommit_ratio=0.5"],
     "--set policy_params.overcommit_ratio: tune sets policy_params.overcommit_ratio from "
     "--param policy_params.overcommit_ratio in every run, so 0.5 given here would go unused"),
])
def test_a_value_for_a_key_the_study_varies_is_refused(tmp_path: Path, args: list[str],
                                                        said: str) -> None:
    """``sweep --grid engine.max_num_seqs=128,256 --max-num-seqs 64`` ran 128 and 256 and never
    64, exit 0, saying nothing (``tune`` with a ``--set`` of a key it tunes alike): the value
    typed is refused, naming the option whose values replace it."""
    code, _, stderr = run(*args, "-r", "1", "-j", "1", "--out", tmp_path / "s")
    assert code == 2, stderr
    assert stderr.startswith(f"error: {said}"), stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize(("args", "said"), [
    (["simulate", "--max-output", "quantile:2"], "error: --max-output: q must be in [0, 1]"),
    (["simulate", "--max-output", "factor:0.5"], "error: --max-output: factor must be in"),
    (["simulate", "--arrival", "poisson:-1"], "error: --arrival: rate_rps must be > 0"),
    (["simulate", "--seed", "-1"], "error: --seed: input should be greater than or equal to 0"),
    (["capacity", "--target", "1.5"], "error: --target: must be in (0, 1], got 1.5"),
    (["capacity", "--rel-tol", "0"], "error: --rel-tol: must be in (0, 1), got 0"),
])
def test_a_bad_option_value_names_the_option(tmp_path: Path, args: list[str],
                                             said: str) -> None:
    """"q must be in [0, 1], got 2" (``--max-output quantile:2``), "rate_rps must be > 0"
    (``--arrival``), "seed: ..." (``--seed -1``) and "target must be in (0, 1]" (``capacity
    --target 1.5``) named no option the user typed: each now leads with it."""
    trace = tmp_path / "lengths.csv"
    trace.write_text("prompt_tokens,output_tokens\n" + "100,20\n" * 5)
    extra = ["--trace", str(trace)] if args[1] in ("--max-output", "--arrival") else []
    out = ["--out", str(tmp_path / "c")] if args[0] == "capacity" else []
    code, _, stderr = run(*args, *extra, *out)
    assert code == 2 and stderr.startswith(said), stderr
    assert len(stderr.strip().splitlines()) == 1, stderr


@pytest.mark.parametrize(("args", "said"), [
    (["--rate-rps", "-1"], "error: --rate-rps: must be > 0, got -1"),
    (["--duration-s", "-3"], "error: --duration-s: must be > 0, got -3"),
    (["--seed", "-1"], "error: Invalid value for '--seed': -1 is not in the range x>=0"),
    (["--spec", "SPEC"], "error: SPEC: workload.arrival is required"),
])
def test_trace_synth_names_the_flag_or_the_file(tmp_path: Path, args: list[str],
                                               said: str) -> None:
    """``trace synth --rate-rps -1`` said "workload.arrival.rate_rps must be > 0" (a field the
    user never typed), ``--seed -1`` "expected non-negative integer" (no option at all) and a
    bad ``--spec`` file "workload.arrival is required" without the file."""
    spec = tmp_path / "w.toml"
    spec.write_text('[workload]\nkind = "synthetic"\nduration_s = -5\n')
    args = [str(spec) if a == "SPEC" else a for a in args]
    code, _, stderr = run("trace", "synth", "--out", tmp_path / "s.csv", *args)
    assert code == 2 and stderr.startswith(said.replace("SPEC", str(spec))), stderr
    assert not (tmp_path / "s.csv").exists()


@pytest.mark.parametrize("command", ["stats", "convert"])
def test_trace_seed_refuses_a_negative_seed_by_name(tmp_path: Path, command: str) -> None:
    """``trace stats FILE --seed -1 --sample-fraction 0.5`` said "expected non-negative
    integer" (numpy's words, no option), and without a random choice took -1 silently."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n")
    out = ["--out", str(tmp_path / "c.csv")] if command == "convert" else []
    code, _, stderr = run("trace", command, trace, *out, "--seed", "-1")
    assert code == 2 and stderr.startswith(
        "error: Invalid value for '--seed': -1 is not in the range x>=0"), stderr


def test_rate_scale_on_a_synthetic_workload_scales_it_as_sweep_does(tmp_path: Path) -> None:
    """``kvbudget sweep --rate-scale 1,2`` scaled the default synthetic workload (its drawn
    requests offered twice as fast), but ``simulate --rate-scale 2`` refused it, pointing to
    ``--set workload.arrival.rate_rps``, which means another load (more requests over the same
    duration). simulate and compare now take it as sweep does: the same requests, their
    arrival times divided by 2 (as :func:`kvbudget.workloads.workload.scale_rate`, sweep's,
    gives them), saying so and the rate it ran at. A synthetic scenario file's likewise."""
    args = ("--set", "workload.duration_s=20", "--json")
    code, stdout, stderr = run("simulate", *args)
    assert code == 0, stderr
    plain = json.loads(stdout)
    code, stdout, stderr = run("simulate", "--rate-scale", "2", *args)
    assert code == 0, stderr
    scaled = json.loads(stdout)
    assert scaled["overall"]["offered"] == plain["overall"]["offered"]  # the same requests
    assert scaled["offered_window_s"] == pytest.approx(plain["offered_window_s"] / 2)
    (said,) = [a for a in scaled["workload"]["assumed"] if a.startswith("rate scale 2 ")]
    assert said.startswith("rate scale 2 taken as sweep --rate-scale takes it: the "
                           f"{plain['overall']['offered']:,} requests drawn at the arrival's "
                           "rate, offered 2x as fast"), said
    # sweep's own scaling of the same draw: the same arrival times
    base = default_scenario(["workload.duration_s=20"])
    ours = default_scenario(["workload.duration_s=20", "workload.rate_scale=2"]).workload()
    np.testing.assert_array_equal(ours.arrival_s, scale_rate(base.workload(), 2).arrival_s)
    # the table says the rate it ran at, and what was taken
    code, stdout, stderr = run("compare", "--policies", "conservative,overcommit",
                               "--rate-scale", "2", "--set", "workload.duration_s=20")
    assert code == 0, stderr
    text = stdout.replace("\n  ", " ")
    num, window = plain["overall"]["offered"], plain["offered_window_s"] / 2
    rate = (num - 1) / window
    assert (f"over {span_said(num, window)} s ({rate:.3g} req/s: {num - 1:,} gaps between "
            "arrivals)") in text, text
    assert "assumed: rate scale 2 taken as sweep --rate-scale takes it" in text, text
    scenario = tmp_path / "syn.toml"
    scenario.write_text(
        'name = "syn"\n[workload]\nkind = "synthetic"\nduration_s = 20\n'
        'arrival = { kind = "gamma", rate_rps = 2, cv = 2 }\n'
        '[[workload.tiers]]\nname = "interactive"\nshare = 1\n'
        'prompt = { kind = "fixed", tokens = 100 }\noutput = { kind = "fixed", tokens = 50 }\n')
    code, stdout, stderr = run("simulate", "--scenario", scenario, "--rate-scale", "3")
    assert code == 0 and "assumed: rate scale 3 taken as sweep" in stdout.replace("\n  ", " "), \
        stdout + stderr
    code, _, stderr = run("simulate", "--window", "0:5")  # any other trace option: refused
    assert code == 2 and stderr == "error: --window: trace options need --trace FILE\n", stderr


KNOWN = ("known policies: unlimited, conservative, overcommit, preemptive, quantile, adaptive, "
         "peak, early_reject")


@pytest.mark.parametrize(("args", "said"), [
    (["simulate", "--policy", "overcomit"], "--policy: "),
    (["simulate", "--set", "policy=overcomit"], "policy: "),
    (["simulate", "--scenario", "{typo}"], "{typo}: policy: "),
    (["compare", "--policies", "unlimited,overcomit"], "--policies: "),
    (["tune", "--out", "{out}", "--param", "policy_params.overcommit_ratio=0.1:1", "--policy",
      "overcomit"], "--policy: "),
    (["replay", "--url", "http://127.0.0.1:9", "--trace", "{trace}", "--out", "{out}",
      "--policy", "overcomit"], "--policy: "),
    (["serve", "--upstream", "http://127.0.0.1:9", "--policy", "overcomit"], "--policy: "),
    (["serve", "--upstream", "http://127.0.0.1:9", "--scenario", "{ok}", "--policy",
      "overcomit"], "--policy: "),
])
def test_a_misspelt_policy_is_named_with_its_flag_and_the_one_meant(
        tmp_path: Path, args: list[str], said: str) -> None:
    """``simulate --policy overcomit`` said "unknown policy 'overcomit'; known policies: ..."
    (no flag, no suggestion, where --gpu and --model say both), ``tune --policy`` named
    --policies, ``replay --policy`` no flag, and ``serve --scenario F --policy overcomit``
    asked the upstream for its KV capacity before refusing the name. Each now says one line
    naming where the name was given and the policy meant, before anything runs."""
    paths = {"typo": tmp_path / "typo.toml", "ok": tmp_path / "ok.toml",
             "trace": tmp_path / "t.csv", "out": tmp_path / "out"}
    paths["typo"].write_text('name = "x"\npolicy = "overcomit"\n')
    paths["ok"].write_text('name = "x"\npolicy = "conservative"\n')
    paths["trace"].write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n")
    fill = {k: str(v) for k, v in paths.items()}
    code, stdout, stderr = run(*[a.format(**fill) for a in args])
    assert code == 2, (stdout, stderr)
    assert stderr == (f"error: {said.format(**fill)}unknown policy 'overcomit' (did you mean "
                      f"overcommit?); {KNOWN}\n"), stderr


def test_a_folder_of_runs_names_the_run_directories_in_it(tmp_path: Path) -> None:
    """``kvbudget compare --out runs/cmp`` writes one run directory per policy; ``kvbudget
    report runs/cmp`` (the folder the user named) said only "not a run directory
    (requests.parquet is missing)". It now names the run directories it holds and how to give
    them; following it writes the report."""
    out = tmp_path / "cmp"
    code, _, stderr = run("compare", "--set", "workload.duration_s=10", "--policies",
                          "unlimited,conservative", "--out", out)
    assert code == 0, stderr
    code, _, stderr = run("report", out, "--out", tmp_path / "rep")
    assert code == 2, stderr
    assert stderr == (f"error: {out}: not a run directory (requests.parquet is missing), but it "
                      "holds 2 run directories: conservative, unlimited; give one "
                      f"({out / 'conservative'}), or all where several are taken "
                      f"({out / '*'})\n"), stderr
    code, _, stderr = run("report", out / "conservative", out / "unlimited", "--out",
                          tmp_path / "rep")
    assert code == 0 and (tmp_path / "rep" / "report.html").is_file(), stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, stderr = run("report", empty)  # a folder of no runs: no more said than before
    assert stderr == f"error: {empty}: not a run directory (requests.parquet is missing)\n"
