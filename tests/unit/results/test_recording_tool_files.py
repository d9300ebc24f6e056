"""Round 73's real runs of load options not covered before, each read to its tool's own
summary (``scripts/make_recording_fixtures.sh vllm-files evalscope-options
genai-bench-options``, against the CPU vLLM 0.32.0 serving the tiny model):

* ``vllm bench serve`` 0.32.0 with its file datasets, made by the script in each one's format
  (vllm/benchmarks/datasets/datasets.py ``ShareGPTDataset``, ``BurstGPTDataset``,
  ``CustomDataset``), 12 requests each to ``/v1/chat/completions`` (``--backend openai-chat``)
  at 8 req/s capped at 2 in flight; ``sonnet`` is not among 0.32.0's ``--dataset-name``
  choices;
* evalscope 1.14.1: a sweep of 1 then 3 users with ``--rate 6`` (each run capped,
  perf/core/strategies/closed_loop.py), and ``--max-tokens 8 24`` (each request's drawn in the
  range) with ``--min-tokens 4`` and no ``ignore_eos``;
* genai-bench 0.0.5: one experiment of two scenarios at 1 then 2 users (4 runs), each ended by
  ``--max-requests-per-run 6`` within ``--max-time-per-run 1`` (a minute).
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.results.recordings import RecordedStage, read_recording

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
FILES = RECORDINGS / "vllm-bench-0.32.0" / "files"
EVALSCOPE = RECORDINGS / "evalscope-1.14.1" / "options"
GENAI_BENCH = RECORDINGS / "genai-bench-0.0.5" / "two_scenarios"


@pytest.mark.parametrize(
    "name", ["sharegpt_rate8_c2.json", "burstgpt_rate8_c2.json", "custom_chat_rate8_c2.json"]
)
def test_vllm_bench_file_datasets_read_to_its_own_summary(name: str) -> None:
    doc = json.loads((FILES / name).read_text())
    rec = read_recording(FILES / name)
    u = rec.measured[rec.measured["usable"]]
    assert rec.counts["num_measured"] == doc["completed"] == len(u) == 12
    assert int(u["prompt_tokens"].sum()) == doc["total_input_tokens"]
    assert int(u["output_tokens"].sum()) == doc["total_output_tokens"]
    assert math.isclose(u["e2e_s"].mean(), float(np.mean(doc["latencies"])), rel_tol=1e-9)
    # --request-rate 8 with --max-concurrency 2: Poisson due times, each waiting for a slot
    assert rec.stages == (RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2),)
    # none of these datasets gets the client's own ignore_eos: each realised length is read as
    # the max_tokens it was sent with at least, and the note says the file does not tell
    assert any(n.startswith("max_tokens: its realised output length") for n in rec.notes)
    assert any(n.startswith("ignore_eos: not recorded in the file") for n in rec.notes)
    assert any(n.startswith("backend openai-chat: each prompt") for n in rec.notes)


def test_burstgpts_prompts_are_the_servers_count_not_the_csvs() -> None:
    # BurstGPTDataset decodes "Request tokens" synthetic ids into text; on the chat endpoint
    # the file's input_lens are the server's usage (the template's tokens in), not the CSV's
    # 22..52 (the script's GPT-4 rows: 20 + 2 i)
    doc = json.loads((FILES / "burstgpt_rate8_c2.json").read_text())
    rec = read_recording(FILES / "burstgpt_rate8_c2.json")
    order = np.argsort(rec.workload.request_id)
    assert np.asarray(rec.measured["prompt_tokens"])[order].tolist() == doc["input_lens"]
    assert not set(doc["input_lens"]) <= {20 + 2 * i for i in range(1, 17)}


def _args(run: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((run / "benchmark_args.json").read_text())
    return doc


def test_evalscope_rate_with_a_parallel_list_is_a_capped_stage_a_run() -> None:
    rec = read_recording(EVALSCOPE / "capped_sweep")
    assert rec.stages == (
        RecordedStage("parallel_1_number_6", "capped", 6.0, 1),
        RecordedStage("parallel_3_number_9", "capped", 6.0, 3),
    )
    m = rec.measured
    for stage, run in zip(rec.stages, ("parallel_1_number_6", "parallel_3_number_9"), strict=True):
        summary = json.loads(
            (EVALSCOPE / "capped_sweep" / run / "benchmark_summary.json").read_text()
        )
        part = m[m["stage"] == stage.label]
        assert (
            len(part)
            == summary["Success Requests"]
            == _args(EVALSCOPE / "capped_sweep" / run)["number"]
        )
        assert round(float(part["e2e_s"].mean()), 4) == summary["Avg Latency (s)"]


def test_evalscope_max_tokens_drawn_in_a_range_is_each_requests_own() -> None:
    run = EVALSCOPE / "token_range" / "parallel_2_number_10"
    assert _args(run)["max_tokens"] == [8, 24] and _args(run)["min_tokens"] == 4
    with sqlite3.connect(run / "benchmark_data.db") as db:
        bodies = [json.loads(r[0]) for r in db.execute("SELECT request FROM result")]
    asked = sorted(int(b["max_tokens"]) for b in bodies)
    assert len(set(asked)) > 1 and asked[0] >= 8 and asked[-1] <= 24
    assert not any(b.get("ignore_eos") for b in bodies)
    rec = read_recording(run)
    assert sorted(rec.workload.max_output_tokens.tolist()) == asked
    assert "max_tokens: the tool's recorded setting for every request" in rec.notes
    # no ignore_eos and min_tokens < max_tokens: not said to be what was asked
    assert not any(n.startswith("every request asked for ignore_eos") for n in rec.notes)
    summary = json.loads((run / "benchmark_summary.json").read_text())
    assert float(rec.measured["output_tokens"].mean()) == summary["Avg Output Tokens"]


def test_genai_bench_scenarios_and_concurrencies_are_stages_in_the_order_it_ran_them() -> None:
    meta = json.loads((GENAI_BENCH / "experiment_metadata.json").read_text())
    assert meta["traffic_scenario"] == ["D(32,128)", "D(64,128)"]
    assert meta["num_concurrency"] == [1, 2] and meta["max_requests_per_run"] == 6
    rec = read_recording(GENAI_BENCH)
    labels = [f"{s} concurrency {c}" for s in ("D(32,128)", "D(64,128)") for c in (1, 2)]
    assert [st.label for st in rec.stages] == labels
    assert [st.max_concurrency for st in rec.stages] == [1, 2, 1, 2]
    m = rec.measured
    for stage, path in zip(
        rec.stages,
        sorted(GENAI_BENCH.glob("D*_num_concurrency_*.json"), key=lambda p: (p.name[:6], p.name)),
        strict=True,
    ):
        agg = json.loads(path.read_text())["aggregated_metrics"]
        part = m[m["stage"] == stage.label]
        # the stop is checked once a second: more than 6 came back by then, all recorded
        assert len(part) == agg["num_completed_requests"] >= 6
        assert float(part["prompt_tokens"].sum()) == agg["stats"]["num_input_tokens"]["sum"]
        assert stage.time_limit_end_s is not None
    starts = [float(m.loc[m["stage"] == label, "arrival_s"].min()) for label in labels]
    assert starts == sorted(starts)
