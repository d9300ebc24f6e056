"""Files of aggregate figures from a tool kvbudget does not know: said as such, in one line.

A load tool's own summary (vLLM's, AIPerf's, LLMPerf's...) is refused by name
(:mod:`kvbudget.results.recorded_summaries`). Anything else that holds a run's figures and no
request, a JSON object of ``mean_ttft_ms``, ``p99_e2e_ms`` and ``throughput`` or a CSV of one row
a run (``concurrency, throughput, mean_ttft_ms, p99_ttft_ms``), was refused as a file of no
known format ("pass a format ...") or as a records file without ``prompt_tokens``: neither
said that the file holds no request at all, nor what kvbudget needs instead. A file that does
list requests, in a layout of no tool kvbudget reads (a home-made benchmark's ``{"requests":
[{"ttft_ms": ..., "total_ms": ...}, ...]}``), was told to "pass a format", which none fits:
:func:`unknown_requests_refusal` says what it holds and what to write instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from kvbudget.workloads.text_files import COMMENT_SAID, TEXT_OF_NO_TOOL, comment_first_line

STAT_WORDS = frozenset(
    {
        "mean",
        "avg",
        "average",
        "median",
        "std",
        "stdev",
        "stddev",
        "throughput",
        "tput",
        "percentile",
        "percentiles",
        "qps",
        "rps",
    }
)
"""Words of a key or column that name a statistic over requests, not one request's figure
(with ``p50``, ``p99``, ``p999`` and their kin: :func:`_is_stat`)."""

PER_REQUEST_COLUMNS = frozenset({"arrival_s", "prompt_tokens", "output_tokens", "ttft_s", "e2e_s"})
"""The generic records format's columns (docs/recordings.md): a header with any of them is a
per-request table, whatever else it holds."""

NEEDED = (
    "not per-request records: kvbudget replays each request (its send time, prompt and "
    "output tokens, TTFT and E2E); pass a load tool's per-request file (docs/"
    "recordings.md lists them: vllm bench serve --save-detailed, a GuideLLM report, "
    "AIPerf's profile_export.jsonl, ...) or the generic records format (arrival_s, "
    "prompt_tokens, output_tokens, ttft_s, e2e_s)"
)


RATE = re.compile(
    r"(^|_)per_(second|sec|s)$|(^|_)(tok|toks|tokens|req|reqs)_(s|sec)$"
    r"|(^|_)per_(prompt|request|req|query)$"
    r"|(^|_)(hourly|per_(hour|hr|day|dollar|dollars|usd|\d+k?_tokens?))(_|$)"
)
"""A rate over a window (``requests_per_second``, ``tokens_per_sec``, ``tg_tok_s``): a
statistic over the requests of the window, not one request's figure. The short form is a
llama-bench wrapper's (github.com/MMeffert/intel-llm-bench 057f2c2 ``results.jsonl``: one line
a model and device, ``pp_tok_s`` and ``tg_tok_s``, which kvbudget told to "pass a format").
So is a figure a prompt (or request) over a round: LMCache's ``benchmarks/long_doc_qa/
long_doc_qa.py --json-output`` summary, ``query_ttft_per_prompt`` (the round's mean TTFT) and
``query_round_time_per_prompt`` (its duration over its prompts), published as github.com/
LMCache/LMCache 989cf45 ``benchmarks/long_doc_qa/async-20260723.json``. So is a cost or use over
the run's hours or per dollar or per thousand tokens (``hourly_hardware_usd``,
``tokens_per_dollar``, ``cost_per_1k_tokens_usd``: a home-made harness's cost summary,
github.com/llm-serving-lab/vllm-benchmark 86449c9 ``runs/cost_test_clean_cost.json``, which
kvbudget told to "pass a format"); ``per_token`` alone is not (``time_per_token_ms`` is one
request's TPOT)."""

TIME_COLUMNS = frozenset(
    {
        "time_elapsed",
        "elapsed",
        "elapsed_s",
        "timestamp",
        "time",
        "time_s",
        "window_start",
        "interval",
    }
)
"""A column of when a row was taken: with rates beside it, each row is a time window (Locust's
``*_stats_history.csv``, bentoml/llm-bench's five-second rows)."""


def _words(name: str) -> list[str]:
    """The lower-case words of a key or column, in order."""
    return [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]


def _is_stat(name: str) -> bool:
    words = _words(name)
    return (
        any(w in STAT_WORDS or re.fullmatch(r"p\d{2,3}", w) for w in words)
        or RATE.search("_".join(words)) is not None
    )


def _said(names: Iterable[str]) -> str:
    shown = list(names)
    return ", ".join(shown[:3]) + (", ..." if len(shown) > 3 else "")


NESTED_STATS = 4
"""How deep in objects of objects statistics are looked for: a home-made benchmark's report
keeps them two objects down (vllm-project/production-stack 0b945e8
``mock_benchmark_results.json``: ``sequential_vs_parallel.sequential.avg_latency``,
``cache_efficiency.standard.avg_latency``), where one level was looked at and the file was
told to "pass a format", which none fits; a dashboard's data three down, by model, then run
(github.com/thienlng/llm-bench-results-16-04 5c16239 ``benchmark_data.json``:
``MiniMax-M2.7.data.1.ttft_mean_ms``, vllm bench serve's summaries at each concurrency), where
two levels were looked at."""


RUN_WORDS = frozenset(
    {"run", "runs", "trial", "trials", "repeat", "repeats", "repetitions", "iterations"}
)
"""Words of a key whose list of numbers is a figure a run (each repetition of the whole
measurement), not a figure a request: a harness's summary (github.com/sfxnz/DeepSeek-V4.1-
Flash-EXL3-vLLM-2x-DGX-Spark 1f60373 ``results/2026-09-20-baseline-live/four_numbers.json``:
``prose_runs``, nine runs' decode rates, beside their median ``prose_median_tok_s``), which
kvbudget took for a tool's per-request list and told to "pass a format", which none fits."""


def _figures(value: object, key: str = "") -> bool:
    """Whether ``value`` (under ``key``) lists a figure an item (numbers, or flat objects of no
    statistic: a tool's per-request lists, ``ttfts: [...]``), not names (LMCache's long_doc_qa
    summary lists its warmup round's ``warmup_request_ids`` beside its averages), nor objects of
    statistics (a sweep's points, :func:`_first_objects`), nor a figure a run
    (:data:`RUN_WORDS`)."""
    if not isinstance(value, list) or len(value) < 2:
        return False
    if RUN_WORDS & set(_words(key)) and not isinstance(value[0], Mapping):
        return False
    first = value[0]
    if isinstance(first, Mapping) and _measured_request(first):
        return True
    if isinstance(first, Mapping):  # a request's flat figures, not a run's or a point's
        return not any(_is_stat(str(k)) for k in first) and not _first_objects("", first)
    return any(isinstance(x, int | float | list) for x in value[:8])


def _measured_request(item: Mapping[str, Any]) -> bool:
    """Whether ``item`` is one request's measurement, whatever rates or objects of its own it
    holds: a measured time (:func:`_timed`) and its token counts among its keys, no summary
    word (a home-made harness's ``cases``, github.com/jodyalbritton/dgx-spark-model-bench
    125e6fb ``results/2026-09-10-baseline/raw/throughput-*.json``: each case's ``ttft_ms``,
    ``duration_ms``, ``prompt_tokens``, ``completion_tokens`` beside its own ``decode_tok_s``
    and an ``acceptance`` object, which kvbudget called "aggregate figures (cases[0].
    decode_tok_s, ...), not per-request records")."""
    keys = [str(k) for k in item]
    counted = any(
        "tokens" in words and words & {"prompt", "completion", "input", "output"}
        for words in (set(_words(k)) for k in keys)
    )
    return counted and any(map(_timed, keys)) and not any(map(_summarises, keys))


def _first_objects(where: str, obj: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The objects ``obj`` holds, each with where it is: its values that are objects, and the
    first item of each list of objects (a sweep's ``runs[0].points[0]``, github.com/sgl-project/
    sglang fd67a1b ``benchmark/amd_mi350x_prefill/data/gpt-oss-120b-quark-w4a8.json``: each
    point's ``req_s``, ``ttft_mean_ms``, ``ttft_p99_ms``, which kvbudget told to "pass a
    format")."""
    found: list[tuple[str, Mapping[str, Any]]] = []
    for k, v in obj.items():
        if isinstance(v, Mapping):
            found.append((f"{where}{k}.", v))
        elif isinstance(v, list) and v and isinstance(v[0], Mapping):
            found.append((f"{where}{k}[0].", v[0]))
    return found


def aggregate_object_refusal(doc: Mapping[str, Any]) -> str | None:
    """Why a JSON object of no known tool holds no request: two or more of its keys (or of the
    keys of the objects it holds, ``{"ttft": {"mean": ..., "p99": ...}}``, down to
    :data:`NESTED_STATS` objects deep, the shallower first) name statistics and none of its
    values lists figures (a tool's per-request lists, ``ttfts: [...]``); else None."""
    if any(_figures(v, str(k)) for k, v in doc.items()):
        return None
    stats: list[str] = []
    level: list[tuple[str, Mapping[str, Any]]] = [("", doc)]
    for _ in range(NESTED_STATS):
        stats += [f"{where}{k}" for where, obj in level for k in obj if _is_stat(str(k))]
        level = [found for where, obj in level for found in _first_objects(where, obj)]
    if len(stats) < 2:
        return None
    return f"holds aggregate figures ({_said(stats)}), {NEEDED}"


ENGINE_ARGS = frozenset(
    {
        "served_model_name",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "max_model_len",
        "max_num_seqs",
        "max_num_batched_tokens",
        "gpu_memory_utilization",
        "kv_cache_dtype",
        "block_size",
        "enable_prefix_caching",
        "quantization",
        "enforce_eager",
        "swap_space",
        "speculative_config",
    }
)
"""vLLM's serve arguments (``EngineArgs``' fields, each a ``--flag`` of ``vllm serve``:
github.com/vllm-project/vllm 001999d2 ``vllm/engine/arg_utils.py``, ``add_cli_args``;
``speculative_config`` since ``--speculative-config``): a key of them names a server's
setting, not a figure measured."""


def _flags(value: object) -> list[str]:
    """The command-line flags a list of strings holds (``["--max-model-len", "12288", ...]``)."""
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        return []
    return [x for x in value if x.startswith("--")]


def configuration_refusal(doc: Mapping[str, Any]) -> str | None:
    """Why a JSON object of no known tool holds no request: it names a server's settings (two or
    more of :data:`ENGINE_ARGS` among its keys, or a list of two or more ``--flags`` counting as
    one) and nothing measured (no key, down :data:`NESTED_STATS` objects, names a statistic or
    a measured time, and no list of objects); else None. A benchmark's row of server settings
    (github.com/systalyze/vllm-benchmarks 004db0c ``configs/qwen3-32b/g7/config-1/row-eagle3.
    json``: ``served_model_name``, ``speculative_config``, ``vllm_args``, ``tp``) was told
    "cannot tell the recording format ...; pass a format", which none fits."""
    if _object_lists(doc):
        return None
    level: list[tuple[str, Mapping[str, Any]]] = [("", doc)]
    for _ in range(NESTED_STATS):
        if any(_is_stat(str(k)) or _timed(str(k)) for _, obj in level for k in obj):
            return None
        level = [found for where, obj in level for found in _first_objects(where, obj)]
    named = [str(k) for k in doc if str(k).lower() in ENGINE_ARGS]
    flagged = [(str(k), flags) for k, v in doc.items() if len(flags := _flags(v)) >= 2]
    if len(named) + (1 if flagged else 0) < 2:
        return None
    shown = _said(named) + "".join(f"; {k}: {_said(flags)}" for k, flags in flagged[:1])
    return (
        f"holds a configuration ({shown}): a server's or a run's settings, with no figure "
        f"measured and no request in it; {NEEDED}"
    )


def no_request_refusal(doc: Mapping[str, Any]) -> str | None:
    """Why a JSON object of no known tool holds no request at all: its figures only
    (:func:`aggregate_object_refusal`) or its settings only (:func:`configuration_refusal`)."""
    return aggregate_object_refusal(doc) or configuration_refusal(doc)


SUMMARY_WORDS = frozenset({"mean", "avg", "average", "median", "std", "stdev", "stddev"})
"""Words of a key that name a summary over many requests (with ``p50``, ``p99``...): never one
request's figure, as a rate can be (a request's own ``output_tokens_per_second``)."""


def _summarises(name: str) -> bool:
    return any(w in SUMMARY_WORDS or re.fullmatch(r"p\d{2,3}", w) for w in _words(name))


def aggregate_line_refusal(record: Mapping[str, Any]) -> str | None:
    """Why JSON lines whose first line is ``record`` hold no request: two or more of its keys
    name a summary over requests (a percentile, a mean, a median: :func:`_summarises`) and none
    is the generic format's measured time (``ttft_s``, ``e2e_s``), whatever else it holds; else
    None. A harness's runs, one a line (github.com/LottoLottoLotto/4x3090-llm-benchmarks
    bd22281 ``data/benchmarks.jsonl``: each line a run's ``ttft_p50_ms``, ``ttft_p99_ms``,
    ``e2e_p99_ms`` and ``req_s`` beside its configured ``prompt_tokens``), was read as generic
    records and told it "holds per-request results, one a line" (validate, report) or to map
    its ``output_tok_s``, a rate, as each request's output tokens (trace convert)."""
    keys = [str(k) for k in record]
    if {"arrival_s", "ttft_s", "e2e_s"} & set(keys):
        return None
    summaries = [k for k in keys if _summarises(k)]
    if len(summaries) < 2:
        return None
    return f"holds aggregate figures, one line a run or a metric ({_said(summaries)}), {NEEDED}"


METRIC_VALUE_COLUMNS = frozenset({"performance", "value"})
"""The column beside ``metric`` that holds each figure in a table of one row a metric: ROCm
MAD's ``perf.csv`` (github.com/ROCm/MAD e162173 ``test_logs/perf_Kimi-K3.csv``: ``model, ...,
cmd, performance, metric, unit``, its rows ``throughput_tot``, ``median_ttft``...), which
kvbudget read as the generic format and refused for a missing ``prompt_tokens`` column."""


def aggregate_table_refusal(header: Iterable[str]) -> str | None:
    """Why a CSV with ``header`` holds no request: two or more of its columns name statistics
    and none is a column of the generic records format; else None."""
    names = [h.strip() for h in header]
    if PER_REQUEST_COLUMNS & {n.lower() for n in names}:
        return None
    value = [n for n in names if n.lower() in METRIC_VALUE_COLUMNS]
    if "metric" in {n.lower() for n in names} and value:
        return (
            f"holds aggregate figures, one row a metric (its metric column names a figure, "
            f"{value[0]} holds it: ROCm MAD's perf.csv is so), {NEEDED}"
        )
    stats = [n for n in names if _is_stat(n)]
    if len(stats) < 2:
        return None
    times = [n for n in names if n.lower() in TIME_COLUMNS]
    rows = (
        f"one row a time window ({times[0]}: a time series)"
        if times
        else "one row a run or a metric"
    )
    return f"holds aggregate figures, {rows} ({_said(stats)}), {NEEDED}"


LATENCY_WORDS = frozenset({"ttft", "latency", "e2e", "e2el", "tpot", "itl"})
"""Words of a key that name one request's measured time."""
SEND_WORDS = frozenset(
    {"start", "send", "sent", "arrival", "timestamp", "created", "begin", "issued", "scheduled"}
)
"""Words of a key that may hold when a request was sent."""
FINISH_WORDS = frozenset({"complete", "completed", "end", "finish", "finished", "done"})
"""Words of a key that may hold when a request's answer ended (``t_complete``, ``end_time``)."""
FIRST_OUTPUT_WORDS = frozenset({"token", "chunk", "content", "byte", "output"})
"""Words beside ``first`` that name a request's first output (its first token, chunk, content
delta or byte): when it came, or how long after the send."""
DURATION_UNITS = frozenset({"s", "sec", "secs", "seconds", "ms", "millis", "milliseconds"})
"""Words of a key that give it a unit of time."""
ELAPSED_WORDS = frozenset({"total", "elapsed", "duration", "wall"})
"""Words of a key that, with a unit of time, name a request's whole measured time."""
NOT_A_TIME = frozenset({"token", "tokens", "text", "reason", "id", "batch"})
"""Words of a key that is no request's time though a finish word is among them
(``finish_reason``, ``batch_t_end``)."""


def _timed(key: str) -> bool:
    """Whether a request's key names one of its measured times: a latency (``ttft_ms``,
    ``e2e_latency``), or a timestamp of its first token or of its end (``t_first_token``,
    ``t_complete``: a home-made harness's per-request results, github.com/maerory/vllm-bench
    9c1f1d8 ``results/*-vllm-c16.json``, beside its ``t_request_sent``, which kvbudget told
    to "pass a format", though none fits), or a duration of one (:func:`_duration`)."""
    words = set(_words(key))
    return bool(
        LATENCY_WORDS & words
        or ("first" in words and words & FIRST_OUTPUT_WORDS)
        or (FINISH_WORDS & words and not NOT_A_TIME & words)
        or _duration(key)
    )


def _duration(key: str) -> bool:
    """Whether a request's key names a measured duration in a unit of time: the time to its
    first output or its whole time (``first_content_seconds``, ``total_seconds``,
    ``elapsed_ms``: a home-made smoke test's per-request results, github.com/coolbho3k/
    DeepSeek-v4.1-Flash-2x-DGX-Spark 1c1c7eb ``release/experimental/nvfp4_kv/
    serving-results.json``, which kvbudget called a load tool's input dataset with "no
    request's send or measured time in it")."""
    words = set(_words(key))
    return bool(DURATION_UNITS & words and (ELAPSED_WORDS | {"first"}) & words)


def _object_lists(doc: object) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """The lists of objects in ``doc`` (itself, or a list under one of its keys), each with
    where it is (``"under 'data': "``), its first 8 items checked to be objects."""
    lists = (
        [("", doc)]
        if isinstance(doc, list)
        else [(f"under {k!r}: ", v) for k, v in doc.items() if isinstance(v, list)]
        if isinstance(doc, Mapping)
        else []
    )
    return [
        (where, items)
        for where, items in lists
        if items and all(isinstance(x, Mapping) for x in items[:8])
    ]


def unknown_requests_refusal(doc: object, *, one_a_line: bool = False) -> str | None:
    """Why request objects of no tool kvbudget reads cannot be read: a JSON list of them (the
    document, or a list under one of its keys), or, with ``one_a_line`` (``doc`` is the first
    line of a JSON lines file), one of them (:func:`_one_request`); what they hold, whether a
    send time is among their keys, and what to write instead; None where no such object is
    found. A list whose first object is the run's aggregate figures and the rest requests (the
    layout of github.com/rsevilla87/guidellm-results-parser's ``--verbose`` output, which
    :mod:`kvbudget.results.recorded_guidellm_parser` names before this is asked) was said to
    hold as many per-request results as objects, with the summary's keys shown as theirs: the
    two are now told apart."""
    for where, items in _object_lists(doc):
        runs = _runs_said(items)
        if runs:
            return f"holds aggregate figures, one JSON object a run ({where}{runs}), {NEEDED}"
        summary = len(items) > 1 and _summary_ahead(items[0], items[1])
        said = _requests_said([str(k) for k in items[1 if summary else 0]])
        if said:
            held = (
                f"holds {len(items)} JSON objects, the first a run's aggregate figures, the "
                f"other {len(items) - 1} per-request result(s)"
                if summary
                else f"holds {len(items)} per-request result(s)"
            )
            return f"{held} in a layout of no tool kvbudget reads ({where}{said}"
    one = _one_request(doc) if one_a_line else None
    if one:
        return (
            f"holds per-request results, one a line, in a layout of no tool kvbudget reads ({one}"
        )
    return None


def _runs_said(items: list[Mapping[str, Any]]) -> str | None:
    """The summary keys of objects that are each a run's aggregate figures (two or more of
    every object's keys, of its first 8, a percentile, a mean or a median: a harness's sweep
    written as one JSON array, github.com/sfxnz/DeepSeek-V4.1-Flash-EXL3-vLLM-2x-DGX-Spark
    2d2a4d9 ``results/2026-09-24-review/campaign/*/04-bench-decode.summary.json``, each
    object's ``median_decode_tok_s``, ``median_ms_per_step`` and ``ttft_s_p50`` at one phase
    and concurrency, which kvbudget said "holds 2 per-request result(s)"); None otherwise, as
    for JSON lines (:func:`aggregate_line_refusal`). The keys are looked for in the objects
    each one holds too, :data:`NESTED_STATS` deep (:func:`_summary_keys`)."""
    summaries = [_summary_keys(item) for item in items[:8]]
    if any(len(keys) < 2 for keys in summaries):
        return None
    return _said(summaries[0])


def _summary_keys(item: Mapping[str, Any]) -> list[str]:
    """The keys of ``item`` that name a summary over requests (:func:`_summarises`), and those
    of the objects it holds, :data:`NESTED_STATS` deep, each with where it is (the shallower
    first), as :func:`aggregate_object_refusal` looks for statistics: a harness that runs
    ``vllm bench serve`` keeps the figures it printed under each run's ``metrics``
    (github.com/jasl/vllm-ds4-sm120-harness c911a0e ``ds4_harness/cli.py`` lines 1441-1449,
    ``row = {"concurrency", "ok", "detail", "metrics", "command", ...}``, the metrics parsed
    from the console by ``ds4_harness/bench.py`` lines 10-32: ``mean_ttft_ms``,
    ``p99_ttft_ms``...), a run a list's item, which kvbudget called a JSON list it "cannot tell
    the recording format" of."""
    keys: list[str] = []
    level: list[tuple[str, Mapping[str, Any]]] = [("", item)]
    for _ in range(NESTED_STATS):
        keys += [f"{where}{k}" for where, obj in level for k in map(str, obj) if _summarises(k)]
        level = [found for where, obj in level for found in _first_objects(where, obj)]
    return keys


def _summary_ahead(first: Mapping[str, Any], second: Mapping[str, Any]) -> bool:
    """Whether ``first`` summarises a run (two or more keys of :data:`SUMMARY_WORDS` or a
    percentile, ``ttft_mean_ms``, ``ttft_p99_ms``) ahead of ``second``, a request (none such:
    a request's own ``output_tokens_per_second`` is no summary)."""
    return sum(map(_summarises, map(str, first))) >= 2 and not any(
        map(_summarises, map(str, second))
    )


PROMPT_KEYS = frozenset(
    {
        "prompt",
        "instruction",
        "question",
        "input",
        "context",
        "content",
        "conversation",
        "conversations",
        "turn",
        "text",
        "messages",
    }
)
"""The keys a load tool takes a dataset's prompt text from: GuideLLM's ``text_column``
candidates (github.com/vllm-project/guidellm 3fed53a ``src/guidellm/data/preprocessors/
mappers.py`` ``GenerativeColumnMapper.defaults``), ShareGPT's ``conversations`` and a chat's
``messages``."""


def dataset_refusal(doc: object) -> str | None:
    """Why a load tool's input dataset cannot be replayed: a JSON list of prompts to send (the
    document, or a list under one of its keys), each with a prompt text and no measured time,
    such as github.com/rh-aiservices-bu/llm-d-playbook 7a43b29 ``guidellm/shared-prefix-data.
    json`` (``{"data": [{"prompt": ..., "output_tokens_count": 256}]}``, GuideLLM's ``--data``),
    which kvbudget told to "pass a format", though none fits; or ``doc`` itself one such prompt,
    the first line of a JSON lines dataset (GuideLLM's ``--data`` of a ``.jsonl`` file; vllm
    bench serve's ``--dataset-name custom``, whose ``CustomDataset`` in vLLM's
    ``vllm/benchmarks/datasets.py`` reads a ``prompt`` a line; ShareGPT's conversations a
    line), which validate and trace convert told "cannot tell the ... format"; None for
    anything else."""
    for where, items in _object_lists(doc):
        if _prompt_record(items[0]):
            return _dataset_said(f"{len(items)} prompt(s) to send ({where}{_said(items[0])}")
    if isinstance(doc, Mapping) and _prompt_record(doc):
        return _dataset_said(f"prompts to send, one a JSON object ({_said(doc)}")
    return None


def dataset_header_refusal(columns: list[str]) -> str | None:
    """Why a CSV input dataset cannot be replayed: a header with a prompt text column and no
    measured time nor a token count of the generic format (GuideLLM's ``--data`` of a CSV file,
    github.com/Dorsivan/guidellm-example c902efa ``datasets/prompts.csv``: ``prompt,
    output_tokens_count``, which validate told to map a ``prompt_tokens`` column it lacks, and
    trace convert to "pass a format"); None for anything else."""
    names = [c.strip() for c in columns]
    if GENERIC_COLUMNS & set(names) or any(_timed(c) for c in names):
        return None
    if not any(c.lower() in PROMPT_KEYS for c in names):
        return None
    return _dataset_said(f"prompts to send, one a row ({_said(names)}")


GENERIC_COLUMNS = frozenset({"arrival_s", "prompt_tokens", "output_tokens"})
"""The generic format's columns: a CSV holding one is a trace or records, not a dataset."""


def _prompt_record(item: Mapping[str, Any]) -> bool:
    """Whether ``item`` is a prompt to send: a prompt text among its keys, no measured time."""
    keys = [str(k) for k in item]
    return not any(_timed(k) for k in keys) and any(
        k.lower() in PROMPT_KEYS and isinstance(item[k], str | list) for k in keys
    )


def _dataset_said(what: str) -> str:
    """The refusal of an input dataset, ``what`` its prompts (an open parenthesis: their keys)."""
    return (
        f"is a load tool's input dataset, {what}; GuideLLM --data, vllm bench serve "
        "--dataset-path, ...), not a recording: no request's send or measured time is in it; "
        "pass the result file the tool wrote when it sent them (docs/recordings.md)"
    )


def _one_request(doc: object) -> str | None:
    """What a JSON object that is one request's figures holds (its values numbers, strings or
    nulls, one a measured time: a home-made benchmark's JSON lines, such as
    github.com/liqcui/sglang-benchmark-tools ``examples/logs/*.requests.jsonl``: ``request_id,
    input_len, output_len, ttft_ms, tpot_ms, itl_ms, e2e_ms, status, error``, which kvbudget
    told to "pass a format", though none fits); None for anything else."""
    if not isinstance(doc, Mapping) or any(isinstance(v, (list, Mapping)) for v in doc.values()):
        return None
    numbers = [
        str(k) for k, v in doc.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    ]
    return _requests_said([str(k) for k in doc], timed_among=numbers)


def unsent_records_refusal(keys: list[str], unit: str) -> str | None:
    """Why records of the generic format's names but no send time cannot be read: a header
    (or a first record) with a measured time, no ``arrival_s`` and no key naming a send, as a
    home-made harness's ``runs/*.csv`` and ``*.jsonl`` (github.com/llm-serving-lab/vllm-benchmark
    86449c9: ``request_id, prompt, ttft_ms, tpot_ms, total_ms, ..., input_tokens,
    output_tokens``), which kvbudget told to map a ``prompt_tokens`` column, though no column
    would give the send time it needs next; None for anything else."""
    names = [k.strip() for k in keys]
    if {"arrival_s", "ttft_s", "e2e_s"} & set(names) or any(
        SEND_WORDS.intersection(_words(k)) for k in names
    ):
        return None  # the generic format's own times (its refusal names what is missing)
    said = _requests_said(names)
    if said is None:
        return None
    return f"holds per-request results, one a {unit}, in a layout of no tool kvbudget reads ({said}"


NO_SEND_TIME = ", with no send time among their keys, which kvbudget needs to replay them"
"""How a refusal of request objects of no tool says they lack a send time (:func:`_requests_said`):
no trace can be made of them either (``results/recording_named.py`` says it where a trace is
asked for)."""


def _requests_said(keys: list[str], timed_among: list[str] | None = None) -> str | None:
    """The rest of the refusal of request objects with ``keys`` (their timed keys first, then
    whether one may be a send time, then what to write), closing the parenthesis its caller
    opened; None where no key (of ``timed_among``, where given) names a measured time
    (:func:`_timed`)."""
    timed = [k for k in (keys if timed_among is None else timed_among) if _timed(k)]
    if not timed:
        return None
    sent = any(SEND_WORDS.intersection(_words(k)) for k in keys)
    shown = timed + [k for k in keys if k not in timed]  # the times first
    return (
        f"{_said(shown)})"
        + ("" if sent else NO_SEND_TIME)
        + ": write them as the generic records format (arrival_s, prompt_tokens, "
        "output_tokens, ttft_s, e2e_s; docs/recordings.md"
        + (
            "; ttft_s and e2e_s are times from the send: the first token's and the end's "
            "timestamps less the send's"
            if any(not LATENCY_WORDS & set(_words(k)) and not _duration(k) for k in timed)
            else ""
        )
        + ") or pass a load tool's per-request file"
    )


DOCUMENT_SUFFIXES = frozenset({".md", ".markdown", ".rst"})
"""Suffixes of a prose document: a README or a report that may quote a tool's result."""

_FENCE = re.compile(r"^\s*(?:```|~~~)\s*([A-Za-z0-9_+-]*)", re.MULTILINE)


def document_refusal(text: str) -> str:
    """Why a Markdown (or reStructuredText) document is no result file, with how many fenced
    code blocks it has and of what language. People's notes on running vllm-ascend quote the
    ``vllm bench serve --save-result`` JSON they got in a ```json block of a ``.md`` file (one
    found by the tool library's index, its repository unnamed there); validate read such a
    file as a CSV and refused it for a missing ``prompt_tokens`` column of the header ``##
    vllm-ascend ...``, its first heading."""
    fences = _FENCE.findall(text)
    opened = fences[::2]  # a fence opens a block, the next one closes it
    json_blocks = sum(1 for lang in opened if lang.lower() in {"json", "jsonl", "json5"})
    quoted = f" ({len(opened)} fenced code block(s), {json_blocks} of them JSON)" if opened else ""
    return (
        f"is a prose document{quoted}, not a result file: save the result it quotes (the "
        "tool's whole file, with its per-request data) as a file of its own and pass that "
        "(docs/recordings.md)"
    )


_OTHER_SEPARATORS = (("\t", "tabs", 2), (";", "semicolons", 3), ("|", "bars", 3))
"""Each separator, its name, and the fields a header needs to be taken for a table parted by
it: a tab parts no sentence, so two columns will do; a semicolon or a bar may stand once in a
line of text."""


_OWN_FILE = "pass the tool's own result file (docs/recordings.md)"


def one_field_refusal(head: bytes) -> str | None:
    """Why a file the generic records format would read as a CSV is no table of it when its
    header line (its first non-blank line, in ``head``) is one field, having no comma, or a
    ``#`` line with one and no header below it (:func:`~kvbudget.workloads.text_files.
    comment_first_line`): a table
    parted by another character, or a line of text (a log's, a report's, what a tool printed),
    of which no column could be mapped. Published reports were told to map one:
    github.com/deepaksatna/llm-serving-benchmark f733349e ``results/vllm/vllm-llama/
    latency.txt`` ("the header has: vLLM Llama-3-8B Latency Results"), github.com/highopes/
    pd-disaggregation-demo 2dc2f876 ``.../near40-ab-2/summary.console.txt`` (a Markdown
    heading). None for a lone column name, a JSON document, a binary file or any other."""
    if b"\0" in head or head.startswith(b"PAR1"):
        return None
    text = head.decode("utf-8", "replace")
    field = next((line.strip() for line in text.splitlines() if line.strip()), "")
    comment = comment_first_line(head) if "," in field else None
    if comment:  # one field is said so below: a comma makes it two odd columns
        shown = comment[:60] + ("..." if len(comment) > 60 else "")
        return f"its first line ({shown!r}) {COMMENT_SAID}: {TEXT_OF_NO_TOOL}; {_OWN_FILE}"
    if not field or "," in field or field[:1] in ("{", "[") or field.isidentifier():
        return None
    for sep, name, fields in _OTHER_SEPARATORS:
        if len(field.split(sep)) >= fields:
            return (
                f"its header's columns are separated by {name}, not commas: the generic "
                "format reads comma-separated files (docs/workloads.md); save it with commas"
            )
    shown = field[:60] + ("..." if len(field) > 60 else "")
    return (
        f"its first line ({shown!r}) is one field, not a header of comma-separated columns "
        "(the generic format needs prompt_tokens and output_tokens, docs/workloads.md): a "
        "text file (a log, a report, what a tool printed) holds no trace or recording; pass "
        "the tool's own result file (docs/recordings.md)"
    )
