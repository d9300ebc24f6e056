"""vllm-project/vllm-bench, the Rust port of ``vllm bench serve``, writes its ``--multi-turn``
result with ``build_multi_turn_result_json`` (``src/output/json.rs`` at f313182): ``mode``
``multi_turn``, ``num_conversations``, ``turns_per_conversation``, ``multi_turn_concurrency``,
``inter_turn_delay_ms``, the aggregates over all turns and ``per_turn_metrics``; unlike its
single-turn ``build_result_json`` it writes no per-request lists whatever ``--save-detailed``
says. The reader told such a file to "run vllm bench serve with --save-result
--save-detailed", which that mode cannot do.

Hand-made edge case (``handmade/vllm-bench-rs-0.1.0-multi-turn-handmade.json``): the keys
``build_multi_turn_result_json`` writes with the default percentile metrics (ttft, tpot, itl,
e2el; p99 and the p90 always added, ``src/config.rs``), sorted and compact as serde_json
(no ``preserve_order``) and ``save_result`` write them, for 4 conversations of 3 turns, 2 at
once, 500 ms between turns; beside it the real single-turn result of vLLM 0.32.0's client,
whose refusal is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
MULTI_TURN = FIXTURES / "handmade" / "vllm-bench-rs-0.1.0-multi-turn-handmade.json"


@pytest.mark.parametrize("fmt", [None, "vllm-bench"])
def test_a_vllm_bench_multi_turn_result_is_not_told_to_add_save_detailed(
        fmt: str | None) -> None:
    with pytest.raises(TraceError) as err:
        read_recording(MULTI_TURN, format=fmt)
    said = str(err.value)
    assert "is a vllm-bench --multi-turn result (4 conversations of 3 turns, 2 at once, " \
        "500 ms between turns)" in said
    assert "lists no request, --save-detailed or not" in said
    assert "run vllm bench serve with --save-result --save-detailed" not in said
    assert "input_lens" not in said  # not a field the file lacks: that mode has none


def test_appended_multi_turn_results_are_named_too(tmp_path: Path) -> None:
    line = MULTI_TURN.read_text()
    path = tmp_path / "appended.jsonl"
    path.write_text(line + "\n" + line + "\n")  # --append-result: one line a run
    with pytest.raises(TraceError, match="is a vllm-bench --multi-turn result"):
        read_recording(path)


def test_a_single_turn_result_without_lists_is_still_told_to_add_save_detailed(
        tmp_path: Path) -> None:
    doc = json.loads((FIXTURES / "vllm-bench-0.32.0" / "concurrency4.json").read_text())
    for key in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors",
                "latencies", "start_times"):
        doc.pop(key, None)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="run vllm bench serve with --save-result "
                                         "--save-detailed"):
        read_recording(path)


def test_the_turns_it_completed_are_said_where_they_differ(tmp_path: Path) -> None:
    # big-yellow-duck/vllm-bench-collection results/gfx1201/qwen3.8-27b-fp8/
    # spec-decode-sharegpt-prefix-sweep/...-concurrency4-...json at 7da37c8 (no licence: only
    # its counts are used): turns_per_conversation 3, yet 32 turns of 4 conversations completed
    # (avg_turns_completed 8.0, per_turn_metrics of turns 0-7); the refusal said "4
    # conversations of 3 turns" only
    doc = json.loads(MULTI_TURN.read_text())
    doc.update(num_conversations=4, multi_turn_concurrency=4, avg_turns_completed=8.0)
    path = tmp_path / "concurrency4.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"\(4 conversations of 3 turns, 8 completed on "
                                         r"average, 4 at once, 500 ms between turns\)"):
        read_recording(path)
