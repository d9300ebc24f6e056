"""Load-tool options the first fixtures leave out, on files the real tools wrote
(``scripts/make_recording_fixtures.sh vllm-options aiperf-options``, against the CPU vLLM of
the live tests): each reads to the tool's own summary of the same run, its load as the tool
offered it, and what the file cannot say is said.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from kvbudget.results.recordings import RecordedStage, Recording, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
VLLM = FIXTURES / "vllm-bench-0.32.0" / "options"
AIPERF = FIXTURES / "aiperf-0.13.0"


def usable(rec: Recording) -> pd.DataFrame:
    return rec.measured[rec.measured["usable"]]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# --------------------------------------------------------------------------- vllm bench serve


@pytest.mark.parametrize(("name", "stage"), [
    ("probe4_rate8.json", RecordedStage("8 req/s", "open", 8.0, None)),
    # an exponential ramp capped at 3 in flight: due when the ramp meant to send each
    ("rampup_exp_c3.json", RecordedStage("ramp-up exponential 1 to 16 req/s, concurrency 3",
                                         "capped", None, 3)),
    # lengths drawn within +-50 % and no --ignore-eos (set by the client for the random
    # dataset all the same): each realised length its own
    ("range05_rate8.json", RecordedStage("8 req/s", "open", 8.0, None)),
])
def test_vllm_bench_options_read_to_its_own_summary(name: str, stage: RecordedStage) -> None:
    path = VLLM / name
    doc = json.loads(path.read_text())
    rec = read_recording(path)
    u = usable(rec)
    assert rec.counts["num_measured"] == doc["completed"] == len(u) == 10
    assert close(u["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"])
    assert int(u["output_tokens"].sum()) == doc["total_output_tokens"]
    assert int(u["prompt_tokens"].sum()) == doc["total_input_tokens"]
    assert rec.stages == (stage,)
    assert (rec.workload.max_output_tokens == rec.workload.output_tokens).all()
    assert any(n.startswith("ignore_eos: not recorded") for n in rec.notes)


def test_vllm_bench_range_ratio_lengths_are_the_files_own() -> None:
    doc = json.loads((VLLM / "range05_rate8.json").read_text())
    rec = read_recording(VLLM / "range05_rate8.json")
    order = np.argsort(rec.workload.request_id)
    assert sorted(rec.workload.prompt_tokens[order].tolist()) == sorted(doc["input_lens"])
    assert len(set(doc["input_lens"])) > 1  # drawn, not one length


def test_vllm_bench_probe_requests_are_said_not_silently_left_out() -> None:
    # --probe-request-rate 4 sent probe requests beside the run that the file counts but does
    # not list: the replay gave no sign the server carried more than the 10 requests read
    doc = json.loads((VLLM / "probe4_rate8.json").read_text())
    rec = read_recording(VLLM / "probe4_rate8.json")
    total = doc["probe_completed"] + doc["probe_failed"]
    assert total > 0 and len(rec.workload) == doc["completed"]
    said = [n for n in rec.notes if "--probe-request-rate" in n]
    assert len(said) == 1
    assert said[0].startswith(f"--probe-request-rate: {total} probe requests "
                              f"({doc['probe_completed']} completed, {doc['probe_failed']} "
                              "failed")
    assert f"median {doc['probe_median_e2el_ms']:.4g} ms" in said[0]
    assert not any("probe" in n for n in read_recording(VLLM / "range05_rate8.json").notes)


def test_vllm_bench_capped_ramp_is_offered_when_due() -> None:
    doc = json.loads((VLLM / "rampup_exp_c3.json").read_text())
    rec = read_recording(VLLM / "rampup_exp_c3.json")
    due = np.array(doc["start_times"]) - np.array(doc["queue_times"])
    assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(due - due.min()))


# --------------------------------------------------------------------------- AIPerf


def _aiperf(name: str) -> tuple[Recording, dict[str, Any]]:
    return (read_recording(AIPERF / f"{name}.jsonl"),
            json.loads((AIPERF / f"{name}_aiperf.json").read_text()))


def test_aiperf_without_streaming_is_refused_saying_so() -> None:
    # it was refused as "no request has a measured TTFT and E2E", naming no cause
    with pytest.raises(TraceError) as err:
        read_recording(AIPERF / "unstreamed_concurrency2.jsonl")
    assert "AIPerf ran without --streaming" in str(err.value)
    assert "record the run with --streaming" in str(err.value)


@pytest.mark.parametrize("name", ["cancel50_concurrency2", "concurrency4_ramp1", "rate8_ramp1"])
def test_aiperf_options_read_to_its_own_summary(name: str) -> None:
    rec, summary = _aiperf(name)
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"]
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])
    assert close(u["e2e_s"].mean() * 1e3, summary["request_latency"]["avg"])
    assert int(u["output_tokens"].sum()) == summary["total_usage_completion_tokens"]["avg"]


def test_aiperf_cancellations_count_as_its_error_summary() -> None:
    rec, summary = _aiperf("cancel50_concurrency2")
    cancelled = sum(e["count"] for e in summary["error_summary"]
                    if e["error_details"]["type"] == "RequestCancellationError")
    assert cancelled > 0 and rec.counts["num_cancelled"] == cancelled
    assert rec.stages[0].label == f"concurrency 2, {cancelled} cancelled"


def test_aiperf_concurrency_ramp_is_not_a_closed_loop_from_the_start() -> None:
    # --concurrency 4 --concurrency-ramp-duration 1 was read as a closed loop of 4 users from
    # the first send: AIPerf started with 1 and added one at a time over the first second
    rec, _ = _aiperf("concurrency4_ramp1")
    label = "concurrency 4, ramped from 1 over 1 s"
    assert rec.stages == (RecordedStage(label, "capped", None, 4),)
    said = [n for n in rec.notes if n.startswith(f"stage '{label}'")]
    assert len(said) == 1 and "replayed as an open loop at the recorded sends" in said[0]
    sends = rec.measured["arrival_s"].to_numpy()
    assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(sends))


def test_aiperf_rate_ramp_is_said() -> None:
    rec, _ = _aiperf("rate8_ramp1")
    label = "8 req/s, ramped over 1 s"
    assert rec.stages == (RecordedStage(label, "open", 8.0, None),)
    assert any(n.startswith(f"stage '{label}': AIPerf raised its rate") for n in rec.notes)
    _, plain = _aiperf("rate8")
    assert read_recording(AIPERF / "rate8.jsonl").stages[0].label == "8 req/s"
    assert "rate_ramp" not in json.dumps(plain["input_config"])


def test_aiperf_rate_series_is_said_not_an_unrecorded_load() -> None:
    # --request-rate-series (2 req/s rising to 10 req/s at 1 s): the phase has no rate, and
    # the stage was read as "load mode not recorded"
    rec, summary = _aiperf("rate_series2to10")
    label = "rate series 2 to 10 req/s"
    assert rec.stages == (RecordedStage(label, "open", None, None),)
    assert any(n.startswith(f"stage '{label}': AIPerf varied its rate along "
                            "--request-rate-series (2 points)") for n in rec.notes)
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"] == 10
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])


def test_aiperf_multi_turn_conversations_are_not_a_closed_loop_without_their_delays() -> None:
    # 4 conversations of 3 chat turns, each later turn sent 300 ms after the turn before
    # returned, 2 at a time: it was read as a closed loop of 2 users sending at once
    rec, summary = _aiperf("multiturn3_delay300_concurrency2")
    label = "concurrency 2, multi-turn"
    assert rec.stages == (RecordedStage(label, "closed", None, 2),)
    said = [n for n in rec.notes if n.startswith(f"stage '{label}'")]
    assert len(said) == 1
    assert said[0].startswith(f"stage '{label}': 8 of the 12 records are later turns of their "
                              "conversations, each sent its turn delay (300 ms on average)")
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"] == 12
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])


def test_aiperf_chat_prompt_tokens_are_the_servers_not_aiperfs_text_count() -> None:
    # AIPerf's input_sequence_length counts the messages' text, not the chat template the
    # server prefilled and held in KV: the server's usage_prompt_tokens were left unread
    rec, summary = _aiperf("multiturn3_delay300_concurrency2")
    served = summary["total_usage_prompt_tokens"]["avg"]
    assert int(rec.workload.prompt_tokens.sum()) == served
    assert served > summary["total_isl"]["avg"]
    more = (served - summary["total_isl"]["avg"]) / 12
    assert any(n.startswith("prompt tokens: the server's count") and f"{more:+.1f} a request"
               in n for n in rec.notes)
    # a completions run: the two counts agree, nothing said
    plain, plain_summary = _aiperf("concurrency4_ramp1")
    assert int(plain.workload.prompt_tokens.sum()) == plain_summary["total_isl"]["avg"]
    assert not any(n.startswith("prompt tokens:") for n in plain.notes)


# --------------------------------------------------------------------------- GuideLLM


GUIDELLM = FIXTURES / "guidellm-0.8.1"


def test_guidellm_html_report_is_refused_by_name() -> None:
    # it was read as a generic records CSV: "missing column 'prompt_tokens' ... <!DOCTYPE html>"
    with pytest.raises(TraceError) as err:
        read_recording(GUIDELLM / "chat_prefix2_concurrent2.html")
    assert "is a GuideLLM HTML report (--output kind=html)" in str(err.value)
    assert "--output kind=json" in str(err.value)


def test_other_html_pages_are_refused_as_pages(tmp_path: Path) -> None:
    page = tmp_path / "rate8.timeline.html"
    page.write_text("<html><head><meta charset=\"utf-8\" /></head><body></body></html>")
    with pytest.raises(TraceError, match="is an HTML page"):
        read_recording(page)


def test_guidellm_chat_with_prefixes_reads_to_its_own_summary() -> None:
    path = GUIDELLM / "chat_prefix2_concurrent2.json"
    doc = json.loads(path.read_text())
    bench = doc["benchmarks"][0]
    rec = read_recording(path)
    u = usable(rec)
    done = bench["requests"]["successful"]
    assert len(u) == len(done) == bench["metrics"]["request_totals"]["successful"]
    assert rec.stages == (RecordedStage("0: concurrent x2", "closed", None, 2),)
    assert rec.config["max_tokens"] == 16 and rec.config["ignore_eos"] is True
    assert any("16-token prefix" in n for n in rec.notes)


# --------------------------------------------------------------------------- inference-perf


SHARED_PREFIX = FIXTURES / "inference-perf-0.7.0" / "shared_prefix_poisson"


def test_inference_perf_poisson_stages_read_to_its_own_summary() -> None:
    rec = read_recording(SHARED_PREFIX / "per_request_lifecycle_metrics.json")
    ok = json.loads((SHARED_PREFIX / "summary_lifecycle_metrics.json").read_text())["successes"]
    u = usable(rec)
    assert len(u) == ok["count"]
    assert close(u["ttft_s"].mean(), ok["latency"]["time_to_first_token"]["mean"])
    assert int(u["prompt_tokens"].sum()) == ok["prompt_tokens"]["total"]
    assert int(u["output_tokens"].sum()) == ok["output_tokens"]["total"]
    for k, stage in enumerate(rec.stages):
        own = json.loads((SHARED_PREFIX / f"stage_{k}_lifecycle_metrics.json").read_text())
        rate = own["load_summary"]["requested_rate"]
        assert stage == RecordedStage(f"stage {k}: {rate:g} req/s", "open", rate)
        assert (rec.measured["stage"] == stage.label).sum() == own["successes"]["count"]


def test_inference_perf_shared_prefix_groups_are_simulated_shared() -> None:
    # shared_prefix data (2 system prompts of 32 tokens): every prompt was simulated as its
    # own, though the bodies the report keeps show which system prompt each began with
    rec = read_recording(SHARED_PREFIX / "per_request_lifecycle_metrics.json")
    wl = rec.workload
    assert wl.prefix_hashes is not None and wl.prefix_offsets is not None
    assert wl.prefix_block_tokens == 32
    assert (np.diff(wl.prefix_offsets) == 1).all()  # one hash (two blocks) a request
    assert set(wl.prefix_hashes.tolist()) == {1, 2}
    # the hash follows the body: requests whose prompts begin alike share it
    doc = json.loads((SHARED_PREFIX / "per_request_lifecycle_metrics.json").read_text())
    heads = [json.loads(r["request"])["prompt"][:24] for r in doc]
    by_head: dict[str, set[int]] = {}
    for row, h in zip(wl.request_id.tolist(), wl.prefix_hashes.tolist(), strict=True):
        by_head.setdefault(heads[row], set()).add(h)
    assert len(by_head) == 2 and all(len(v) == 1 for v in by_head.values())
    assert any(n.startswith("prompts began with one of 2 system prompts of 32 tokens") for n in
               rec.notes)
    # a run of random data (no config.yaml beside it) shares nothing
    plain = read_recording(FIXTURES / "inference-perf-0.7.0" / "per_request_lifecycle_metrics.json")
    assert plain.workload.prefix_hashes is None


def test_inference_perf_shared_prefix_groups_need_distinct_bodies(tmp_path: Path) -> None:
    # bodies that do not begin with as many texts as the config's groups are said, not guessed
    for name in ("per_request_lifecycle_metrics.json", "stage_0_lifecycle_metrics.json",
                 "stage_1_lifecycle_metrics.json", "config.yaml"):
        (tmp_path / name).write_bytes((SHARED_PREFIX / name).read_bytes())
    doc = json.loads((tmp_path / "per_request_lifecycle_metrics.json").read_text())
    for k, req in enumerate(doc):
        body = json.loads(req["request"])
        body["prompt"] = f"{k:03d}" + body["prompt"]
        req["request"] = json.dumps(body)
    (tmp_path / "per_request_lifecycle_metrics.json").write_text(json.dumps(doc))
    rec = read_recording(tmp_path / "per_request_lifecycle_metrics.json")
    assert rec.workload.prefix_hashes is None
    assert any("the request bodies do not begin with 2 distinct texts: not simulated" in n
               for n in rec.notes)


AIPERF_PREFIX = AIPERF / "prefix2x16_rate8"


def test_aiperf_prefix_prompts_are_simulated_shared() -> None:
    # --num-prefix-prompts 2 --prefix-prompt-length 16: every prompt was simulated as its own,
    # though the inputs.json beside the records keeps each body and so its prefix
    path = AIPERF_PREFIX / "profile_export.jsonl"
    summary = json.loads((AIPERF_PREFIX / "profile_export_aiperf.json").read_text())
    rec = read_recording(path)
    u = usable(rec)
    assert len(u) == summary["request_count"]["avg"] == 10
    assert close(u["ttft_s"].mean() * 1e3, summary["time_to_first_token"]["avg"])
    wl = rec.workload
    assert wl.prefix_hashes is not None and wl.prefix_offsets is not None
    assert wl.prefix_block_tokens == 16 and (np.diff(wl.prefix_offsets) == 1).all()
    # each record's hash is its body's prefix (inputs.json, by session and turn)
    bodies = {s["session_id"]: s["payloads"][0]["prompt"]
              for s in json.loads((AIPERF_PREFIX / "inputs.json").read_text())["data"]}
    records = [json.loads(line) for line in path.read_text().splitlines()]
    heads: dict[str, set[int]] = {}
    for row, h in zip(wl.request_id.tolist(), wl.prefix_hashes.tolist(), strict=True):
        sid = records[row]["metadata"]["conversation_id"]
        heads.setdefault(bodies[sid][:12], set()).add(h)
    assert len(heads) == 2 and all(len(v) == 1 for v in heads.values())
    assert any(n.startswith("prompts began with one of 2 prefix prompts of 16 tokens (AIPerf "
                            "--num-prefix-prompts 2 --prefix-prompt-length 16): 2 distinct")
               for n in rec.notes)


def test_aiperf_prefix_prompts_without_inputs_json_are_said(tmp_path: Path) -> None:
    for name in ("profile_export.jsonl", "profile_export_aiperf.json"):
        (tmp_path / name).write_bytes((AIPERF_PREFIX / name).read_bytes())
    rec = read_recording(tmp_path / "profile_export.jsonl")
    assert rec.workload.prefix_hashes is None
    assert any("no inputs.json is beside them: not simulated" in n for n in rec.notes)
    # a run without a prefix pool reads no inputs.json and says nothing of prefixes
    assert not any("prefix prompts" in n for n in _aiperf("rate8_ramp1")[0].notes)


def test_aiperf_shared_system_prompt_of_chat_requests_is_simulated_shared() -> None:
    # --shared-system-prompt-length 16 on the chat endpoint: every request's first message is
    # one system prompt, which the server cached once
    path = AIPERF / "system16_chat_rate8" / "profile_export.jsonl"
    rec = read_recording(path)
    wl = rec.workload
    assert wl.prefix_hashes is not None and set(wl.prefix_hashes.tolist()) == {1}
    assert wl.prefix_block_tokens == 16 and len(wl.prefix_hashes) == len(wl) == 6
    assert any(n.startswith("prompts began with one system prompt of 16 tokens, the same for "
                            "every request (AIPerf --shared-system-prompt-length 16)")
               for n in rec.notes)


def test_inference_perf_run_whose_every_request_failed_is_refused_naming_its_errors() -> None:
    # a run sent to a port nothing listened on: it was refused as "no requests left: every row
    # was dropped (failed request (0 prompt and 0 output tokens): 4 rows)"
    path = FIXTURES / "inference-perf-0.7.0" / "all_failed" / "per_request_lifecycle_metrics.json"
    doc = json.loads(path.read_text())
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert f"every one of its {len(doc)} requests failed ({len(doc)} ClientConnectorError; " \
        "the first: Cannot connect to host" in said
    assert "the server answered none" in said
