"""``vllm bench serve`` result files across the datasets and endpoints users run, and across
vLLM versions up to 0.34.0.

The files under ``vllm-bench-0.32.0/datasets/`` were written by the CPU vLLM 0.32.0's client
against its server (``scripts/make_recording_fixtures.sh vllm-datasets``): a JSONL of prompts
(``--dataset-name custom``), ``prefix_repetition`` and the random prompts sent to
``/v1/chat/completions`` (``--backend openai-chat``). The later versions' shapes are made by
hand from their source, the PyPI sdists of vLLM 0.33.0 (commit 4ba787ec9) and 0.34.0 (commit
62d4bc3c7), each test naming the file and function.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import RecordedStage, Recording, read_recording
from kvbudget.workloads.errors import TraceError
from tests.conftest import unwrapped

VLLM = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"
DATASETS = VLLM / "datasets"


def usable(rec: Recording) -> pd.DataFrame:
    return rec.measured[rec.measured["usable"]]


def by_row(rec: Recording, column: str) -> np.ndarray[Any, Any]:
    """A column of the recording in the file's request order."""
    order = np.argsort(rec.workload.request_id)
    return np.asarray(rec.measured[column])[order]


def write(tmp_path: Path, doc: dict[str, Any], name: str = "run.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("name", ["custom_rate8.json", "prefix_repetition_rate8.json",
                                  "chat_rate8.json"])
def test_each_dataset_reads_to_its_own_summary(name: str) -> None:
    doc = json.loads((DATASETS / name).read_text())
    rec = read_recording(DATASETS / name)
    u = usable(rec)
    assert rec.counts["num_measured"] == doc["completed"] == len(u) == 10
    assert int(u["prompt_tokens"].sum()) == doc["total_input_tokens"]
    assert int(u["output_tokens"].sum()) == doc["total_output_tokens"]
    assert math.isclose(u["e2e_s"].mean(), float(np.mean(doc["latencies"])), rel_tol=1e-9)
    if doc["backend"] != "openai-chat":  # a 0.32 chat run's TTFT moves: the test below
        assert math.isclose(u["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"], rel_tol=1e-9)
    assert rec.stages == (RecordedStage("8 req/s", "open", 8.0, None),)
    assert sorted(by_row(rec, "prompt_tokens").tolist()) == sorted(doc["input_lens"])


def test_a_custom_jsonl_keeps_each_prompts_length_and_says_max_tokens() -> None:
    # ten prompts of 4 to 13 tokens, each line its own output_tokens, no --ignore-eos
    doc = json.loads((DATASETS / "custom_rate8.json").read_text())
    rec = read_recording(DATASETS / "custom_rate8.json")
    assert by_row(rec, "prompt_tokens").tolist() == doc["input_lens"]
    assert len(set(doc["input_lens"])) == 10 and len(set(doc["output_lens"])) == 10
    assert (rec.workload.max_output_tokens == rec.workload.output_tokens).all()
    assert any(n.startswith("max_tokens: its realised output length") for n in rec.notes)
    assert any(n.startswith("ignore_eos: not recorded in the file") for n in rec.notes)
    assert not any("openai-chat" in n for n in rec.notes)


def test_the_random_datasets_own_ignore_eos_is_said() -> None:
    # vllm bench serve sets ignore_eos itself for --dataset-name random on its OpenAI-compatible
    # backends (vllm/benchmarks/serve.py main_async, 0.32.0 to 0.34.0), and saves neither it
    # nor the dataset: the note said only "not recorded", as if each length were a lower bound
    rec = read_recording(VLLM / "options" / "range05_rate8.json")
    said = [n for n in rec.notes if n.startswith("ignore_eos: not recorded")]
    assert len(said) == 1
    assert "it sets ignore_eos itself for --dataset-name random, random-mm and timed_trace" \
        in said[0]


def test_a_chat_runs_prompts_count_the_template_the_server_applied() -> None:
    # the same --random-input-len 32 as rate8.json, sent to /v1/chat/completions: input_lens are
    # the server's usage.prompt_tokens, the chat template's tokens included
    chat = json.loads((DATASETS / "chat_rate8.json").read_text())
    plain = json.loads((VLLM / "rate8.json").read_text())
    assert min(chat["input_lens"]) > max(plain["input_lens"])
    rec = read_recording(DATASETS / "chat_rate8.json")
    assert by_row(rec, "prompt_tokens").tolist() == chat["input_lens"]
    said = [n for n in rec.notes if n.startswith("backend openai-chat: each prompt")]
    assert len(said) == 1 and "the chat template's tokens included" in said[0]


def test_a_032_chat_run_does_not_count_the_role_chunk_as_the_first_token() -> None:
    # vLLM 0.32.0's async_request_openai_chat_completions took the server's opening role chunk
    # (no text) for the first token: each request holds as many itls as output tokens, the
    # first one the gap from the role chunk to the first text, sent in the same engine step
    doc = json.loads((DATASETS / "chat_rate8.json").read_text())
    assert [len(i) for i in doc["itls"]] == doc["output_lens"]
    rec = read_recording(DATASETS / "chat_rate8.json")
    first = np.array([i[0] for i in doc["itls"]])
    assert np.allclose(by_row(rec, "ttft_s"), np.array(doc["ttfts"]) + first, rtol=1e-12)
    assert np.allclose(by_row(rec, "e2e_s"), doc["latencies"], rtol=1e-12)
    said = [n for n in rec.notes if "opening role chunk" in n]
    assert len(said) == 1 and said[0].startswith("backend openai-chat with one inter-token time "
                                                 "per output token, not one fewer")


def _as_033(doc: dict[str, Any]) -> dict[str, Any]:
    """What vLLM 0.33's client would have saved of the same streams: it skips chunks with no
    streamed output (0.33.0 vllm/benchmarks/lib/endpoint_request_func.py,
    ``_choice_has_streamed_output``, the opening role chunk's ``delta`` carries ``role``), so
    the TTFT is taken at the first text and the role-to-text gap is no inter-token time."""
    new = copy.deepcopy(doc)
    new["ttfts"] = [t + i[0] for t, i in zip(doc["ttfts"], doc["itls"], strict=True)]
    new["itls"] = [i[1:] for i in doc["itls"]]
    return new


def test_a_033_chat_run_reads_as_the_032_one_without_a_note(tmp_path: Path) -> None:
    doc = json.loads((DATASETS / "chat_rate8.json").read_text())
    old = read_recording(DATASETS / "chat_rate8.json")
    new = read_recording(write(tmp_path, _as_033(doc)))
    for column in ("ttft_s", "e2e_s", "itl_mean_s", "output_tokens", "prompt_tokens"):
        assert np.allclose(by_row(new, column), by_row(old, column), rtol=1e-12, equal_nan=True)
    assert not any("opening role chunk" in n for n in new.notes)


def test_a_failed_032_chat_request_is_simulated_with_the_tokens_it_streamed(
        tmp_path: Path) -> None:
    # a stream broken after its role chunk and 5 text chunks: 5 tokens generated, not the 6 that
    # len(itls) + 1 counts for a completions stream
    doc = json.loads((DATASETS / "chat_rate8.json").read_text())
    doc["errors"][3] = "Traceback (most recent call last):\naiohttp.ClientPayloadError"
    doc["output_lens"][3] = 0
    doc["itls"][3] = doc["itls"][3][:5]
    rec = read_recording(write(tmp_path, doc))
    assert by_row(rec, "output_tokens")[3] == 5
    assert rec.counts["num_failed"] == 1


def test_an_034_stream_error_is_a_failed_request_with_what_it_streamed(tmp_path: Path) -> None:
    # vLLM 0.34.0 marks a request failed when its stream carries an error object, keeping its
    # TTFT and inter-token times and saving the error as JSON (0.34.0
    # vllm/benchmarks/lib/endpoint_request_func.py, ``stream_error = json.dumps(error)``);
    # calculate_metrics saves its output_lens as 0
    doc = json.loads((VLLM / "rate8.json").read_text())
    doc["errors"][0] = json.dumps({"message": "engine died", "type": "InternalServerError",
                                   "code": 500})
    doc["output_lens"][0] = 0
    doc["itls"][0] = doc["itls"][0][:6]
    rec = read_recording(write(tmp_path, doc))
    assert by_row(rec, "output_tokens")[0] == 7
    assert by_row(rec, "status")[0] == "error" and rec.counts["num_failed"] == 1
    assert any("failed requests streamed part of their answer" in n for n in rec.notes)


def test_033_server_metrics_lists_are_read_around_and_said(tmp_path: Path) -> None:
    # vLLM 0.33.0 saves the server's own queue time and TTFT per request, in seconds, null
    # where the server sent no metrics (vllm/benchmarks/serve.py _get_server_metrics_results,
    # endpoint_request_func.py _update_server_metrics)
    doc = json.loads((VLLM / "rate8.json").read_text())
    n = len(doc["input_lens"])
    doc["server_queue_times"] = [0.001] * (n - 1) + [None]
    doc["server_ttfts"] = [t * 0.9 for t in doc["ttfts"][:-1]] + [None]
    with_lists = read_recording(write(tmp_path, doc))
    without = read_recording(VLLM / "rate8.json")
    for column in ("ttft_s", "e2e_s", "arrival_s", "prompt_tokens", "output_tokens"):
        assert np.allclose(by_row(with_lists, column), by_row(without, column), equal_nan=True)
    said = [x for x in with_lists.notes if "server_queue_times, server_ttfts" in x]
    assert len(said) == 1 and f"of {n - 1} requests" in said[0]
    assert not any("server_queue_times" in x for x in without.notes)


def _pooling(backend: str, detailed: bool = True) -> dict[str, Any]:
    """A pooling run as vLLM 0.34.0 saves it (vllm/benchmarks/serve.py ``benchmark()``, the
    ``EmbedBenchmarkMetrics`` branch of ``result``; ``main_async`` adds the settings and, without
    --save-detailed, deletes input_lens and errors but keeps latencies and queue_times)."""
    doc: dict[str, Any] = {
        "date": "20261116-120000", "endpoint_type": backend, "backend": backend,
        "label": None, "model_id": "BAAI/bge-m3", "tokenizer_id": "BAAI/bge-m3",
        "num_prompts": 3, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None,
        "duration": 0.5, "completed": 3, "total_input_tokens": 96,
        "total_input_sequences": 3, "request_throughput": 6.0,
        "input_sequence_throughput": 6.0, "total_token_throughput": 192.0,
        "input_lens": [32, 32, 32], "latencies": [0.1, 0.2, 0.3],
        "queue_times": [0.0, 0.0, 0.0], "errors": ["", "", ""], "mean_e2el_ms": 200.0}
    if not detailed:
        del doc["input_lens"], doc["errors"]
    return doc


@pytest.mark.parametrize(("backend", "detailed"), [("openai-embeddings", True),
                                                   ("vllm-rerank", True),
                                                   ("openai-embeddings", False)])
def test_a_pooling_run_is_refused_by_name_not_as_missing_detail(
        tmp_path: Path, backend: str, detailed: bool) -> None:
    # it was refused as "a vllm bench serve result without per-request data ... run with
    # --save-detailed", which the run had
    with pytest.raises(TraceError) as err:
        read_recording(write(tmp_path, _pooling(backend, detailed)))
    assert f"is a vllm bench serve run of a pooling backend ({backend}" in str(err.value)
    assert "--save-detailed" not in str(err.value)


def test_a_client_that_read_whole_answers_at_once_is_said() -> None:
    # 15 of rate8.json's 20 requests got their 15 inter-token times within 0.1 ms in all (the
    # CPU client read each stream in one go): their TTFT is about their E2E and their TPOT
    # near 0, which made the per-request TPOT MAPE tens of thousands of per cent, unexplained
    doc = json.loads((VLLM / "rate8.json").read_text())
    burst = [sum(i) / len(i) < 1e-4 for i in doc["itls"]]
    rec = read_recording(VLLM / "rate8.json")
    said = [n for n in rec.notes if "less than 100 us apart" in n]
    assert len(said) == 1 and said[0].startswith(f"{sum(burst)} of 20 completed requests")
    assert 0 < sum(burst) < 20
    steady = read_recording(VLLM / "append.jsonl")
    assert not any("less than 100 us apart" in n for n in steady.notes)


@pytest.mark.parametrize(("name", "said"), [
    ("custom_rate8.json", ()),
    ("prefix_repetition_rate8.json", ()),
    ("chat_rate8.json", ("note: backend openai-chat: each prompt is simulated with its "
                         "input_lens, the server's count of the prompt it prefilled",
                         "note: backend openai-chat with one inter-token time per output "
                         "token")),
])
def test_validate_says_what_each_dataset_file_cannot(tmp_path: Path, name: str,
                                                     said: tuple[str, ...]) -> None:
    path = DATASETS / name
    args = ["validate", "--records", str(path), "--gpu", "H100", "--model", "Llama-3.1-8B",
            "--out", str(tmp_path / "v")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.stderr
    out = res.stdout + res.stderr
    flat = " ".join(out.split())
    assert f"{path} (vllm bench serve): 10 requests simulated, 10 measured" in flat
    assert "stage '8 req/s': open loop, 8 req/s; replayed as open loop at the recorded send " \
        "times" in flat
    assert "note: max_tokens: its realised output length" in flat
    assert "note: ignore_eos: not recorded in the file (vllm bench serve does not save it); " \
        "it sets ignore_eos itself for --dataset-name random" in flat
    # the server's prefix cache served prefix_repetition's shared prefixes: said, not simulated
    assert "the prefix_repetition dataset" in flat and "simulated TTFT is too high" in flat
    for needle in said:
        assert needle in flat
    records = next(ln for ln in unwrapped(out) if ln.startswith("the file records:"))
    assert ("openai-chat" in records) == (name == "chat_rate8.json")


def test_the_first_prompt_sent_before_the_run_is_said() -> None:
    # the readiness check and each warm-up send input_requests[0] before the run and nothing
    # resets the prefix cache (vllm/benchmarks/serve.py benchmark(), 0.32.0 to 0.34.0), but
    # from vLLM 0.14.0 neither is sent unless asked (--ready-check-timeout-sec defaults to 0,
    # --num-warmups to 0): a file with start_times (0.15 and later) is said to be assumed
    # without them, the cache hit only if the run asked
    rec = read_recording(DATASETS / "custom_rate8.json")
    said = [n for n in rec.notes if n.startswith("vllm bench serve sent each run's first prompt")]
    assert len(said) == 1
    assert said[0].startswith("vllm bench serve sent each run's first prompt before the run "
                              "only if told to: from vLLM 0.14.0 its readiness check is off")
    assert "assumed it was not" in said[0]
    assert "if the run passed either, a server with prefix caching on" in said[0]


def test_probes_beside_a_capped_run_say_where_they_went(tmp_path: Path) -> None:
    # up to 0.32 the probes shared the run's connection pool, capped at --max-concurrency; from
    # 0.33.0 (vllm/benchmarks/serve.py probe_loop, make_session(1)) one connection of their own
    doc = json.loads((VLLM / "options" / "probe4_rate8.json").read_text())
    assert doc["max_concurrency"] is None
    open_loop = [n for n in read_recording(VLLM / "options" / "probe4_rate8.json").notes
                 if "--probe-request-rate" in n]
    assert len(open_loop) == 1 and "capped connections" not in open_loop[0]
    doc["max_concurrency"] = 4
    capped = [n for n in read_recording(write(tmp_path, doc)).notes
              if "--probe-request-rate" in n]
    assert len(capped) == 1
    assert "with --max-concurrency 4, vLLM 0.32 and earlier sent them over the run's capped " \
        "connections" in capped[0]


def test_the_role_chunk_is_read_for_vllms_own_client_only(tmp_path: Path) -> None:
    # SGLang's bench_serving (total_output_tokens_retokenized) writes the same lists from its
    # own chat client, which the note's vLLM versions do not describe
    doc = json.loads((DATASETS / "chat_rate8.json").read_text())
    doc["total_output_tokens_retokenized"] = doc["total_output_tokens"]
    rec = read_recording(write(tmp_path, doc))
    assert np.allclose(by_row(rec, "ttft_s"), doc["ttfts"], rtol=1e-12)
    assert not any("opening role chunk" in n for n in rec.notes)


def test_a_032_chat_run_with_merged_chunks_still_drops_the_role_chunk(tmp_path: Path) -> None:
    # under load the server sends several tokens in one chunk: such a request holds fewer itls
    # than output tokens, while the others still show the role chunk's extra one
    doc = json.loads((DATASETS / "chat_rate8.json").read_text())
    row = doc["itls"][2]
    doc["itls"][2] = [row[0], row[1] + row[2], *row[3:]]
    rec = read_recording(write(tmp_path, doc))
    assert math.isclose(by_row(rec, "ttft_s")[2], doc["ttfts"][2] + row[0], rel_tol=1e-12)
    assert sum("opening role chunk" in n for n in rec.notes) == 1


def test_a_033_chat_run_with_a_short_retokenized_count_keeps_its_first_token(
        tmp_path: Path) -> None:
    # a server that sends no usage: the 0.33 client counts output tokens by retokenizing the
    # text (serve.py calculate_metrics), which may come out one short of the chunks streamed
    doc = _as_033(json.loads((DATASETS / "chat_rate8.json").read_text()))
    doc["output_lens"][4] -= 1
    rec = read_recording(write(tmp_path, doc))
    assert np.allclose(by_row(rec, "ttft_s"), doc["ttfts"], rtol=1e-12)
    assert not any("opening role chunk" in n for n in rec.notes)
