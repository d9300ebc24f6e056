"""SGLang's ``python -m sglang.bench_serving`` run here: the files under
``tests/fixtures/recordings/sglang-0.5.9/`` (``scripts/make_recording_fixtures.sh sglang``:
SGLang 0.5.9's client against the CPU vLLM of the live tests, ``--output-file F
--output-details``, one line a run) read as the client ran them, checked against the file's own
lists and against the client's source at 0.5.9 (sglang/bench_serving.py in the PyPI wheel).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.results.recorded_vllm_bench import SGLANG_APPENDED
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

SGLANG = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "sglang-0.5.9"


def lines(name: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (SGLANG / name).read_text().splitlines() if x.strip()]


@pytest.mark.parametrize("name", ["rate8.jsonl", "concurrency4.jsonl"])
def test_a_request_whose_whole_answer_came_in_one_chunk_is_read(name: str) -> None:
    """A streamed request can get all its tokens in one chunk: vLLM merges a request's outputs
    while its API server lags the engine (0.32.0 vllm/v1/engine/output_processor.py
    ``RequestOutputCollector.put``), and SGLang's client appends an inter-token time per later
    chunk only (0.5.9 ``async_request_openai_completions``: ``output.itl.append``). Such a row
    (16 output tokens, ``itls`` empty) refused the whole file as damaged: "row 3: field 'itls':
    no inter-token times for 16 output tokens". It is read, its E2E its TTFT (the file has no
    latencies), and left out of the TTFT and TPOT compared, as every whole answer is."""
    doc = lines(name)[0]
    empty = [i for i, row in enumerate(doc["itls"]) if not row and doc["output_lens"][i] > 1]
    assert empty  # the real run has such requests among streamed ones
    assert len(empty) < len(doc["itls"])
    rec = read_recording(SGLANG / name)
    assert rec.tool == "sglang.bench_serving"
    assert len(rec.measured) == doc["completed"] == 20
    m = rec.measured.sort_values("request_id")
    for i in empty:
        assert m["e2e_s"].iloc[i] == pytest.approx(doc["ttfts"][i])
    said = [n for n in rec.notes if "got the tokens after their first less than 100 us" in n]
    assert len(said) == 1
    assert said[0].startswith(tuple(f"{k} of 20 completed requests" for k in range(len(empty), 21)))


def test_each_run_reads_as_the_client_sent_it() -> None:
    """Rate, cap and lengths as SGLang 0.5.9 ran them: an open loop of Poisson gaps at
    ``--request-rate`` (``get_request``: ``np.random.exponential(1.0 / request_rate)``), all at
    once under ``--max-concurrency`` with the default rate ``inf`` (a closed loop), both
    appended runs capped at 2; ``--random-range-ratio 1.0`` draws every length at its full
    value (``compute_random_lens``: ``randint(max(int(len * ratio), 1), len + 1)``)."""
    rate8 = read_recording(SGLANG / "rate8.jsonl")
    assert [(s.load, s.request_rate, s.max_concurrency) for s in rate8.stages] == [
        ("open", 8.0, None)
    ]
    closed = read_recording(SGLANG / "concurrency4.jsonl")
    assert [(s.load, s.max_concurrency) for s in closed.stages] == [("closed", 4)]
    appended = read_recording(SGLANG / "append.jsonl")
    assert [(s.load, s.request_rate, s.max_concurrency) for s in appended.stages] == [
        ("capped", 8.0, 2)
    ] * 2
    for rec in (rate8, closed, appended):
        assert set(rec.workload.prompt_tokens) == {32}
        assert set(rec.workload.output_tokens) == {16}


def test_a_range_ratio_draws_lengths_between_ratio_and_full() -> None:
    """``--random-range-ratio 0.5`` with 32 and 16: prompts of 16 to 32 tokens, outputs of 8 to
    16 (SGLang draws in ``[len * ratio, len]``, where vLLM's client draws ``len * (1 +- r)``);
    each request simulated with its own lengths from the file."""
    doc = lines("chat_range05_rate8.jsonl")[0]
    assert doc["random_range_ratio"] == 0.5
    assert all(16 <= x <= 32 for x in doc["input_lens"])
    assert all(8 <= x <= 16 for x in doc["output_lens"])
    rec = read_recording(SGLANG / "chat_range05_rate8.jsonl")
    m = rec.measured.sort_values("request_id")
    assert np.array_equal(m["prompt_tokens"], doc["input_lens"])
    assert np.array_equal(m["output_tokens"], doc["output_lens"])


def test_an_sglang_chat_run_says_its_prompts_lack_the_chat_template() -> None:
    """SGLang's chat backends save the client's count of the prompt text (no usage asked for),
    so the server prefilled the chat template's tokens beside it; nothing said so."""
    rec = read_recording(SGLANG / "chat_range05_rate8.jsonl")
    said = [n for n in rec.notes if n.startswith("backend vllm-chat: ")]
    assert len(said) == 1
    assert "SGLang's client's count of the prompt's text" in said[0]
    assert "shorter than the prefilled ones by the template's tokens" in said[0]
    assert not any(
        "backend" in n and "template" in n for n in read_recording(SGLANG / "rate8.jsonl").notes
    )


def test_appended_sglang_runs_are_not_said_to_be_append_result() -> None:
    """SGLang's client appends every run to its --output-file; the note named vLLM's flag
    ``--append-result``, which SGLang's client does not have."""
    rec = read_recording(SGLANG / "append.jsonl")
    said = [n for n in rec.notes if "runs appended to one file" in n]
    assert len(said) == 1
    assert said[0].startswith(f"2 runs appended to one file {SGLANG_APPENDED}: ")
    assert "--append-result" not in " ".join(rec.notes)


def test_a_multi_turn_run_is_refused_naming_what_the_file_lacks() -> None:
    """``--gsp-num-turns 2`` on sglang-oai-chat: 10 conversations of 2 turns, each second turn
    sent with the history when the first was answered (0.5.9
    ``wrap_multi_turn_request_func``). The file saves 20 requests, ``total_input_tokens`` 0
    (``calculate_metrics`` gets no input requests for a multi-turn run) and every turn its
    first turn's prompt length: it was read as 20 independent requests at 8 req/s, the second
    turns sent at times of their own and with their first turn's prompt."""
    doc = lines("gsp_turns2_rate8.jsonl")[0]
    assert doc["completed"] == 20 and doc["total_input_tokens"] == 0
    assert doc["input_lens"][0::2] == doc["input_lens"][1::2]  # each turn its first's length
    with pytest.raises(TraceError) as info:
        read_recording(SGLANG / "gsp_turns2_rate8.jsonl")
    assert info.value.field == "total_input_tokens"
    assert "is an SGLang bench_serving run of multi-turn conversations" in str(info.value)
    assert "record it with one turn (--gsp-num-turns 1)" in str(info.value)
    # one turn: read, its 10 prompts (shared system prompt and question) as the file counts them
    one = read_recording(SGLANG / "gsp_rate8.jsonl")
    assert sorted(one.workload.prompt_tokens) == sorted(lines("gsp_rate8.jsonl")[0]["input_lens"])
    assert any(n.startswith("dataset generated-shared-prefix: ") for n in one.notes)


@pytest.mark.parametrize(("name", "backend"), [
    ("rate8.jsonl", "vllm"), ("chat_range05_rate8.jsonl", "vllm-chat"),
    ("append.jsonl", "sglang-oai")])
def test_output_lens_are_said_to_be_the_lengths_asked(name: str, backend: str) -> None:
    """SGLang 0.5.9's completions and chat backends save as each request's output length the
    ``max_tokens`` they asked for unless the server streamed a usage (``output_len =
    (data.get("usage") or {}).get("completion_tokens", output_len)``), which neither vLLM nor
    SGLang's server does unasked: the CPU vLLM's runs hold 16 for every request of
    ``--random-output-len 16 --random-range-ratio 1.0`` though their retokenized texts count
    fewer. kvbudget called them "its realised output length" and said of ignore_eos only
    that it was not recorded; the client sends it true unless ``--disable-ignore-eos``, and
    with the flag each is an upper bound. Said, and assumed in what trace convert writes."""
    doc = lines(name)[0]
    assert doc["backend"] == backend
    assert "ignore_eos" not in doc and "disable_ignore_eos" not in doc  # not recorded
    rec = read_recording(SGLANG / name)
    eos = [n for n in rec.notes if n.startswith("ignore_eos: ")]
    assert len(eos) == 1
    assert "saves neither it nor --disable-ignore-eos" in eos[0]
    assert "sends ignore_eos true unless run with --disable-ignore-eos" in eos[0]
    assert f"Backend {backend}'s output_lens are the max_tokens the client asked for" in eos[0]
    assert "ASSUMED ignore_eos true" in eos[0] and "each is an upper bound" in eos[0]
    assert not any("realised output length" in n for n in rec.notes)
    assert any(n.startswith(f"max_tokens: each request's output_lens, the max_tokens backend "
                            f"{backend}'s client asked for") for n in rec.notes)
    assumed = rec.workload.meta["assumed"]
    assert isinstance(assumed, tuple)
    assert any(str(a).startswith("ignore_eos true for every request (SGLang's client's "
                                 "default") for a in assumed)


@pytest.mark.parametrize(("backend", "said"), [
    ("sglang", "output_lens are the server's count of the tokens it generated"),
    ("trt", "output_lens are the max_tokens the client asked for, not a count")])
def test_output_lens_said_per_backend(tmp_path: Path, backend: str, said: str) -> None:
    """Hand-made beside the real runs: ``sglang`` (/generate) saves the server's
    ``meta_info.completion_tokens``, what it generated (nothing assumed); ``trt`` always the
    ``max_tokens`` asked (0.5.9 ``async_request_trt_llm``: no usage read)."""
    doc = {**lines("rate8.jsonl")[0], "backend": backend}
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps(doc) + "\n")
    rec = read_recording(path)
    eos = [n for n in rec.notes if n.startswith("ignore_eos: ")]
    assert len(eos) == 1 and said in eos[0]
    assumed = rec.workload.meta["assumed"]
    assert isinstance(assumed, tuple)
    assert any(str(a).startswith("ignore_eos true") for a in assumed) == (backend == "trt")


def test_a_fast_prepared_shared_prefix_run_is_refused(tmp_path: Path) -> None:
    """``--gsp-fast-prepare`` saves 1 as every prompt's length (0.5.9
    ``sample_generated_shared_prefix_requests``: ``prompt_len = 1``): the real one-turn run's
    line with its ``input_lens`` as that flag writes them (hand-made beside it) was read as 10
    one-token prompts. The real run's prompts (a 16-token system prompt and a 16-token question
    each) are read as the file counts them, and its unused ``random_*`` defaults (1024, ratio
    0.0) are read as nothing."""
    doc = lines("gsp_rate8.jsonl")[0]
    assert (doc["random_input_len"], doc["random_range_ratio"]) == (1024, 0.0)  # unused
    real = read_recording(SGLANG / "gsp_rate8.jsonl")
    assert sorted(real.workload.prompt_tokens) == sorted(doc["input_lens"])
    assert sorted(real.workload.output_tokens) == sorted(doc["output_lens"])  # 16, not 1024
    assert "random_input_len" not in real.config and "random_range_ratio" not in real.config
    fast = {**doc, "input_lens": [1] * len(doc["input_lens"]),
            "total_input_tokens": len(doc["input_lens"])}
    path = tmp_path / "gsp_fast.jsonl"
    path.write_text(json.dumps(fast) + "\n")
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert info.value.field == "input_lens"
    assert "--gsp-fast-prepare saves 1 in place of each prompt's length" in str(info.value)
    assert "record it without --gsp-fast-prepare" in str(info.value)


def test_a_shared_prefix_run_says_what_it_shared_and_which_fields_are_unused() -> None:
    """The real one-turn run (2 groups of 5 prompts, ``--gsp-system-prompt-len 16``) saves the
    ``random`` dataset's unused defaults (``random_input_len`` 1024, ``random_range_ratio`` 0.0)
    and none of the ``gsp`` settings (not ``--gsp-range-ratio``, 1.0 by default); the note named
    neither the group count nor that those fields are not this run's. The simulated prefix
    cache sees no shared block (no prefix hashes), as it says."""
    real = read_recording(SGLANG / "gsp_rate8.jsonl")
    said = [n for n in real.notes if n.startswith("dataset generated-shared-prefix: ")]
    assert len(said) == 1
    assert "(--gsp-num-groups groups, 64 by default, each a system prompt of " in said[0]
    assert "random_range_ratio are the random dataset's, unused here" in said[0]
    assert "the simulated requests share no prefix" in said[0]
    assert real.workload.prefix_hashes is None
