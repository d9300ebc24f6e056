"""NVIDIA Dynamo's per-request trace (``tests/fixtures/recordings/dynamo-1.6.1/``, made by
``scripts/make_recording_fixtures.sh dynamo``: Dynamo 1.6.1's frontend in front of its mocker,
``DYN_REQUEST_TRACE=1`` with the ``jsonl`` sink, 48 requests from the openai SDK: chat and
completions, streamed and not, 1, 2 and 4 in flight, 8, 12 or 16 output tokens). Read to the
figures of the file's own lines, computed here; what cannot be used refused in one line naming
the file and line. The hand-made cases change a copy of the real file."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.results.recordings import RecordedStage, detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

TRACE = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "recordings"
    / "dynamo-1.6.1"
    / "trace_chat_completions_c124.jsonl"
)


def lines(path: Path = TRACE) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_lines(path: Path, docs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def test_the_trace_reads_to_its_own_lines() -> None:
    docs = lines()
    requests = [d["event"]["request"] for d in docs]
    assert len(requests) == 48
    assert detect_recording_format(TRACE) == "dynamo-trace"
    rec = read_recording(TRACE)
    assert rec.format == "dynamo-trace" and rec.tool == "NVIDIA Dynamo request trace"
    assert rec.stages == (RecordedStage("", "unknown"),)
    assert rec.num_usable == 48 and rec.counts["num_failed"] == 0
    t0 = min(r["request_received_ms"] for r in requests)
    expected = sorted(
        (
            (r["request_received_ms"] - t0) / 1000,
            r["input_tokens"],
            r["output_tokens"],
            r["ttft_ms"] / 1000,
            r["total_time_ms"] / 1000,
            r["avg_itl_ms"] / 1000,
        )
        for r in requests
    )
    m = rec.measured
    got = sorted(
        zip(
            m["arrival_s"],
            m["prompt_tokens"],
            m["output_tokens"],
            m["ttft_s"],
            m["e2e_s"],
            m["itl_mean_s"],
            strict=True,
        )
    )
    assert np.allclose(
        np.array(got, dtype=float), np.array(expected, dtype=float), rtol=1e-12, atol=0
    )
    assert m["arrival_s"].is_monotonic_increasing
    # the client asked 8, 12 or 16 tokens and the mocker stopped there: no max_tokens kept
    assert sorted(set(m["output_tokens"])) == [8, 12, 16]
    assert rec.workload.max_output_tokens.tolist() == rec.workload.output_tokens.tolist()
    assert any(n.startswith("max_tokens: its realised output length") for n in rec.notes)
    said = [n for n in rec.notes if n.startswith("holds, per request")]
    assert len(said) == 1 and "lacks max_tokens, a status, streaming" in said[0]
    assert "model" not in rec.config  # 1.6.1's records did not name it


def test_the_frontends_end_is_its_arrival_plus_its_total_time() -> None:
    """What the reader takes as the arrival (request_received_ms) is the frontend's own clock:
    its record's time is that plus total_time_ms, rounded (record.rs at 0366e63a,
    event_time_unix_ms_from_request), in every line of the file."""
    for d in lines():
        r = d["event"]["request"]
        assert d["event"]["event_time_unix_ms"] == r["request_received_ms"] + round(
            r["total_time_ms"]
        )


def test_the_fields_are_the_request_trackers_as_the_reader_says() -> None:
    """The docstring's reading of the fields (timing.rs's RequestTracker): the mean ITL is
    (end - first token) / (output_tokens - 1), and the TTFT is the wait before prefill plus
    the prefill, in every line of the 1.6.1 file."""
    for d in lines():
        r = d["event"]["request"]
        itl = (r["total_time_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1)
        assert r["avg_itl_ms"] == pytest.approx(itl, rel=1e-12)
        assert r["prefill_wait_time_ms"] + r["prefill_time_ms"] == pytest.approx(r["ttft_ms"])


def test_other_records_are_skipped_and_said(tmp_path: Path) -> None:
    docs = lines()
    tool = {
        "timestamp": 1,
        "event": {
            "schema": "dynamo.request.trace.v1",
            "event_type": "tool_end",
            "event_time_unix_ms": 1,
            "tool": {"tool_call_id": "t", "tool_class": "x"},
        },
    }
    rec = read_recording(write_lines(tmp_path / "t.jsonl", [tool, *docs, tool]))
    assert len(rec.measured) == 48
    assert "2 other records skipped (tool_end 2)" in rec.notes


def test_a_record_without_input_tokens_takes_the_replay_length(tmp_path: Path) -> None:
    """record.rs's emit_request_end writes output_tokens and replay only: the prompt is
    replay.input_length, said."""
    docs = lines()
    del docs[0]["event"]["request"]["input_tokens"]
    docs[0]["event"]["request"]["replay"]["input_length"] = 99
    rec = read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert 99 in rec.measured["prompt_tokens"].tolist()
    assert "1 request without input_tokens: the prompt is replay.input_length" in rec.notes


def test_a_record_without_its_times_is_counted_failed(tmp_path: Path) -> None:
    docs = lines()
    del docs[3]["event"]["request"]["ttft_ms"]
    rec = read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert rec.counts["num_failed"] == 1 and rec.num_usable == 47


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (
            lambda r: r.update(total_time_ms=1.0),
            "line 5: field 'event.request.total_time_ms': the request ends (1 ms) before its first",
        ),
        (
            lambda r: r.update(output_tokens=-1),
            "line 5: field 'event.request.output_tokens': must be a whole number >= 0, got -1",
        ),
        (
            lambda r: r.update(ttft_ms="x"),
            "line 5: field 'event.request.ttft_ms': must be a finite number >= 0, got 'x'",
        ),
        (
            lambda r: r.pop("request_received_ms"),
            "line 5: field 'event.request.request_received_ms': a request_end record without",
        ),
        (
            lambda r: r.update(ttft_ms=1e12),
            "line 5: field 'event.request.ttft_ms': implausible time",
        ),
        (
            lambda r: r.update(request_received_ms=1e15),  # the loader's refusal: the line named
            "line 5: field 'event.request.request_received_ms': the trace spans 9.98e+11 s",
        ),
    ],
)
def test_damaged_records_are_refused_naming_the_line(
    tmp_path: Path, change: Any, said: str
) -> None:
    docs = lines()
    change(docs[4]["event"]["request"])
    path = write_lines(tmp_path / "t.jsonl", docs)
    with pytest.raises(TraceError) as err:
        read_recording(path)
    text = str(err.value)
    assert "\n" not in text and str(path) in text
    assert said in text, text


def test_a_line_of_another_kind_is_refused(tmp_path: Path) -> None:
    docs = lines()
    docs[2] = {"timestamp": 3, "event": {"schema": "other"}}
    path = write_lines(tmp_path / "t.jsonl", docs)
    with pytest.raises(TraceError, match=r"line 3: not a record of Dynamo's request trace"):
        read_recording(path)


def test_a_trace_of_tool_events_only_is_refused(tmp_path: Path) -> None:
    tool = {
        "schema": "dynamo.request.trace.v1",
        "event_type": "tool_start",
        "event_time_unix_ms": 1,
    }
    path = write_lines(tmp_path / "t.jsonl", [tool])  # a record as other sinks write it
    with pytest.raises(
        TraceError,
        match=r"holds no request_end record \(records here: "
        r"tool_start 1\)",
    ):
        read_recording(path)


def test_requests_of_several_models_are_refused(tmp_path: Path) -> None:
    docs = lines()
    docs[0]["event"]["request"]["model"] = "a"
    docs[1]["event"]["request"]["model"] = "b"
    with pytest.raises(TraceError, match=r"holds requests of 2 models \(a, b\)"):
        read_recording(write_lines(tmp_path / "t.jsonl", docs))
    docs[1]["event"]["request"]["model"] = "a"
    assert read_recording(write_lines(tmp_path / "t.jsonl", docs)).config["model"] == "a"
    assert not math.isnan(docs[0]["event"]["request"]["ttft_ms"])


def test_the_default_sinks_gzip_file_is_refused_naming_gunzip(tmp_path: Path) -> None:
    """DYN_REQUEST_TRACE=1 alone writes the jsonl_gz sink (1.6.1 wrote
    dynamo-request-trace.000000.jsonl.gz here): refused in one line that says to gunzip it."""
    path = tmp_path / "dynamo-request-trace.000000.jsonl.gz"
    path.write_bytes(gzip.compress(TRACE.read_bytes()))
    with pytest.raises(TraceError, match=r"is gzip-compressed: decompress it first \(gunzip -k"):
        read_recording(path)
    (tmp_path / "plain.jsonl").write_bytes(gzip.decompress(path.read_bytes()))
    assert read_recording(tmp_path / "plain.jsonl").num_usable == 48


ABANDONED = TRACE.with_name("trace_abandoned_refused.jsonl")


def test_an_abandoned_stream_reads_as_finished_and_refused_requests_are_absent() -> None:
    """The second run: a completion, a stream of 2000 tokens asked whose client closed it after
    3 chunks, two requests the frontend refused (404, 400) and a last completion. The trace
    holds three records: the abandoned stream as if it had run to its end (Dynamo 1.6.1 and its
    mocker generated the 2000 tokens), no record of the refused ones; the note says so."""
    requests = [d["event"]["request"] for d in lines(ABANDONED)]
    assert [r["output_tokens"] for r in requests] == [8, 2000, 8]
    rec = read_recording(ABANDONED)
    assert rec.num_usable == 3 and rec.counts["num_failed"] == 0
    long = rec.measured[rec.measured["output_tokens"] == 2000]
    assert long["e2e_s"].tolist() == [requests[1]["total_time_ms"] / 1000]
    assert long["e2e_s"].iloc[0] > 10  # 2000 tokens at the mocker's pace, not 3 chunks
    said = next(n for n in rec.notes if n.startswith("no status"))
    assert "traced a stream its client closed after 3 chunks as finished" in said


def test_the_prompts_block_hashes_are_read_as_prefix_blocks() -> None:
    """replay.input_sequence_hashes (ceil(input_length / trace_block_size) chained u64 hashes,
    replay.rs input_sequence_hashes) become the workload's prefix blocks of trace_block_size
    tokens, each distinct hash one id, each request's as many as the file lists."""
    docs = [d["event"]["request"] for d in lines()]
    rec = read_recording(TRACE)
    w = rec.workload
    assert w.prefix_block_tokens == 64
    distinct: dict[int, int] = {}
    for row, i in enumerate(w.request_id.tolist()):
        hashes = docs[i]["replay"]["input_sequence_hashes"]
        assert len(w.prefix_of(row)) == len(hashes) == math.ceil(docs[i]["input_tokens"] / 64)
        for h, got in zip(hashes, w.prefix_of(row), strict=True):
            assert distinct.setdefault(h, got) == got
    assert len(set(distinct.values())) == len(distinct)
    said = [n for n in rec.notes if n.startswith("prompt prefixes:")]
    assert said and "64-token block" in said[0], rec.notes


def shared_prefix_copy(tmp_path: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The real trace with every prompt made 200 tokens whose first two 64-token blocks are the
    same (the same two leading hashes), the other two each request's own."""
    docs = lines()
    for k, d in enumerate(docs):
        req = d["event"]["request"]
        req["input_tokens"] = req["replay"]["input_length"] = 200
        req["replay"]["input_sequence_hashes"] = [2**63 + 7, 2**64 - 1, 10 * k + 1, 10 * k + 2]
    return write_lines(tmp_path / "shared.jsonl", docs), docs


def test_shared_leading_hashes_are_one_prefix_and_said(tmp_path: Path) -> None:
    path, docs = shared_prefix_copy(tmp_path)
    rec = read_recording(path)
    w = rec.workload
    heads = {w.prefix_of(row)[:2] for row in range(len(docs))}
    tails = {w.prefix_of(row)[2:] for row in range(len(docs))}
    assert len(heads) == 1 and len(tails) == len(docs)
    said = next(n for n in rec.notes if n.startswith("prompt prefixes:"))
    assert f"{len(docs) - 1} of {len(docs)} requests begin with a block an earlier" in said


def test_the_servers_cache_hits_are_said_beside_the_simulated_sharing(tmp_path: Path) -> None:
    path, docs = shared_prefix_copy(tmp_path)
    for d in docs[1:]:
        d["event"]["request"]["cached_tokens"] = 128
    rec = read_recording(write_lines(path, docs))
    hits = 128 * (len(docs) - 1)
    assert rec.counts["num_prompt_tokens_cached"] == hits
    assert any(
        f"the server served {hits:,} of the {200 * len(docs):,} prompt tokens" in n
        and "shares the prefix blocks above" in n
        for n in rec.notes
    ), rec.notes


def test_hashes_of_two_block_sizes_are_refused_naming_the_line(tmp_path: Path) -> None:
    docs = lines()
    docs[5]["event"]["request"]["replay"]["trace_block_size"] = 32
    with pytest.raises(TraceError) as err:
        read_recording(write_lines(tmp_path / "t.jsonl", docs))
    said = str(err.value)
    assert "line 6" in said and "replay.trace_block_size" in said
    assert "blocks of 64 tokens (line 1) and of 32" in said, said


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("input_sequence_hashes", [1, -2], "replay.input_sequence_hashes"),
        ("input_sequence_hashes", [1, "2"], "replay.input_sequence_hashes"),
        ("input_sequence_hashes", [2**64], "replay.input_sequence_hashes"),
        ("input_sequence_hashes", 5, "replay.input_sequence_hashes"),
        ("trace_block_size", 0, "replay.trace_block_size"),
        ("trace_block_size", None, "replay.trace_block_size"),
    ],
)
def test_damaged_hashes_are_refused_naming_the_field(
    tmp_path: Path, key: str, value: Any, field: str
) -> None:
    docs = lines()
    docs[3]["event"]["request"]["replay"][key] = value
    with pytest.raises(TraceError) as err:
        read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert "line 4" in str(err.value) and field in str(err.value), str(err.value)


def test_more_hashes_than_the_prompts_blocks_are_refused(tmp_path: Path) -> None:
    """Hashes of blocks smaller than trace_block_size would count a shared prefix over."""
    docs = lines()
    docs[2]["event"]["request"]["replay"]["input_sequence_hashes"] = [1, 2, 3]
    with pytest.raises(TraceError) as err:
        read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert "input_sequence_hashes" in str(err.value) and "3 hashes" in str(err.value), str(
        err.value
    )


def test_records_without_hashes_get_no_prefix_and_it_is_said(tmp_path: Path) -> None:
    docs = lines()
    for d in docs[:4]:
        del d["event"]["request"]["replay"]["input_sequence_hashes"]
    rec = read_recording(write_lines(tmp_path / "t.jsonl", docs))
    said = next(n for n in rec.notes if n.startswith("prompt prefixes:"))
    assert "4 records without hashes get none" in said
    empty = [row for row in range(len(docs)) if not rec.workload.prefix_of(row)]
    assert len(empty) == 4


def test_one_worker_makes_no_fleet() -> None:
    """The real trace's requests all name one worker (prefill = decode): one engine."""
    rec = read_recording(TRACE)
    assert "num_replicas" not in rec.config and rec.config["num_servers"] == 1
    assert not any("engines" in n for n in rec.notes), rec.notes


def test_the_workers_named_make_the_fleet_behind_the_default_router(tmp_path: Path) -> None:
    """Three engines named (two worker ids, one of them with two dp ranks): three replicas behind
    round robin, the frontend's default --router-mode, said as assumed."""
    docs = lines()
    for k, d in enumerate(docs):
        wid, rank = ((7, None), (9, 0), (9, 1))[k % 3]
        worker = {"prefill_worker_id": wid, "decode_worker_id": wid}
        if rank is not None:
            worker |= {"prefill_dp_rank": rank, "decode_dp_rank": rank}
        d["event"]["request"]["worker"] = worker
    rec = read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert rec.config["num_replicas"] == 3 and "router" not in rec.config  # not recorded
    said = next(n for n in rec.notes if "engines" in n)
    assert "simulated as 3 replicas behind round_robin (ASSUMED" in said
    assert "--router-mode kv: --set fleet.router=prefix_affinity" in said


def test_a_disaggregated_trace_is_said_not_a_fleet(tmp_path: Path) -> None:
    docs = lines()
    for k, d in enumerate(docs):
        d["event"]["request"]["worker"] = {"prefill_worker_id": 1 + k % 2, "decode_worker_id": 5}
    rec = read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert "num_replicas" not in rec.config
    said = next(n for n in rec.notes if "disaggregated" in n)
    assert f"{len(docs)} of the {len(docs)} requests were prefilled on one worker" in said
    assert "2 prefill and 1 decode engines seen" in said


@pytest.mark.parametrize(
    ("worker", "field"),
    [
        ({"prefill_worker_id": {}, "decode_worker_id": 1}, "worker.prefill_worker_id"),
        ({"prefill_worker_id": 1, "decode_worker_id": -1}, "worker.decode_worker_id"),
        ({"decode_worker_id": 1, "decode_dp_rank": "0"}, "worker.decode_dp_rank"),
        ([1, 2], "event.request.worker"),
    ],
)
def test_damaged_worker_ids_are_refused_naming_the_field(
    tmp_path: Path, worker: Any, field: str
) -> None:
    docs = lines()
    docs[7]["event"]["request"]["worker"] = worker
    with pytest.raises(TraceError) as err:
        read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert "line 8" in str(err.value) and field in str(err.value), str(err.value)


SESSIONS = TRACE.with_name("trace_agent_sessions.jsonl")


def test_agent_sessions_are_turns_each_after_the_one_before_and_its_tool_time() -> None:
    """Four agents' sessions (x-dynamo-session-id; one a sub-agent's): each later turn waits
    for the turn before it in its session (by arrival) and the gap the trace shows after that
    turn's end (the client's "tool" of 0.1-0.3 s)."""
    events = [json.loads(line)["event"] for line in SESSIONS.read_text().splitlines()]
    rec = read_recording(SESSIONS)
    conv = rec.conversations
    assert conv is not None and conv.num_later_turns == len(events) - 4
    rows = rec.workload.request_id.tolist()
    for j, p in enumerate(conv.previous):
        e = events[rows[j]]
        if p < 0:
            continue
        before = events[rows[p]]
        assert before["agent_context"]["session_id"] == e["agent_context"]["session_id"]
        end_ms = before["request"]["request_received_ms"] + before["request"]["total_time_ms"]
        gap_s = (e["request"]["request_received_ms"] - end_ms) / 1000
        assert conv.delay_s[j] == pytest.approx(gap_s)
        assert 0.05 < conv.delay_s[j] < 0.4  # the client's 0.1-0.3 s, less its own parsing
    said = next(n for n in rec.notes if "agent sessions" in n)
    assert said.startswith("17 requests of 4 agent sessions") and "13 later turns" in said
    assert "1 sub-agent sessions (parent_session_id)" in said


def test_a_turn_sent_before_the_one_before_it_ended_waits_for_none(tmp_path: Path) -> None:
    docs = [json.loads(line) for line in SESSIONS.read_text().splitlines()]
    rec = read_recording(SESSIONS)
    conv = rec.conversations
    assert conv is not None
    rows = rec.workload.request_id.tolist()
    j = next(j for j, p in enumerate(conv.previous) if p >= 0)
    before = docs[rows[conv.previous[j]]]["event"]["request"]
    docs[rows[j]]["event"]["request"]["request_received_ms"] = before["request_received_ms"] + 1
    copy = read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert copy.conversations is not None
    assert copy.conversations.num_later_turns == conv.num_later_turns - 1
    said = next(n for n in copy.notes if "agent sessions" in n)
    assert "1 sent before the turn before them ended wait for none" in said


@pytest.mark.parametrize("value", [7, "", {"id": "a"}])
def test_a_damaged_session_id_is_refused_naming_the_field(tmp_path: Path, value: Any) -> None:
    docs = [json.loads(line) for line in SESSIONS.read_text().splitlines()]
    docs[2]["event"]["agent_context"]["session_id"] = value
    with pytest.raises(TraceError) as err:
        read_recording(write_lines(tmp_path / "t.jsonl", docs))
    assert "line 3" in str(err.value) and "agent_context.session_id" in str(err.value)


def test_a_trace_without_sessions_has_no_turns() -> None:
    rec = read_recording(TRACE)
    assert rec.conversations is None
    assert not any("agent sessions" in n for n in rec.notes)
