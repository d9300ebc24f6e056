"""``vllm bench serve`` (and its predecessor ``benchmarks/benchmark_serving.py``) results.

What the file holds (vLLM 0.32.0, ``vllm/benchmarks/serve.py``, ``benchmark()`` and
``main_async()``): with ``--save-result --save-detailed`` one JSON object per run with the
client's settings (``request_rate``: a number or ``"inf"``; ``burstiness``;
``max_concurrency``: a number or null; ``model_id``, ``tokenizer_id``, ``backend``, ``date``,
``num_prompts`` and any ``--metadata KEY=VALUE``), the run's aggregates (``completed``,
``failed``, ``mean_ttft_ms``, ``mean_itl_ms``, ``output_throughput``, ...) and per request
``input_lens``, ``output_lens``, ``ttfts``, ``itls``, ``errors`` and, in current versions,
``latencies`` and ``start_times`` (older ones have neither: E2E is then ``ttft + sum(itl)``
and arrivals are reconstructed, see :func:`bench_arrivals`; TensorRT-LLM's copy names the
E2E ``e2els``). ``--append-result`` appends each
run's object to the file, a newline between them (``outfile.write("\\n")`` then
``json.dump``): one line per run, read here as one load stage per line, placed on the clock
of their ``start_times`` (:func:`_placed`).

How the client offered the load (``benchmark()``'s ``get_request`` and its semaphore):
``--request-rate inf --max-concurrency C`` is a closed loop of C users (unless its due times
spread: a timed trace's, :func:`_self_timed`); a finite rate with
``--max-concurrency C`` an open loop capped at C in flight; a finite rate alone an open
loop (gamma gaps of shape ``burstiness``); ``inf`` alone sends everything at once.

The result records no ``max_tokens`` and no ``ignore_eos`` (neither is among the keys
``main_async`` writes): each request's ``max_tokens`` is then its realised output length
(``output_lens``: with ``--ignore-eos`` exactly what was asked; without, a lower bound), and
the notes say so. A ``max_tokens`` or ``ignore_eos`` passed as ``--metadata`` is read.
"""

from __future__ import annotations

import heapq
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.results.recorded_fields import (
    MAX_FILE_BYTES,
    MAX_MEASURED_S,
    FloatArray,
    cap_reached,
    dig,
    fewer_rows,
    finish_columns,
    json_lines,
    max_tokens_note,
    number,
    without_shared_times,
)
from kvbudget.results.recorded_idle import closed_loop_idle_note
from kvbudget.results.recorded_refusals import say_context_refusals
from kvbudget.results.recorded_sglang_client import fast_prepare_problem, sglang_outputs_said
from kvbudget.results.recorded_sglang_pd import pd_model_path, pd_view
from kvbudget.results.recorded_sglang_server import sglang_server
from kvbudget.results.recorded_summaries import (
    foreign_backend_note,
    is_sglang,
    is_trtllm,
    summary_refusal,
)
from kvbudget.results.recorded_vllm_bench_client import (
    BENCHMARK_SERVING,
    NO_TEXT_ERROR,
    async_scheduling_note,
    chat_template_note,
    client_backend,
    client_generation,
    dated_before_0_7,
    drawn_ahead,
    first_prompt_note,
    ignore_eos_note,
    refuse_audio,
    refuse_pooling,
    role_chunk,
    scaled_sends,
    server_metrics_note,
    server_times,
    text_chunks_note,
    textless_note,
    v0_engine_note,
)
from kvbudget.results.recorded_vllm_bench_peak import PEAK_KEY, recorded_peak
from kvbudget.results.recorded_vllm_metadata import (
    GATEWAY_KEY,
    gateway_pairs,
    metadata_note,
    object_note,
)
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.results.vllm_releases import client_release_note
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule
from kvbudget.workloads.text_files import read_text

TOOL = "vllm bench serve"
TRTLLM = "tensorrt_llm benchmark_serving"
"""TensorRT-LLM's copy of vLLM's client (tensorrt_llm/serve/scripts/benchmark_serving.py, run
against ``trtllm-serve``) saves the same lists with each request's E2E as ``e2els`` and adds
``user_throughput`` and ``avg_decoded_tokens_per_iter`` (commit 0228a712, ``benchmark()``)."""
SGLANG = "sglang.bench_serving"
"""SGLang's client, derived from vLLM's, writes the same lists with ``--output-file
--output-details`` (one line a run; python/sglang/bench_serving.py ``result_details``) and the
server's ``server_info`` (its ``model_path``) where vLLM writes ``model_id``; its refactored
client (python/sglang/benchmark/metrics.py) writes no model, and nests the lists under
``details`` in later versions (:func:`flat_details`)."""


@dataclass(frozen=True)
class _Run:
    """One result object (one line of an ``--append-result`` file), in file order."""

    prompt: FloatArray
    output: FloatArray
    ttft: FloatArray
    e2e: FloatArray
    itl_mean: FloatArray
    failed: np.ndarray[Any, np.dtype[np.bool_]]
    arrival: FloatArray
    """When the client meant to send each request: what a replay offers."""
    sent: FloatArray
    """When each was sent (``arrival`` plus a capped run's wait for a slot): its TTFT's and
    E2E's origin."""
    stage: RecordedStage
    max_tokens: float
    clock_s: float
    """``arrival`` 0 on the client's clock (``start_times``: ``time.perf_counter()``, one
    monotonic clock for every process of a machine); NaN when reconstructed."""


def _documents(path: Path) -> list[tuple[int | None, dict[str, Any]]]:
    """The result objects: one document, or one per line (``--append-result``)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise TraceError(path, f"cannot be read ({exc})") from None
    if size > MAX_FILE_BYTES:
        raise TraceError(path, f"is over {MAX_FILE_BYTES >> 30} GiB: too large for a recording")
    text = read_text(path, errors="replace")
    try:
        doc = json.loads(text)
        docs: list[tuple[int | None, Any]] = [(None, doc)]
    except (json.JSONDecodeError, RecursionError):
        docs = list(json_lines(path))
    for line, d in docs:
        if not isinstance(d, dict):
            raise TraceError(path, "is not a JSON object (a vllm bench serve result)",
                             line=line)
    return [(line, flat_details(d)) for line, d in docs if isinstance(d, dict)]


def _refuse_repeated_runs(path: Path, docs: list[tuple[int | None, dict[str, Any]]]) -> None:
    """Refuse a line (``--append-result``, SGLang's ``--output-file``) equal to an earlier one
    in every field, its requests' measured times (``ttfts``) too: no two runs time their
    requests alike to the microsecond, so it is one run appended twice (a copy joined to the
    file), which was read as a second run of as many requests."""
    seen: dict[str, int | None] = {}
    for line, doc in docs:
        if not isinstance(doc.get("ttfts"), list) or not doc["ttfts"]:
            continue
        key = json.dumps(doc, sort_keys=True, default=str)
        if key in seen:
            raise TraceError(path, f"repeats line {seen[key]} in every field, its "
                             f"{len(doc['ttfts'])} requests' measured times too: one run "
                             "appended twice (a copy joined to the file?); remove the repeat",
                             line=line)
        seen[key] = line


def flat_details(doc: dict[str, Any]) -> dict[str, Any]:
    """A result with its per-request lists at the top: SGLang's refactored client nests them
    under ``details`` (sgl-project/sglang python/sglang/benchmark/metrics.py ``save_results``
    at 6e48df33: ``result["details"] = {"input_lens": ..., "errors": ...}`` with
    ``--output-details``), where vLLM's and SGLang's older client write them beside the
    summary."""
    details = doc.get("details")
    if "input_lens" in doc or not isinstance(details, dict) or "input_lens" not in details:
        return doc
    return {**{k: v for k, v in doc.items() if k != "details"}, **details}


def _where(line: int | None, key: str, row: int | None = None) -> dict[str, Any]:
    field = key if row is None else f"{key}[{row}]"
    return {"line": line, "field": field} if line is not None else {"row": row, "field": key}


def _numbers(path: Path, doc: Mapping[str, Any], key: str, n: int | None, line: int | None,
             *, required: bool = True) -> FloatArray | None:
    values = doc.get(key)
    if values is None:
        if required:
            aggregate = summary_refusal(doc)  # SGLang's, or vLLM's without --save-detailed
            if aggregate:  # said of the whole file, not of the field it lacks
                raise TraceError(path, aggregate, line=line)
            raise TraceError(path, "missing (run vllm bench serve with --save-detailed)",
                             **_where(line, key))
        return None
    if not isinstance(values, list):
        raise TraceError(path, f"must be a list, got {type(values).__name__}",
                         **_where(line, key))
    if n is not None and len(values) != n:
        raise TraceError(path, f"has {len(values)} entries, input_lens has {n}",
                         **_where(line, key))
    out = np.full(len(values), np.nan)
    for i, v in enumerate(values):
        try:
            out[i] = number(v, path, key, i)
        except TraceError as exc:
            raise TraceError(path, exc.problem, **_where(line, key, i)) from None
    return out


def _itls(path: Path, doc: Mapping[str, Any], line: int | None, output: FloatArray,
          ttft: FloatArray, failed: np.ndarray[Any, np.dtype[np.bool_]], notes: list[str],
          ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """``ttft`` (a chat run's role chunk left out: :func:`role_chunk`) and per request the sum,
    the mean and the number of its inter-token times (NaN: the file has no ``itls``)."""
    n = len(output)
    itls = doc.get("itls")
    itl_sum = np.full(n, np.nan)
    itl_mean = np.full(n, np.nan)
    itl_count = np.full(n, np.nan)
    if itls is None:
        return ttft, itl_sum, itl_mean, itl_count
    if not isinstance(itls, list) or len(itls) != n:
        raise TraceError(path, f"must be a list of {n} lists", **_where(line, "itls"))
    rows: list[list[float]] = []
    for i, row in enumerate(itls):
        if not isinstance(row, list):
            raise TraceError(path, "must be a list of numbers", **_where(line, "itls", i))
        values = []
        for v in row:
            try:
                x = number(v, path, "itls", i)
            except TraceError as exc:
                raise TraceError(path, exc.problem, **_where(line, "itls", i)) from None
            if x < 0:
                raise TraceError(path, f"negative time: {x:g}", **_where(line, "itls", i))
            values.append(x)
        rows.append(values)
    if not (is_sglang(doc) or is_trtllm(doc)):  # vLLM's own client (its 0.32 chat stream)
        ttft = role_chunk(doc, output, ttft, rows, failed, line, notes)
    for i, values in enumerate(rows):
        itl_sum[i] = float(sum(values))
        itl_count[i] = len(values)
        if values:
            itl_mean[i] = itl_sum[i] / len(values)
    return ttft, itl_sum, itl_mean, itl_count


def _streamed(output: FloatArray, ttft: FloatArray, itl_count: FloatArray,
              failed: np.ndarray[Any, np.dtype[np.bool_]], line: int | None,
              notes: list[str]) -> FloatArray:
    """``output``, with each failed request that streamed part of its answer given the tokens
    it streamed: the server generated them. The client sets ``ttft`` at the first chunk that
    carries a choice and appends one inter-token time per later one, and keeps both when the
    stream then breaks (vllm/benchmarks/lib/endpoint_request_func.py at vLLM commit 02cfb53,
    ``async_request_openai_completions``: ``output.ttft``, ``output.itl.append``, the
    ``except`` branch), while ``output_lens`` holds 0 for every failed request
    (vllm/benchmarks/serve.py at commit 009e6d4, ``calculate_metrics``:
    ``actual_output_lens.append(0)``): such a request streamed ``len(itls) + 1`` chunks. From
    0.34.0 a stream that ends with the server's ``error`` chunk fails the same way, its
    ``errors`` entry that error's JSON (``stream_error``); 0.32 and 0.33 saved it as completed
    with the tokens it streamed, which the file cannot tell."""
    with np.errstate(invalid="ignore"):
        streamed = failed & (ttft > 0) & np.isfinite(itl_count) & ~(output > 0)
    if not streamed.any():
        return output
    where = "" if line is None else f"line {line}: "
    notes.append(f"{where}{int(streamed.sum())} failed requests streamed part of their answer "
                 "before failing: each is simulated with the tokens it streamed (len(itls) + 1 "
                 "chunks, one token each unless the server sent several in one; output_lens "
                 "holds 0 for a failed request), as the server generated them; their times are "
                 "not compared")
    return np.where(streamed, itl_count + 1, output)


def _without_output(output: FloatArray, ttft: FloatArray, itl_count: FloatArray,
                    failed: np.ndarray[Any, np.dtype[np.bool_]]
                    ) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """The requests not failed that the file saves with no output: ``output_lens`` 0, ``ttfts``
    0.0 and no inter-token time (an answer without a word, or a failure with an empty error)."""
    with np.errstate(invalid="ignore"):
        out: np.ndarray[Any, np.dtype[np.bool_]] = (
            ~failed & (output == 0) & (ttft == 0) & (itl_count == 0))
    return out


def _silent(output: FloatArray, ttft: FloatArray, itl_count: FloatArray,
            failed: np.ndarray[Any, np.dtype[np.bool_]], line: int | None,
            notes: list[str]) -> tuple[FloatArray, FloatArray]:
    """``output`` and ``ttft`` with each request that completed without a word given one
    output token and no TTFT. The client sets ``ttft`` at the first chunk that carries text and
    counts the output by retokenizing the text where the server sends no usage
    (``calculate_metrics``: ``len(tokenizer(generated_text).input_ids)``), so a request whose
    model ended at once (its end-of-sequence token, which detokenizes to nothing) is saved as
    completed with ``output_lens`` 0 and ``ttfts`` 0.0 (LambdaLabsML/vllm-benchmark's published
    Llama-3.1-8B run: 3 of 10, 77 % of its prompt tokens): the server prefilled its prompt and
    generated that token, so it is simulated with 1, its times not measured."""
    silent = _without_output(output, ttft, itl_count, failed)
    if not silent.any():
        return output, ttft
    where = "" if line is None else f"line {line}: "
    notes.append(f"{where}{int(silent.sum())} requests completed without a word (output_lens "
                 "0, no first token: the model ended at once, and the client counts tokens by "
                 "retokenizing the text): each is simulated with 1 output token, its prompt "
                 "prefilled as the server did, and left out of the measured statistics (no "
                 "TTFT)")
    return np.where(silent, 1.0, output), np.where(silent, np.nan, ttft)


def _textless(doc: Mapping[str, Any], errors: list[Any], measured: tuple[FloatArray, FloatArray],
              failed: np.ndarray[Any, np.dtype[np.bool_]], line: int | None, notes: list[str]
              ) -> tuple[FloatArray, FloatArray, np.ndarray[Any, np.dtype[np.bool_]]]:
    """``output`` and ``ttft`` of ``measured``, with each request of a vLLM
    benchmarks/benchmark_serving.py file (:func:`client_generation`) saved as failed with
    :data:`NO_TEXT_ERROR` given 1 output token (``output_lens`` holds 0 for a failed request,
    ``calculate_metrics``: ``actual_output_lens.append(0)``) and no TTFT, and the mask of them:
    the script before vLLM 0.7.0 writes that error for a request the server answered with
    empty text, which the server prefilled and decoded as :func:`_silent`'s answers without a
    word, where the file is dated before 0.7.0 (a later or undated one keeps them failed:
    :func:`textless_note` says both). SGLang's and TensorRT-LLM's
    copies, and ``vllm bench serve`` (0.8.5 on: a stream without a choice), are left failed."""
    output, ttft = measured
    textless = failed & ~(ttft > 0) & np.array(
        [isinstance(e, str) and e.startswith(NO_TEXT_ERROR) for e in errors], dtype=bool)
    if client_generation(doc) != BENCHMARK_SERVING or is_sglang(doc) or is_trtllm(doc) or \
            not textless.any():
        return output, ttft, np.zeros_like(failed)
    notes.append(textless_note(doc, int(textless.sum()), "" if line is None else f"line {line}: "))
    if not dated_before_0_7(doc):  # a later script's: the error is a failure (said)
        return output, ttft, np.zeros_like(failed)
    return (np.where(textless, np.fmax(output, 1.0), output), np.where(textless, np.nan, ttft),
            textless)


def _refuse_fewer_rows(path: Path, doc: Mapping[str, Any], line: int | None, n: int) -> None:
    """Refuse a file whose per-request lists hold fewer requests than its own counts. Every
    list is written from the same ``outputs`` (one entry a request sent, failed or not) beside
    ``completed``, the successes among them, and in the 0.3x releases ``failed``, the rest
    (vLLM 0.32.0 vllm/benchmarks/serve.py:677-678 and :1281-1290; 0.6.6.post1
    benchmarks/benchmark_serving.py:458, :682-690; SGLang 0.5.9 python/sglang/bench_serving.py
    :2142, :2686, :2742): a copy with the same request cut from every list otherwise reads as a
    smaller run. Where ``failed`` is not written (0.10.2 and before, SGLang), the requests with
    an error stand for it: the clients write one only on a failure (0.6.6.post1
    benchmarks/backend_request_func.py:296-300), so a cut failure with an empty one is not
    seen, and nothing else in the file tells it: every list loses the same element; a failure
    adds to no total (``total_input`` sums the successes' prompts, 0.10.2
    vllm/benchmarks/serve.py:284-308); and ``num_prompts`` is not compared, as no rule makes it
    exact for these files: they name no dataset (0.10.2 serve.py:1176-1203 writes
    ``num_prompts`` and the load's settings, not ``--dataset-name``), and datasets may give
    fewer prompts than asked (0.6.6's ShareGPT sampler stops where the dataset runs out,
    benchmark_serving.py:109-111; 0.10.2's ``--no-oversample``, unrecorded, leaves ShareGPT,
    custom and the Hugging Face datasets short, vllm/benchmarks/datasets.py:241-244 and
    :1015-1018), though random and sonnet give exactly ``num_prompts`` (0.8.5
    benchmarks/benchmark_dataset.py:342, :493)."""
    completed, failed = doc.get("completed"), doc.get("failed")
    if not isinstance(completed, int) or isinstance(completed, bool):
        return
    errors = doc.get("errors")
    listed = sum(1 for e in errors if e) if isinstance(errors, list) else 0
    said = "failed"
    if not isinstance(failed, int) or isinstance(failed, bool) or failed < 0:
        failed, said = listed, "with an error"
    if completed + failed > n:
        where = "" if line is None else f" on line {line}"
        trimmed = (f"completed{where} is set to {n - listed}"
                   + (f" and failed to {listed} (its requests without and with an error)"
                      if said == "failed" else " (its requests without an error)"))
        raise TraceError(path, fewer_rows(f"the lists hold {n} requests, but the file's own "
                                          f"counts say {completed + failed} were sent "
                                          f"(completed {completed}, {failed} {said})", trimmed),
                         **_where(line, "input_lens"))


def _reasonless_failures(path: Path, doc: Mapping[str, Any], line: int | None,
                         measured: tuple[FloatArray, FloatArray, FloatArray],
                         failed: np.ndarray[Any, np.dtype[np.bool_]],
                         notes: list[str]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """``failed`` with the requests that failed with an empty error. The client saves a failed
    HTTP answer's error as its reason phrase, ``""`` where the server sent none (0.32.0
    vllm/benchmarks/lib/endpoint_request_func.py ``output.error = response.reason or ""``;
    SGLang's bench_serving the same), beside ``output_lens`` 0, ``ttfts`` 0.0 and no
    inter-token time: as a request that completed without a word (:func:`_silent`). The run's
    ``completed`` (its successes, ``calculate_metrics``) tells how many there are: where as
    many requests have no output as that count leaves unexplained, they are those; where some
    but not as many, which failed cannot be told, and the file is refused rather than read
    with failures as completions; where none, the count disagrees for another reason (said)."""
    completed, n = doc.get("completed"), len(failed)
    if not isinstance(completed, int) or isinstance(completed, bool) or not 0 <= completed <= n:
        return failed
    unexplained = n - completed - int(failed.sum())
    if unexplained <= 0:
        return failed
    silent = _without_output(*measured, failed)
    where = "" if line is None else f"line {line}: "
    if not silent.any():  # none can be such a failure: the counts disagree for another reason
        notes.append(f"{where}completed is {completed} of {n} requests, but {n - int(failed.sum())} "
                     "have no error and every one of them an answer: read as the lists give "
                     "them, not as the count")
        return failed
    if int(silent.sum()) != unexplained:
        raise TraceError(path, f"completed is {completed} of {n} requests, {int(failed.sum())} "
                         f"with an error, so {unexplained} failed with an empty one (the "
                         "client saves a failed HTTP answer's reason phrase, empty where the "
                         f"server sent none), but {int(silent.sum())} requests have no output: "
                         "which failed cannot be told", **_where(line, "errors"))
    notes.append(f"{where}{unexplained} requests with an empty error and no output failed "
                 f"(completed is {completed} of {n}: the client saves a failed HTTP answer's "
                 "reason phrase as its error, empty where the server sent none): read as "
                 "failed, not as answers without a word")
    out: np.ndarray[Any, np.dtype[np.bool_]] = failed | silent
    return out


def _refuse_unstreamed(path: Path, output: FloatArray, itl_count: FloatArray,
                      failed: np.ndarray[Any, np.dtype[np.bool_]], line: int | None) -> None:
    """A run that did not stream: no completed request of several tokens has an inter-token
    time. The client appends one per streamed chunk after the first
    (vllm/benchmarks/lib/endpoint_request_func.py, ``output.itl.append``), and a chunk may
    carry several tokens: vLLM merges a request's outputs while its API server lags the engine
    (0.32.0 vllm/v1/engine/output_processor.py ``RequestOutputCollector.put``), so one such
    request among streamed ones got its whole answer in one chunk (SGLang 0.5.9's
    bench_serving against the CPU vLLM: 2 of 20 at 8 req/s), which build_recording finds and
    leaves out of the TTFT and TPOT it compares (recorded_whole_answer.py)."""
    empty = ~failed & (itl_count == 0) & (output > 1)
    several = ~failed & (output > 1)
    if not (empty.any() and empty.sum() == several.sum() and several.sum() > 1):
        return
    i = int(np.argmax(empty))
    raise TraceError(path, f"no inter-token times for {int(output[i])} output tokens: none of "
                     f"the {int(several.sum())} completed requests of several tokens has one, "
                     "a run that did not stream (SGLang's bench_serving --disable-stream: the "
                     "whole answer in one chunk, its time saved as the TTFT); kvbudget "
                     "compares streamed TTFT, TPOT and E2E: record a streamed run",
                     **_where(line, "itls", i))


def _check_times(path: Path, line: int | None, key: str, values: FloatArray) -> None:
    """Present times must be >= 0 and at most a day (NaN: not measured)."""
    with np.errstate(invalid="ignore"):
        bad = np.isfinite(values) & ((values < 0) | (values > MAX_MEASURED_S))
    if bad.any():
        i = int(np.argmax(bad))
        problem = (f"negative time: {values[i]:g}" if values[i] < 0 else
                   f"implausibly long: {values[i]:g} s (over a day; are the times in seconds?)")
        raise TraceError(path, problem, **_where(line, key, i))


def load_mode(path: Path, doc: Mapping[str, Any], label: str, line: int | None) -> RecordedStage:
    """The stage as the client ran it, from ``request_rate`` and ``max_concurrency``."""
    rate_raw = doc.get("request_rate", "inf")
    if rate_raw in ("inf", "Infinity", None):
        rate = math.inf
    elif isinstance(rate_raw, int | float) and not isinstance(rate_raw, bool):
        rate = float(rate_raw)
    else:
        raise TraceError(path, f"not a rate: {rate_raw!r}", **_where(line, "request_rate"))
    if math.isnan(rate) or rate <= 0:
        raise TraceError(path, f"must be a positive rate or \"inf\", got {rate_raw!r}",
                         **_where(line, "request_rate"))
    conc_raw = doc.get("max_concurrency")
    conc: int | None = None
    if conc_raw is not None:
        if (isinstance(conc_raw, bool) or not isinstance(conc_raw, int | float)
                or not float(conc_raw).is_integer() or conc_raw < 1):
            raise TraceError(path, f"must be a whole number >= 1, got {conc_raw!r}",
                             **_where(line, "max_concurrency"))
        conc = int(conc_raw)
    burst = doc.get("burstiness")
    if burst is not None and (isinstance(burst, bool) or not isinstance(burst, int | float)
                              or math.isnan(burst) or burst <= 0):
        # vLLM's client asserts burstiness > 0, the gamma shape of its gaps (vllm/benchmarks/
        # serve.py and benchmarks/benchmark_serving.py get_request); inf is its own case
        # (constant gaps from 0.11.1, every send at once before: recorded_vllm_bench_client)
        raise TraceError(path, f"must be a positive number or inf (the shape of the gaps "
                         f"between sends; 1: Poisson), got {burst!r}"[:160],
                         **_where(line, "burstiness"))
    ramp = _ramp(path, doc, line)
    if ramp:  # its request_rate is "inf" (vLLM refuses a rate beside a ramp)
        return RecordedStage(ramp if conc is None else f"{ramp}, concurrency {conc}",
                             "open" if conc is None else "capped", None, conc)
    if conc is not None and math.isinf(rate):
        return RecordedStage(label, "closed", None, conc)
    if conc is not None:
        return RecordedStage(label, "capped", rate, conc)
    return RecordedStage(label, "open", rate, None)


def _ramp(path: Path, doc: Mapping[str, Any], line: int | None) -> str:
    """A ramp-up run's stage label (``--ramp-up-strategy linear|exponential
    --ramp-up-start-rps A --ramp-up-end-rps B``: the rate goes from A to B over the requests,
    vllm/benchmarks/serve.py ``_get_current_request_rate``), "" for a run without one."""
    strategy = doc.get("ramp_up_strategy")
    if strategy is None:
        return ""
    rates = [doc.get("ramp_up_start_rps"), doc.get("ramp_up_end_rps")]
    if strategy not in ("linear", "exponential") or not all(
            isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r)
            and r >= 0 for r in rates):
        raise TraceError(path, f"a ramp-up of {str(strategy)[:40]!r} from "
                         f"{str(rates[0])[:20]} to {str(rates[1])[:20]} req/s is not one vllm "
                         "bench serve runs (linear or exponential, rates >= 0)",
                         **_where(line, "ramp_up_strategy"))
    return f"ramp-up {strategy} {rates[0]:g} to {rates[1]:g} req/s"


def _label(stage: RecordedStage) -> str:
    if stage.label:
        return stage.label
    if stage.load == "closed":
        return f"concurrency {stage.max_concurrency}"
    rate = "inf" if stage.request_rate is None or math.isinf(stage.request_rate) else \
        f"{stage.request_rate:g}"
    text = f"{rate} req/s"
    return text if stage.load == "open" else f"{text}, concurrency {stage.max_concurrency}"


def bench_arrivals(doc: Mapping[str, Any], latencies: FloatArray, n: int, seed: int,
                   notes: list[str]) -> tuple[FloatArray, FloatArray]:
    """When each request was due and when it was sent, for a ``vllm bench serve`` result
    without ``start_times``.

    vLLM's client draws the gaps between requests from a gamma distribution of mean
    ``1 / request_rate`` and shape ``burstiness`` (Poisson at 1), and sends everything at once
    for ``request_rate = inf``; with ``max_concurrency`` a request also waits until one of the
    ``max_concurrency`` requests before it finishes (its latency, known here, tells when). The
    draws themselves are not in the file: they are drawn again from ``seed``. A capped run is
    replayed from the due times (the sends came after the recorded server's slots freed).
    """
    rate = doc.get("request_rate", "inf")
    rate_f = math.inf if rate in ("inf", None) else float(rate)
    conc = doc.get("max_concurrency")
    intended = np.zeros(n)
    ramp = ramp_rates(doc, n)
    if ramp is not None:
        ahead, why = drawn_ahead(doc)
        gaps, drawn = _gaps(doc, ramp, seed)
        gaps[0] = gaps[0] if ahead else 0.0
        intended = np.cumsum(gaps)
        first = (f"the first due after its own gap ({why})" if ahead else
                 f"the first at once ({why})")
        notes.append(f"no start_times in the file: arrivals redrawn along its ramp-up "
                     f"{doc['ramp_up_strategy']} from {ramp[0]:g} to {ramp[-1]:g} req/s (request "
                     f"i's gap at the rate vLLM's client gives it, i/{max(n - 1, 1)} of the way; "
                     f"{drawn}; {first}); the real draws differ")
    elif math.isfinite(rate_f) and rate_f > 0:
        intended = _fixed_rate_sends(doc, latencies, n, seed, notes)
    if isinstance(conc, int) and conc > 0 and n > conc:
        lat = np.where(np.isfinite(latencies), latencies, 0.0)
        start = np.zeros(n)
        free: list[float] = []
        for i in range(n):
            t = float(intended[i])
            if len(free) >= conc:
                t = max(t, heapq.heappop(free))
            start[i] = t
            heapq.heappush(free, t + float(lat[i]))
        notes.append(f"no start_times in the file: a request starts when one of the "
                     f"max_concurrency={conc} before it finishes (from the measured latencies)")
        return intended, start
    if not math.isfinite(rate_f) and ramp is None:
        notes.append("no start_times in the file and request_rate inf: every request arrives "
                     "at 0")
    return intended, intended


def _fixed_rate_sends(doc: Mapping[str, Any], latencies: FloatArray, n: int, seed: int,
                      notes: list[str]) -> FloatArray:
    """The due times of a fixed-rate run without ``start_times``, drawn again as its client
    drew them (:func:`scaled_sends` tells which): n gaps of mean ``1 / request_rate``
    (:func:`_gaps`); vLLM 0.10.0 and later sleep each request's cumulative draw, scaled so the
    last is due at ``n / request_rate`` after the run's start (``get_request``:
    ``normalize_factor``), the first at its own draw; before, and in SGLang's and TensorRT-LLM's
    copies (:data:`COPIES_UNSCALED`), the first is sent at once and each next after one gap."""
    rate = float(doc["request_rate"])
    gaps, drawn = _gaps(doc, np.full(n, rate), seed)
    copy = SGLANG if is_sglang(doc) else TRTLLM if is_trtllm(doc) else None
    scaled, why = (False, COPIES_UNSCALED[copy]) if copy else scaled_sends(doc, latencies)
    if scaled and gaps.sum() > 0:
        notes.append(f"no start_times in the file: arrivals redrawn at {rate:g} req/s ({drawn}), "
                     f"scaled so the last is due at {n / rate:.4g} s ({why}); the real draws "
                     "differ")
        return np.cumsum(gaps) * (n / rate) / float(gaps.sum())
    gaps[0] = 0.0
    notes.append(f"no start_times in the file: arrivals redrawn at {rate:g} req/s ({drawn}; "
                 f"{why}); the real draws differ")
    return np.cumsum(gaps)


COPIES_UNSCALED = {
    SGLANG: "SGLang's bench_serving sends the first request at once and each next after an "
            "exponential gap, never scaled to n / rate: get_request of python/sglang/"
            "bench_serving.py (0.5.9, run here) and python/sglang/benchmark/serving.py, "
            "BenchmarkRunner's request generator of python/sglang/benchmark/runner.py",
    TRTLLM: "TensorRT-LLM's copy sends the first request at once and each next after a gamma "
            "gap, never scaled to n / rate: get_request of tensorrt_llm/serve/scripts/"
            "benchmark_serving.py (commits 0228a712, f61d71d9; adopted from vLLM's script at "
            "200bbf92)",
}
"""Why SGLang's and TensorRT-LLM's copies of vLLM's client are redrawn unscaled, whatever
their version: neither took vLLM PR #21108's ``get_request`` (:data:`SCALED_FROM`)."""


def _gaps(doc: Mapping[str, Any], rates: FloatArray, seed: int) -> tuple[FloatArray, str]:
    """Each request's gap at its rate (``rates``), drawn again as vLLM's client draws it, and
    how, said: gamma of shape ``burstiness`` and mean ``1 / rate`` (SGLang's exponential gaps
    are shape 1, its default); ``burstiness`` inf is the constant ``1 / rate`` from vLLM
    0.11.1 (``get_request``: "the delay time becomes constant"), while earlier clients'
    ``np.random.gamma`` gave NaN for it and they slept none (``asyncio.sleep(nan)`` returns at
    once; 0.10's ``if delay_ts[i] > 0`` is false): every request sent at once."""
    burst = float(doc.get("burstiness") or 1.0)
    if math.isinf(burst) and client_generation(doc) == "0.11.1+":
        return 1.0 / rates, "burstiness inf: constant gaps of 1 / rate, vLLM 0.11.1 and later"
    if math.isinf(burst):
        return np.zeros(len(rates)), ("burstiness inf, which a client before vLLM 0.11.1 drew "
                                      "as NaN gaps and slept none of: every request at once")
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    return (rng.gamma(shape=burst, scale=1.0 / (rates * burst)),
            f"gamma gaps, burstiness {burst:g}, seed {seed}")


def ramp_rates(doc: Mapping[str, Any], n: int) -> FloatArray | None:
    """Each request's rate on a ramp-up run (None: no ramp), as vLLM's client sets it before
    drawing the request's gap: ``_get_current_request_rate`` (vllm/benchmarks/serve.py, 0.9.2
    to 0.32.0), ``progress = i / max(n - 1, 1)``, ``start + (end - start) * progress`` (linear)
    or ``start * (end / start) ** progress`` (exponential); with no normalisation of the sum,
    which ``get_request`` does for a fixed rate only. The file's fields were checked by
    :func:`_ramp`."""
    strategy = doc.get("ramp_up_strategy")
    if strategy is None:
        return None
    start, end = float(doc["ramp_up_start_rps"]), float(doc["ramp_up_end_rps"])
    progress = np.arange(n) / max(n - 1, 1)
    if strategy == "linear":
        return start + (end - start) * progress
    if start <= 0:  # vLLM refuses an exponential ramp from 0
        return np.zeros(n)
    return start * (end / start) ** progress


def _recorded_max_tokens(path: Path, doc: Mapping[str, Any], line: int | None) -> float:
    """A ``max_tokens`` (or ``max_output_len``) given with ``--metadata``, else NaN."""
    for key in ("max_tokens", "max_output_len", "max_output_tokens"):
        value = doc.get(key)
        if value is None:
            continue
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise TraceError(path, f"not a number: {value!r}", **_where(line, key)) from None
        if not (math.isfinite(x) and x >= 1 and x.is_integer()):
            raise TraceError(path, f"must be a whole number >= 1, got {value!r}",
                             **_where(line, key))
        return x
    return math.nan


def _refuse_trace_sends(path: Path, doc: Mapping[str, Any], line: int | None) -> None:
    """An SGLang run that sent each request at a Mooncake trace's timestamp, which its file
    does not record. ``bench_serving --dataset-name mooncake`` with the ``sglang`` backend
    replays the trace on its own clock, "ignoring --request-rate" (its ``benchmark()``; the
    file still saves the ``request_rate`` given, ``inf`` by default), and ``--use-trace-
    timestamps`` saves ``request_rate`` as ``"trace"`` (sgl-project/sglang
    python/sglang/benchmark/metrics.py ``save_results``, commit 1291c7fc). Each session waits
    for its timestamp times ``--mooncake-slowdown-factor`` and sends its
    ``--mooncake-num-rounds`` rounds at once (python/sglang/benchmark/datasets/mooncake.py
    ``get_mooncake_request_over_time``, commit 17481b4e); neither the times nor the factor
    are saved, so read as all at once (rate ``inf``) its load would be another one."""
    rate = doc.get("request_rate")
    mooncake = is_sglang(doc) and doc.get("dataset_name") == "mooncake" and \
        doc.get("backend") == "sglang"
    if rate != "trace" and not mooncake:
        return
    raise TraceError(path, "is an SGLang bench_serving run that sent each request at its "
                     "Mooncake trace's timestamp (--dataset-name mooncake with the sglang "
                     "backend, or --use-trace-timestamps: request_rate is ignored), times "
                     "--mooncake-slowdown-factor, each session's rounds at once; the file "
                     "records neither the send times nor the factor, so its load cannot be "
                     "replayed from it: simulate the trace itself (kvbudget simulate --trace "
                     "TRACE.jsonl, --rate-scale 1/FACTOR)",
                     **_where(line, "request_rate" if rate == "trace" else "dataset_name"))


def _refuse_multi_turn(path: Path, doc: Mapping[str, Any], line: int | None) -> None:
    """An SGLang run of conversations (``--dataset-name generated-shared-prefix --gsp-num-turns
    N``, N > 1, on a chat backend): each conversation arrives at the run's rate and sends its
    next turn, the history included, when the one before it is answered (0.5.9
    sglang/bench_serving.py ``wrap_multi_turn_request_func``), one output a turn. The file
    saves neither N nor which turns were one conversation's, and no ``total_input_tokens``:
    ``calculate_metrics`` is given no input requests for it (``input_requests=None if
    is_multi_turn``: 0 with every turn completed; the same in 0.5.23
    sglang/benchmark/serving.py), while 0.5.9's ``input_lens`` give every turn its first
    turn's prompt length. Read as independent requests at the rate, each later turn was sent
    at a time of its own (SGLang 0.5.9 against the CPU vLLM: 10 conversations of 2 turns at 8
    req/s read as 20 requests at 8 req/s)."""
    total = doc.get("total_input_tokens")
    completed = doc.get("completed")
    lens = doc.get("input_lens")
    if not (is_sglang(doc) and total == 0 and isinstance(completed, int) and completed > 0
            and isinstance(lens, list) and any(isinstance(x, int | float) and x > 0
                                               for x in lens)):
        return
    raise TraceError(path, "is an SGLang bench_serving run of multi-turn conversations "
                     "(--gsp-num-turns over 1: total_input_tokens 0 beside prompts of "
                     "tokens, as its client saves such a run): each conversation's next turn "
                     "was sent with its history when the one before it was answered, and the "
                     "file records neither the number of turns nor which requests were one "
                     "conversation's, so its sends and later turns' prompts cannot be replayed "
                     "from it; record it with one turn (--gsp-num-turns 1)",
                     **_where(line, "total_input_tokens"))


def _run(path: Path, doc: Mapping[str, Any], line: int | None, seed: int,
         notes: list[str]) -> _Run:
    _refuse_trace_sends(path, doc, line)
    _refuse_multi_turn(path, doc, line)
    fast = fast_prepare_problem(doc) if is_sglang(doc) else None
    if fast:
        raise TraceError(path, fast, **_where(line, "input_lens"))
    refuse_pooling(path, doc, line)
    refuse_audio(path, doc, line)
    prompt = _numbers(path, doc, "input_lens", None, line)
    assert prompt is not None
    n = len(prompt)
    _refuse_fewer_rows(path, doc, line, n)
    output = _numbers(path, doc, "output_lens", n, line)
    ttft = _numbers(path, doc, "ttfts", n, line)
    assert output is not None and ttft is not None
    e2e_key = "e2els" if "latencies" not in doc and "e2els" in doc else "latencies"
    latencies = _numbers(path, doc, e2e_key, n, line, required=False)
    starts = _numbers(path, doc, "start_times", n, line, required=False)
    errors = doc.get("errors") or [""] * n
    if not isinstance(errors, list) or len(errors) != n:
        raise TraceError(path, f"must be a list of {n} strings", **_where(line, "errors"))
    failed = np.array([bool(e) for e in errors], dtype=bool)
    ttft, itl_sum, itl_mean, itl_count = _itls(path, doc, line, output, ttft, failed, notes)
    output = _streamed(output, ttft, itl_count, failed, line, notes)
    failed = _reasonless_failures(path, doc, line, (output, ttft, itl_count), failed, notes)
    output, ttft = _silent(output, ttft, itl_count, failed, line, notes)
    output, ttft, textless = _textless(doc, errors, (output, ttft), failed, line, notes)
    failed = failed & ~textless
    _refuse_unstreamed(path, output, itl_count, failed, line)
    where = "" if line is None else f"line {line}: "
    if latencies is None:
        notes.append(f"{where}no latencies in the file: E2E = TTFT + the sum of the "
                     "inter-token times")
    e2e = np.where(textless, np.nan, latencies if latencies is not None else ttft + itl_sum)
    _check_times(path, line, "ttfts", np.where(failed, np.nan, ttft))
    _check_times(path, line, e2e_key, np.where(failed, np.nan, e2e))
    if starts is not None:
        _check_times(path, line, "start_times", starts - np.nanmin(starts)
                     if np.isfinite(starts).any() else starts)
    bad = ~failed & np.isfinite(ttft) & np.isfinite(e2e) & (e2e < ttft - 1e-9)
    if bad.any():
        i = int(np.argmax(bad))
        raise TraceError(path, f"the request ends ({e2e[i]:g} s) before its first token "
                         f"({ttft[i]:g} s)", **_where(line, e2e_key, i))
    stage = load_mode(path, doc, "", line)
    clock_s = math.nan
    if starts is not None and np.isfinite(starts).all():
        sent = starts - float(starts.min())
        stage = _self_timed(path, doc, line, stage, sent, e2e, notes)
        notes.extend(_idle_note(stage, sent, np.where(failed, np.nan, e2e), where))
        arrival = _offered(path, doc, line, stage, sent, sent + np.where(failed, np.nan, e2e),
                           notes)
        clock_s = float(starts.min()) + float(arrival.min())
        sent = sent - float(arrival.min())
        arrival = arrival - float(arrival.min())
    else:
        ramp = ramp_rates(doc, n)
        if ramp is not None and not (ramp > 0).all():  # vLLM's client divides by the rate
            raise TraceError(path, f"a {stage.label} run has a request at rate 0, which vllm "
                             "bench serve cannot send (its gap is 1 / rate)",
                             **_where(line, "ramp_up_start_rps"))
        if starts is not None:
            notes.append(f"{where}start_times has gaps: arrivals reconstructed")
        sub: list[str] = []
        due, sent = bench_arrivals(doc, e2e, n, seed, sub)
        arrival = due if stage.load == "capped" else sent
        notes.extend(where + s for s in sub)
        window = _window_note(doc, sent, np.where(failed, np.nan, e2e), output, where)
        notes.extend([window] if window else [])
    return _Run(prompt=prompt, output=np.where(failed & ~np.isfinite(output), 0, output),
                ttft=np.where(failed, np.nan, ttft), e2e=np.where(failed, np.nan, e2e),
                itl_mean=itl_mean, failed=failed, arrival=arrival, sent=sent, stage=stage,
                max_tokens=_recorded_max_tokens(path, doc, line), clock_s=clock_s)


def _idle_note(stage: RecordedStage, sent: FloatArray, e2e: FloatArray,
               where: str) -> list[str]:
    """The note of a closed stage's users idle between a request's end and their next send
    (``sent`` the ``start_times``, stamped as each request is sent: vLLM 0.32.0
    vllm/benchmarks/lib/endpoint_request_func.py, ``st = time.perf_counter()`` before the
    POST; it ends ``e2e`` later, NaN for a failed one)."""
    if stage.load != "closed" or not stage.max_concurrency:
        return []
    note = closed_loop_idle_note(_label(stage), stage.max_concurrency, sent, sent + e2e)
    return [] if note is None else [where + note]


WINDOW_SAID = 0.01
"""How far (a fraction) the redrawn sends may stretch or shrink the run's span from the file's
``duration`` before a note says so."""


def _window_note(doc: Mapping[str, Any], sent: FloatArray, e2e: FloatArray,
                 output: FloatArray, where: str) -> str | None:
    """The file's own ``duration`` (vLLM's client: its start to last answer, the denominator
    of its ``output_throughput``) beside the span the redrawn sends give its requests, when they
    differ: the measured output tokens/s a comparison reads is over the latter. DeepSeek-R1's
    results of github.com/simon-mo/R1-Benchmark (vLLM 0.8.4, no ``start_times``) span 1 to 7 %
    longer over the seed-0 draws than their recorded ``duration``, every measured throughput
    that much lower than the file's, unsaid."""
    duration = doc.get("duration")
    done = np.isfinite(e2e)
    if not isinstance(duration, int | float) or isinstance(duration, bool) or \
            not math.isfinite(duration) or duration <= 0 or not done.any():
        return None
    # from the run's start: vLLM 0.10's client sleeps its first (scaled) draw before the first
    # send, inside its duration (the redrawn sends start at 0 otherwise)
    span = float(np.max(sent[done] + e2e[done]) - min(float(np.min(sent)), 0.0))
    tokens = float(np.sum(output[done]))
    if span <= 0 or abs(span / duration - 1.0) <= WINDOW_SAID:
        return None
    return (f"{where}the file's duration is {duration:.4g} s ({tokens / duration:.4g} output "
            f"tokens/s over it); over the redrawn sends its requests span {span:.4g} s, so the "
            f"measured output tokens/s compared here, {tokens / span:.4g}, is "
            f"{100 * (duration / span - 1):+.1f}% off the file's (the sends' draws, not the "
            "server)")


SELF_TIMED_SPREAD = 0.05
"""A run recorded at ``request_rate`` ``inf`` whose due times (``start_times`` less
``queue_times``) spread over more than this share of the run (and over 10 ms) was sent at its
trace's timestamps, not all at once (:func:`_self_timed`)."""


def _self_timed(path: Path, doc: Mapping[str, Any], line: int | None, stage: RecordedStage,
                sent: FloatArray, e2e: FloatArray, notes: list[str]) -> RecordedStage:
    """A closed-looking stage (``request_rate`` ``inf`` with ``max_concurrency`` C) that was
    an open loop at a trace's timestamps capped at C. ``vllm bench serve --dataset-name
    timed_trace`` sends each request at its trace timestamp (``--self-timed``, its default
    there), ignoring ``--request-rate`` (vLLM 0.32.0 ``vllm/benchmarks/serve.py``:
    ``get_request``, lines 453-507, the ``self_timed`` branch; ``main_async``, lines 2141-2153,
    the default), each then waiting for one of the ``--max-concurrency`` slots
    (``limited_request_func``, lines 976-984); the result saves neither the dataset nor
    ``self_timed`` (lines 2277-2281 write ``request_rate`` "inf" and ``max_concurrency``), so
    read as a closed loop of C users it was replayed with no gaps the trace had. Without
    ``--max-concurrency`` the stage read "inf req/s, all at once", its requests sent over the
    trace's span: an open loop at them. The due times tell: at rate ``inf`` every request is
    due at once (``request_arrival_time``, taken as the generator yields, line 1071), at a
    trace's timestamps they spread."""
    everything = stage.load == "open" and stage.request_rate == math.inf
    if not (stage.load == "closed" or everything) or len(sent) < 2:
        return stage
    queue = _numbers(path, doc, "queue_times", len(sent), line, required=False)
    if queue is None or not np.isfinite(queue).all():
        return stage
    due = sent - queue
    spread = float(due.max() - due.min())
    span = float(np.nanmax(sent + np.where(np.isfinite(e2e), e2e, 0.0)) - sent.min())
    if not (spread > 0.01 and spread > SELF_TIMED_SPREAD * span):
        return stage
    if everything:
        notes.append(f"{'' if line is None else f'line {line}: '}request_rate inf, but the "
                     f"requests were due over {spread:.3g} s, not all at once: a timed trace's "
                     "timestamps (--dataset-name timed_trace, self-timed), replayed as an open "
                     "loop at them")
        return RecordedStage("timed trace", "open", None, None)
    notes.append(f"{'' if line is None else f'line {line}: '}request_rate inf with "
                 f"max_concurrency={stage.max_concurrency}, but the requests were due over "
                 f"{spread:.3g} s (start_times less queue_times), not all at once: a timed "
                 "trace's timestamps (--dataset-name timed_trace, self-timed), replayed as "
                 f"an open loop at them capped at {stage.max_concurrency} in flight, not as a "
                 "closed loop")
    return RecordedStage(f"timed trace, concurrency {stage.max_concurrency}", "capped", None,
                         stage.max_concurrency)


def _offered(path: Path, doc: Mapping[str, Any], line: int | None, stage: RecordedStage,
             sent: FloatArray, end: FloatArray, notes: list[str]) -> FloatArray:
    """When the client meant to send each request of a run whose ``start_times`` are its send
    times (``sent``, rebased). A capped run's request waits for one of the ``max_concurrency``
    slots before it is sent (``benchmark()``'s semaphore; ``start_time`` is taken inside it):
    it was due ``queue_times`` earlier (``client_queue_time``, vllm/benchmarks/serve.py,
    ``limited_request_func``). A capped replay offers each request at its due time: at the
    send time it would wait for the recorded server's slots, so a faster simulated server
    could not send sooner than the real one did. A stage whose requests in flight (sent at
    ``sent``, ended at ``end``) never reached its cap (:func:`cap_reached`) had no request wait
    for a slot: its ``queue_times`` (0.1 ms in vLLM 0.32.0's own runs) are the client's
    scheduling, load the server saw, and its requests are offered at their sends."""
    if stage.load != "capped" or not cap_reached(sent, end, stage.max_concurrency):
        return sent
    queue = _numbers(path, doc, "queue_times", len(sent), line, required=False)
    if queue is None or not np.isfinite(queue).all():
        notes.append(f"{'' if line is None else f'line {line}: '}no queue_times in the file: "
                     "each request is offered at its start_time, when it got one of the "
                     f"max_concurrency={stage.max_concurrency} slots of the recorded run (its "
                     "wait for one is not known): a faster simulated server cannot send "
                     "sooner than the recorded one did")
        return sent
    _check_times(path, line, "queue_times", queue)
    return sent - queue


APPENDED = "(--append-result)"
"""How vLLM's client appends a run to a file: ``--append-result``."""
SGLANG_APPENDED = "(SGLang's bench_serving appends every run to its --output-file)"
"""SGLang's client has no such flag: it always opens ``--output-file`` with ``"a"`` (0.5.9
sglang/bench_serving.py ``benchmark``: "Append results to a JSONL file")."""


def _placed(runs: list[_Run], notes: list[str], appended: str = APPENDED) -> list[float]:
    """Where each run of an ``--append-result`` file starts on the recording's clock: where
    their ``start_times`` put them (one monotonic clock, the gaps between the runs included:
    the tool's start, its test prompt and warm-ups; runs of two clients at once overlap, said),
    else each when the one before it ended
    (a run without ``start_times``, or clocks that do not run on from one run to the next: a
    reboot, another machine), said in a note."""
    ends = [r.sent + np.where(np.isfinite(r.e2e), r.e2e, 0.0) for r in runs]
    last = [float(e.max()) if len(e) else 0.0 for e in ends]
    clocks = [r.clock_s for r in runs]
    # a run starting after the one before it started, on one clock: one after the other, or
    # (two clients appending to one file) at once
    if len(runs) > 1 and all(math.isfinite(c) for c in clocks) and all(
            clocks[k - 1] <= clocks[k] <= clocks[k - 1] + last[k - 1] + MAX_MEASURED_S
            for k in range(1, len(runs))):
        gaps = [clocks[k] - clocks[k - 1] - last[k - 1] for k in range(1, len(runs))]
        over = [(k + 2, -g) for k, g in enumerate(gaps) if g < 0]  # run k + 2 after k + 1
        if over:
            notes.append(f"{len(runs)} runs appended to one file {appended}: one stage "
                         "each, placed where their start_times put them (one clock), and they "
                         "overlapped: " + "; ".join(
                             f"run {k}'s first request {o:.3g} s before run {k - 1}'s last "
                             "answer" for k, o in over)
                         + " (two clients against the server at once); " + (
                             "replayed as one open loop, they share the simulated server as "
                             "they shared the real one" if all(
                                 r.stage.load in ("open", "unknown") for r in runs) else
                             "with a closed or capped stage each stage is simulated alone "
                             "from an idle server: the simulation does not see them share it"))
            return [c - clocks[0] for c in clocks]
        apart = (f"{gaps[0]:.3g} s" if len(gaps) == 1 else
                 f"{min(gaps):.3g} to {max(gaps):.3g} s")
        notes.append(f"{len(runs)} runs appended to one file {appended}: one stage each, "
                     f"placed where their start_times put them (one clock; {apart} between "
                     "one's last answer and the next one's first request)")
        return [c - clocks[0] for c in clocks]
    if len(runs) > 1:
        notes.append(f"{len(runs)} runs appended to one file {appended}: one stage each, "
                     "each starting when the one before it ended (their start_times, where the "
                     "file has them, do not say how far apart they ran)")
    return [float(sum(last[:k])) for k in range(len(runs))]


def _one_model(path: Path, docs: list[tuple[int | None, dict[str, Any]]]) -> None:
    """The runs of an ``--append-result`` file must name one model: they are simulated as
    one server of the model the first names (a run of another is refused, not simulated as
    that one)."""
    first_line, first = docs[0]
    key = "model_id" if "model_id" in first else "server_info.model_path"  # vLLM's, SGLang's
    model = dig(first, *key.split(".")) or pd_model_path(first)
    for line, doc in docs[1:]:
        other = dig(doc, *key.split(".")) or pd_model_path(doc)
        if other is not None and model is not None and other != model:
            raise TraceError(path, f"{str(other)[:100]!r} differs from line {first_line}'s "
                             f"{str(model)[:100]!r}: the appended runs benchmarked different "
                             "models; validate each model's lines as a file of its own",
                             line=line, field=key)


def _refuse_all_failed(path: Path, docs: list[tuple[int | None, dict[str, Any]]],
                       runs: list[_Run]) -> None:
    """Refuse a file whose every request failed without a token (a server that was down or
    refused them all: ``failed`` equals ``num_prompts``), naming the first error's last line (the
    client saves a traceback, vllm/benchmarks/lib/endpoint_request_func.py's ``except`` branch:
    ``output.error = "".join(traceback.format_exception(*exc_info))``). It was refused as "every
    row was dropped (0 output tokens)", as if the server had answered with nothing."""
    failed = np.concatenate([r.failed for r in runs])
    if not failed.all() or (np.concatenate([r.output for r in runs]) > 0).any():
        return
    line, doc = next(((ln, d) for ln, d in docs if any(d.get("errors") or ())), docs[0])
    first = next((str(e) for e in doc.get("errors") or () if e), "")
    said = first.strip().splitlines()[-1][:200] if first.strip() else "(no error saved)"
    raise TraceError(path, f"every one of its {len(failed)} requests failed before its first "
                     f"token (the first error: {said}): nothing was served to simulate; record "
                     "the run again against a server that answers",
                     field="errors", **({"line": line} if line is not None else {}))


def _config(docs: list[tuple[int | None, dict[str, Any]]]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    first = docs[0][1]
    for key, name in (("model_id", "model"), ("tokenizer_id", "tokenizer"),
                      ("backend", "backend"), ("date", "date"), ("burstiness", "burstiness"),
                      ("label", "label"), ("ignore_eos", "ignore_eos"),
                      ("max_tokens", "max_tokens")):
        if first.get(key) is not None:
            config[name] = first[key]
    if "backend" not in config and client_backend(first) is not None:
        config["backend"] = client_backend(first)  # vLLM 0.10's endpoint_type
    server_model = dig(first, "server_info", "model_path") or pd_model_path(first)
    if "model" not in config and isinstance(server_model, str):
        config["model"] = server_model
    if isinstance(config.get("ignore_eos"), str):
        config["ignore_eos"] = config["ignore_eos"].strip().lower() in ("1", "true", "yes")
    if len(docs) == 1:
        for key in ("request_rate", "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps",
                    "ramp_up_end_rps"):
            if first.get(key) is not None:
                config[key] = first[key]
    servers = [sweep_server(doc)[0] for _, doc in docs]
    if all(server == servers[0] for server in servers):
        config.update(servers[0])
    config.update(_sglang_servers(docs)[0])
    return config


def _sglang_servers(docs: list[tuple[int | None, dict[str, Any]]]
                    ) -> tuple[dict[str, Any], list[str]]:
    """The server settings SGLang's ``server_info`` records (:func:`sglang_server`), where
    every run of the file records the same (the runs are simulated on one server)."""
    views = [pd_view(doc) for _, doc in docs]
    told = [sglang_server(view) for view, _ in views]
    if all(server == told[0][0] for server, _ in told):
        pd_note = views[0][1]
        return told[0][0], told[0][1] + ([pd_note] if pd_note else [])
    return {}, ["the appended runs' server_info differ: no server setting is taken from them"]


SWEEP_SERVER_KEYS: dict[str, tuple[str, type | tuple[type, ...]]] = {
    "max_num_seqs": ("max_num_seqs", int), "max_num_batched_tokens": ("max_num_batched_tokens", int),
    "enable_prefix_caching": ("enable_prefix_caching", bool), "block_size": ("block_size", int),
    "tensor_parallel_size": ("tensor_parallel_size", int), "max_model_len": ("max_model_len", int),
    "kv_cache_dtype": ("kv_cache_dtype", str), "num_gpu_blocks_override": ("num_gpu_blocks", int)}
"""The ``vllm serve`` settings a ``vllm bench sweep serve`` run file may carry, by their
``--serve-params`` name (``_`` or ``-``), with the recording's config key each gives."""

SWEEP_SERVER_ONLY = ("gpu_memory_utilization", "quantization", "pipeline_parallel_size",
                     "speculative_config", "enable_chunked_prefill")
"""``vllm serve`` settings a sweep may vary that kvbudget does not take from the file: said."""

SWEEP_READ = frozenset({*SWEEP_SERVER_KEYS, *SWEEP_SERVER_ONLY, "data_parallel_size"})
"""A sweep run's serve parameters, said by :func:`sweep_server` (not as ``--metadata``)."""


def sweep_server(doc: Mapping[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The server settings of one ``vllm bench sweep serve`` run (``run=N.json``): the sweep
    writes ``run_number`` and every ``--serve-params`` (and ``--bench-params``) override into the
    run's result (vLLM ``vllm/benchmarks/sweep/serve.py``, ``_update_run_data``), under the
    name the params file gave (``max_num_seqs`` or ``max-num-seqs``: ``param_sweep.py`` takes
    either). Only the serve overrides are there, not the ``--serve-cmd``'s own flags. Returns
    the config keys read and a note on the ones kvbudget does not take. The blocks an engine
    can allocate are ``num_gpu_blocks_override`` less one: vLLM v1's block pool keeps one as
    its null block (``vllm/v1/core/block_pool.py``, ``self.null_block =
    self.free_block_queue.popleft()``), as a replay's server's blocks are read
    (:func:`kvbudget.results.recorded_records.server_config`)."""
    if not isinstance(doc.get("run_number"), int) or isinstance(doc.get("run_number"), bool):
        return {}, None
    found: dict[str, Any] = {}
    for name, (key, kind) in SWEEP_SERVER_KEYS.items():
        for spelled in (name, name.replace("_", "-")):
            value = doc.get(spelled)
            if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
                found[key] = value
    null = isinstance(found.get("num_gpu_blocks"), int) and found["num_gpu_blocks"] >= 2
    if null:  # vLLM v1's block pool keeps one of them as its null block, never allocated
        found["num_gpu_blocks"] -= 1  # (vllm/v1/core/block_pool.py); the simulator has none
    dp = next((doc[k] for k in ("data_parallel_size", "data-parallel-size") if k in doc), None)
    if isinstance(dp, int) and not isinstance(dp, bool) and dp >= 2:
        # that many engines, each its own scheduler and blocks (--num-gpu-blocks-override is
        # each engine's): a fleet of that many replicas (cli/recorded.py _data_parallel), not
        # one engine with their load
        found["num_replicas"] = found["data_parallel_size"] = dp
        found["data_parallel_blocks"] = "each"
    other = {name: doc[k] for name in SWEEP_SERVER_ONLY for k in (name, name.replace("_", "-"))
             if k in doc}
    gmu = other.get("gpu_memory_utilization")
    said = (f"a vllm bench sweep serve run (run_number {doc['run_number']}); "
            + (f"its server settings from the file: "
               f"{', '.join(f'{k}={v}' for k, v in found.items())}"
               + (f" (its num_gpu_blocks_override {found['num_gpu_blocks'] + 1} less the one "
                  "block vLLM v1 keeps as its null block, never allocated)" if null else "")
               if found else "the file carries no server setting kvbudget takes")
            + (f"; the sweep also set {', '.join(f'{k}={v}' for k, v in other.items())}, "
               "which kvbudget does not take from the file"
               + (f" (pass --set engine.gpu_memory_utilization={gmu})" if gmu is not None
                  else "") if other else ""))
    return found, said


def _shared_prefix_note(doc: Mapping[str, Any]) -> str | None:
    """SGLang's ``--dataset-name generated-shared-prefix`` builds each prompt as one of
    ``--gsp-num-groups`` system prompts (64 by default) of ``--gsp-system-prompt-len`` random
    tokens (2048 by default; each group's drawn in ``[len * --gsp-range-ratio, len]``, the ratio
    1.0 by default) plus a question (0.5.9 sglang/bench_serving.py
    ``sample_generated_shared_prefix_requests`` and its arguments), so the server's prefix cache
    served most of each prompt; the result saves the dataset's name but none of the ``gsp``
    settings, only the ``random`` dataset's ``random_input_len``, ``random_output_len`` and
    ``random_range_ratio``, unused by this one (1024, 1024 and 0.0 by default in SGLang 0.5.9's
    real run here, whose lengths were 16), so the simulated requests share nothing."""
    if not (is_sglang(doc) and doc.get("dataset_name") == "generated-shared-prefix"):
        return None
    return ("dataset generated-shared-prefix: SGLang's prompts shared their group's system "
            "prompt (--gsp-num-groups groups, 64 by default, each a system prompt of "
            "--gsp-system-prompt-len random tokens, 2048 by default, or fewer drawn with "
            "--gsp-range-ratio under 1), which a server's prefix cache reuses; the file records "
            "none of the gsp settings (its random_input_len, random_output_len and "
            "random_range_ratio are the random dataset's, unused here: each request's lengths "
            "are its input_lens and output_lens), so the simulated requests share no prefix "
            "and compute every prompt whole: their TTFTs are not comparable with the recorded "
            "ones")


SGLANG_CHAT_BACKENDS = ("sglang-oai-chat", "vllm-chat", "lmdeploy-chat")
"""SGLang's client's backends that stream ``/v1/chat/completions`` (0.5.9
sglang/bench_serving.py ``ASYNC_REQUEST_FUNCS``: ``async_request_openai_chat_completions``)."""


def _sglang_chat_note(doc: Mapping[str, Any]) -> str | None:
    """What an SGLang chat run's ``input_lens`` count. Its client saves each request's
    ``prompt_len``, its own count of the prompt's text before any chat template (0.5.9
    sglang/bench_serving.py ``sample_random_requests``: the drawn length;
    ``sample_generated_shared_prefix_requests``: ``len(tokenizer.encode(prompt))``), sends the
    text as one user message, and asks for no usage in a single-turn stream (no
    ``stream_options``; 0.5.23 sglang/benchmark/serving.py keeps a usage's ``prompt_tokens``
    where the server sends one unasked, vLLM's does not): the server prefilled the template's
    tokens too. SGLang 0.5.9's ``vllm-chat`` run against the CPU vLLM served with a chat
    template: ``input_lens`` 16 to 31, the prompt texts' counts."""
    if not (is_sglang(doc) and doc.get("backend") in SGLANG_CHAT_BACKENDS):
        return None
    return (f"backend {doc.get('backend')}: each prompt is simulated with its input_lens, "
            "SGLang's client's count of the prompt's text; the server applied its chat "
            "template to it and prefilled the template's tokens too, which the file does not "
            "count (the client asks for no usage; 0.5.23 keeps the prompt_tokens of a server "
            "that sends a usage unasked, which vLLM does not): the simulated prompts are "
            "shorter than the prefilled ones by the template's tokens a request")


def _trtllm_acceptance(doc: Mapping[str, Any]) -> Any:
    """TensorRT-LLM's client's mean over the requests of the tokens each decoded per engine
    iteration (``avg_decoded_tokens_per_iter.mean``: the target token plus the accepted
    drafts, TensorRT-LLM's acceptance length; 0 where the server does not report it)."""
    figures = doc.get("avg_decoded_tokens_per_iter")
    return figures.get("mean") if isinstance(figures, Mapping) else None


def _speculative_note(doc: Mapping[str, Any]) -> str | None:
    """What the file says of the server's speculative decoding: vLLM's ``spec_decode_*``
    figures (``acceptance_length``, ``per_position_acceptance_rates``: one a draft position),
    SGLang's ``accept_length`` or TensorRT-LLM's ``avg_decoded_tokens_per_iter``; the method
    is not recorded, so nothing is simulated of it unless the engine is told
    (docs/speculative.md)."""
    length = doc.get("spec_decode_acceptance_length", doc.get("accept_length"))
    if length is None:
        length = _trtllm_acceptance(doc)
    if not isinstance(length, int | float) or isinstance(length, bool) or \
            not math.isfinite(length) or length <= 1:
        return None
    positions = doc.get("spec_decode_per_position_acceptance_rates")
    k = len(positions) if isinstance(positions, list) and positions else None
    drafts = f", {k} drafts a step" if k else ""
    give = ("--set engine.speculative_config.method=METHOD"
            + (f" --set engine.speculative_config.num_speculative_tokens={k}" if k else "")
            + f" --set engine.speculative_config.acceptance_length={length:.3g}")
    return (f"the server ran speculative decoding (mean acceptance length {length:.3g}{drafts}; "
            "the method is not recorded): the simulated engine decodes one token a step "
            f"unless told, {give} (docs/speculative.md)")


def _probe_note(doc: Mapping[str, Any], line: int | None) -> str | None:
    """``vllm bench serve --probe-request-rate R`` (vLLM 0.32.0 ``vllm/benchmarks/serve.py``,
    ``probe_loop``) sends, beside the run, one probe request after another ("Hi", 1 output
    token, ``1 / R`` s apart), and saves only their counts and E2E figures
    (``probe_completed``, ``probe_failed``, ``probe_median_e2el_ms``...), none of them in the
    request lists: the server carried them, the replay cannot. Up to 0.32 the probes shared
    the run's connection pool, which ``--max-concurrency`` caps (``aiohttp.TCPConnector(limit=
    max_concurrency)``), so a request of the run could wait for a probe's connection after its
    ``start_time``, inside its TTFT; from 0.33 (commit 4ba787ec9, ``make_session(1)``) they
    have a connection of their own, one request past the cap."""
    done, failed = doc.get("probe_completed"), doc.get("probe_failed")
    if not isinstance(done, int) or isinstance(done, bool) or done <= 0:
        return None
    failed = failed if isinstance(failed, int) and not isinstance(failed, bool) else 0
    median, p99 = doc.get("probe_median_e2el_ms"), doc.get("probe_p99_e2el_ms")
    e2e = (f" (their E2E: median {median:.4g} ms, p99 {p99:.4g} ms)"
           if isinstance(median, int | float) and isinstance(p99, int | float) else "")
    where = "" if line is None else f"line {line}: "
    return (f"{where}--probe-request-rate: {done + failed} probe requests ({done} completed, "
            f"{failed} failed; each the prompt \"Hi\" and 1 output token) were sent beside the run"
            f"{e2e} and are not in the file's request lists: they loaded the server, not "
            "the replay, and are compared nowhere" + (
                f"; with --max-concurrency {doc['max_concurrency']}, vLLM 0.32 and earlier sent "
                "them over the run's capped connections (a request of the run could wait for "
                "one inside its measured TTFT), 0.33 and later over one of their own"
                if doc.get("max_concurrency") is not None else ""))


def bench_tool(path: Path) -> str:
    """The client that wrote a result in vLLM's layout, as a recording read from it names it
    (``Recording.tool``): SGLang's and TensorRT-LLM's copies by the fields only they write
    (:func:`is_sglang`, :func:`is_trtllm`), else vLLM's; vLLM's for a file it cannot read."""
    try:
        docs = _documents(path)
    except TraceError:
        return TOOL
    first = docs[0][1] if docs else {}
    return SGLANG if is_sglang(first) else TRTLLM if is_trtllm(first) else TOOL


def read_vllm_bench(path: Path, default_tier: str, seed: int,
                    max_output_rule: MaxOutputRule | None = None) -> Recording:
    """Read a ``vllm bench serve`` result (one run, or ``--append-result`` runs one a line)."""
    docs = _documents(path)
    _refuse_repeated_runs(path, docs)
    _one_model(path, docs)
    notes: list[str] = []
    runs = [_run(path, doc, line, seed + k, notes) for k, (line, doc) in enumerate(docs)]
    _refuse_all_failed(path, docs, runs)
    labels = [_label(r.stage) for r in runs]
    if len(runs) > 1:
        labels = [f"line {line}: {label}" for (line, _), label in zip(docs, labels, strict=True)]
    stages = tuple(RecordedStage(lab, r.stage.load, r.stage.request_rate,
                                 r.stage.max_concurrency,
                                 "recorded" if math.isfinite(r.clock_s) else "redrawn")
                   for lab, r in zip(labels, runs, strict=True))
    offsets = _placed(runs, notes, SGLANG_APPENDED if is_sglang(docs[0][1]) else APPENDED)
    arrivals = [r.arrival + o for r, o in zip(runs, offsets, strict=True)]
    sents = [r.sent + o for r, o in zip(runs, offsets, strict=True)]
    cat = np.concatenate
    max_tokens = cat([np.full(len(r.prompt), r.max_tokens) for r in runs])
    recorded = max_tokens if np.isfinite(max_tokens).any() else None
    first = docs[0][1]
    tool = SGLANG if is_sglang(first) else TRTLLM if is_trtllm(first) else TOOL
    outputs = sglang_outputs_said(first) if tool == SGLANG else None
    workload, counts, warnings = finish_columns(
        path, "vllm-bench", prompt=cat([r.prompt for r in runs]),
        output=cat([r.output for r in runs]), arrival=cat(arrivals),
        fields={"prompt_tokens": "input_lens", "output_tokens": "output_lens",
                "arrival_s": "start_times", "max_output_tokens": "max_tokens"},
        default_tier=default_tier, max_output=recorded, max_output_rule=max_output_rule,
        assumed=(outputs.assumed,) if outputs and outputs.assumed else ())
    if any(st.send_times == "redrawn" for st in stages):
        # the times were drawn here (bench_arrivals): a run at rate inf, or a closed loop's
        # first users, share theirs on purpose; the file has no clock to be coarse
        workload, warnings = without_shared_times(workload, warnings)
    rows = workload.request_id
    failed = cat([r.failed for r in runs])
    stage_of = cat([np.full(len(r.prompt), k) for k, r in enumerate(runs)])
    counts["num_failed"] = int(failed.sum())
    counts["num_stages"] = len(runs)
    config = _config(docs)
    peaks = {lab: p for lab, (_, doc) in zip(labels, docs, strict=True)
             if (p := recorded_peak(doc)) is not None}
    config.update({PEAK_KEY: peaks} if peaks else {})  # said beside the simulated one
    via = gateway_pairs(first)  # its --metadata's word that a gateway answered (the settings)
    config.update({GATEWAY_KEY: via} if via else {})
    asked = outputs.max_tokens if outputs and recorded is None and max_output_rule is None \
        else None  # SGLang's output_lens are the max_tokens asked: not "realised" (unknown)
    notes.append(asked or max_tokens_note(recorded, max_output_rule))
    if "ignore_eos" not in config:
        notes.append(outputs.eos if outputs else ignore_eos_note(first, tool))
    notes.extend(n for line, doc in docs if (n := server_metrics_note(doc, line)))
    release = next((n for _, doc in docs if (n := client_release_note(doc, None))), None)
    notes.extend([release] if release and tool == TOOL else [])
    notes.extend(n for n in (foreign_backend_note(first), chat_template_note(first),
                             first_prompt_note(tool, first), async_scheduling_note(first, tool),
                             v0_engine_note(first, tool), text_chunks_note(first, tool)) if n)
    notes.extend(n for n in (_speculative_note(first), _shared_prefix_note(first),
                             _sglang_chat_note(first),
                             sweep_server(first)[1],
                             metadata_note(first, SWEEP_READ if "run_number" in first else
                                           frozenset()), object_note(first)) if n)
    notes.extend(_sglang_servers(docs)[1])
    notes.extend(n for line, doc in docs if (n := _probe_note(doc, line)))
    # SGLang's bench_serving keeps a refusal's body ("Bad Request: " + the response text,
    # 0.5.23 sglang/benchmark/serving.py:236-239); vLLM's the reason phrase only
    # (benchmarks/lib/endpoint_request_func.py, output.error = response.reason)
    say_context_refusals((str(e) for _, doc in docs for e in doc.get("errors") or () if e),
                         counts, notes, config)
    server = server_times(docs, [len(r.prompt) for r in runs], failed, notes)
    return build_recording(
        path, "vllm-bench", workload, ttft=cat([r.ttft for r in runs])[rows],
        e2e=cat([r.e2e for r in runs])[rows], sent_s=cat(sents)[rows],
        status=["error" if failed[r] else "completed" for r in rows.tolist()],
        stage=[labels[int(stage_of[r])] for r in rows.tolist()],
        itl_mean=cat([r.itl_mean for r in runs])[rows], config=config, counts=counts,
        notes=[*notes, *warnings], stages=stages, tool=tool,
        server=None if server is None else (server[0][rows], server[1][rows]))
