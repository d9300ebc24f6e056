"""What a run, a workload and a loaded trace show in a notebook (``repr``): what they hold
and assumed, not their arrays."""

from __future__ import annotations

import json
import pickle
from dataclasses import replace
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
    # SimConfig() named neither: its defaults are said as assumed, not 'given as H100-80GB'
    assert " ".join(ln.strip() for ln in lines[1:3]).startswith(
        "simulated: Llama-3.1-8B (assumed: the default scenario's) on H100-SXM (assumed: the "
        "default scenario's H100-80GB)")
    said = [ln.split(":")[0] for ln in lines if not ln.startswith("  ")]
    assert said[2:] == ["workload lengths", "warning", "assumed", "assumed", "overall",
                        ".records (30 rows), .timeline "
                        f"({len(run.timeline):,} rows), .token_gaps, .summary (every figure)"]
    assert "array(" not in repr(run)
    # a run read back from its directory shows the same
    run.write(tmp_path / "run")
    assert repr(kb.read_run(tmp_path / "run")) == repr(run)


def test_simconfigs_own_defaults_are_said_as_assumed_and_a_name_given_as_given() -> None:
    # kb.simulate(..., kb.SimConfig()) said 'Llama-3.1-8B on H100-SXM (given as H100-80GB)':
    # the caller gave neither; one typed (even the default's name) is said as given
    w = kb.Workload(arrival_s=np.array([0.0, 0.5]), prompt_tokens=np.array([100, 200]),
                    output_tokens=np.array([10, 20]), max_output_tokens=np.array([10, 20]),
                    tier=np.zeros(2, np.int16), tier_names=("interactive",),
                    deadline_s=np.full(2, np.nan), request_id=np.arange(2), name="two")
    policy = kb.make_policy("unlimited")
    cases = [(kb.SimConfig(), ["gpu", "model"]),
             (replace(kb.SimConfig(), seed=3), ["gpu", "model"]),  # replace keeps what was assumed
             (kb.SimConfig(gpu="H100-80GB"), ["model"]),
             (kb.SimConfig(gpu="H100-80GB", model="Llama-3.1-8B"), None)]
    for config, defaulted in cases:
        run = kb.simulate(w, policy, config)
        assert run.summary.get("defaulted") == defaulted
        line = " ".join(ln.strip() for ln in repr(run).splitlines()[1:3])
        gpu_said = ("H100-SXM (assumed: the default scenario's H100-80GB)" if defaulted and "gpu"
                    in defaulted else "H100-SXM (given as H100-80GB)")
        model_said = ("Llama-3.1-8B (assumed: the default scenario's)" if defaulted
                      else "Llama-3.1-8B")
        assert line.startswith(f"simulated: {model_said} on {gpu_said}"), line
    assert pickle.loads(pickle.dumps(kb.SimConfig())).defaulted == ("gpu", "model")
    assert kb.SimConfig() == kb.SimConfig(gpu="H100-80GB", model="Llama-3.1-8B")


def test_a_summary_without_its_workload_says_none() -> None:
    # a staged replay's sim/summary.json written before its joined summary kept the workload:
    # 'workload None: 0 requests' was said of 20 replayed requests
    from kvbudget.results.said import setting_lines

    line = setting_lines([{"model": "m", "gpu": "g", "engine": {"engine": "vllm"},
                           "engine_defaults": "vllm", "kv_capacity_tokens": 10}])[0].replace(
                               "\n  ", " ")
    assert line == ("simulated: m on g, engine vllm (vLLM 0.32.0's defaults for unset knobs), KV "
                    "capacity 10 tokens, the gateway's budget")


def test_a_bare_or_measured_runs_repr_has_no_setting_line() -> None:
    bare = RunResult({"request_id": np.arange(3)}, {}, {"policy": "p", "executor": "live",
                     "overall": {"offered": 3, "completed": 1, "expired": 2}})
    assert repr(bare).splitlines() == [
        "RunResult: p, 3 requests offered: 1 completed, 2 expired",
        ".records (3 rows), .timeline (0 rows), .summary (every figure)"]
    # a run with client models: those its clients gave up on are counted too (they were not)
    gave_up = RunResult({"request_id": np.arange(3)}, {}, {"policy": "p", "executor": "live",
                        "overall": {"offered": 3, "completed": 1, "client_timeout": 2}})
    assert repr(gave_up).splitlines()[0] == (
        "RunResult: p, 3 requests offered: 1 completed, 2 client timeout")


def test_a_workloads_and_a_loaded_traces_repr_say_their_figures_and_assumptions(
        tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"  # timed, two tiers, one failed row (0 tokens) dropped
    rows = [{"arrival_s": i, "prompt_tokens": 100 * (i + 1), "output_tokens": 10 * (i + 1),
             "tier": "batch" if i % 2 else "interactive"} for i in range(5)]
    rows.append({"arrival_s": 9, "prompt_tokens": 0, "output_tokens": 0})
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    loaded = kb.load_trace(trace, kb.TraceOptions(format="generic"))
    lines = repr(loaded).splitlines()
    # the failed row's drop is said once: in the workload's warning (every run repeats it)
    assert lines[0] == f"{trace} (generic-jsonl): 6 rows read, 5 loaded"
    assert lines[1] == ("Workload 't': 5 requests over 4.0 s (1 req/s: 4 gaps between "
                        "arrivals); interactive 3, batch 2")
    assert lines[2].startswith("prompt tokens mean 300, p50 / p99 300 / 496; output tokens mean "
                               "30, p50 / p99 30 / 50; max_output_tokens mean 2,048")
    assert [ln.split(":")[0] for ln in lines[3:]] == ["warning", "assumed"]  # tiers given
    assert lines[3] == ("warning: dropped 1 of the file's 6 rows, with no tokens to serve: 1 with "
                        "0 prompt and 0 output tokens (failed requests)")
    assert sum("dropped" in ln for ln in lines) == 1
    # no arrival times: no span or rate claimed (they were drawn)
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt_tokens,output_tokens\n5,2\n7,3\n")
    w = kb.load_trace(lengths, kb.TraceOptions(format="generic")).workload
    assert repr(w).splitlines()[0] == "Workload 'lengths': 2 requests; interactive 2"
    assert "array(" not in repr(w)
    # an empty workload: no tiers, and no dangling separator ('0 requests; ')
    empty = kb.Workload(arrival_s=np.array([]), prompt_tokens=np.array([], np.int64),
                        output_tokens=np.array([], np.int64),
                        max_output_tokens=np.array([], np.int64), tier=np.array([], np.int16),
                        tier_names=("interactive",), deadline_s=np.array([]),
                        request_id=np.array([], np.int64), name="e")
    assert repr(empty) == "Workload 'e': 0 requests"


def test_a_recordings_repr_says_its_tool_stages_settings_and_notes() -> None:
    fixture = Path(__file__).parents[2] / "fixtures/recordings/guidellm-0.8.1/benchmarks.json"
    lines = repr(kb.read_recording(fixture)).splitlines()
    assert lines[0] == (f"Recording {fixture} (guidellm 0.8.1): 20 requests, 16 measured "
                        "(completed with TTFT and E2E)")
    assert lines[1] == "stage 0: concurrent x4: closed loop of 4 users"
    assert lines[2].startswith("the file says: model tiny, max_tokens 16, ignore_eos True")
    notes = [ln for ln in lines if ln.startswith("note: ")]
    assert any("3 warm-up and 1 cool-down requests" in ln for ln in notes)
    # the workload's lines follow, without repeating a note as a warning
    assert "Workload 'benchmarks': 20 requests" in lines[2 + len(notes) + 1]
    assert not any(ln.startswith("warning: ") and ln[9:] in {n[6:] for n in notes}
                   for ln in lines)
    assert lines[-1] == ".measured (20 rows), .records(), .config"
