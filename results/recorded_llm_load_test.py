"""llm-load-test's result file: ``output/output-{concurrency:03d}.json``.

What the file holds (github.com/openshift-psap/llm-load-test at b27aad1,
``src/llm_load_test/utils.py`` ``write_output``): ``results``, one ``RequestResult.asdict()``
a request (``src/llm_load_test/result.py``: ``user_id``, ``input_tokens``, ``output_tokens``,
``output_tokens_before_timeout``, ``start_time``, ``ack_time``, ``first_token_time`` and
``end_time`` in seconds of ``time.time()``, ``ttft`` / ``response_time`` in milliseconds,
``error_code``, ``error_text``), ``config`` (the run's YAML, ``load_options.concurrency`` set
to the run's number of users, ``load_options.duration``, ``plugin_options.model_name``) and
``summary`` (aggregates; since d503eba, Feb 2024, also ``total_requests``, ``len(results)``
as written, and ``total_failures``, the results with an ``error_text``: b27aad1
``src/llm_load_test/utils.py:124-142`` and ``:227-231``; :func:`_refuse_fewer_rows` compares
the first with the rows). Its first layout and its v2 draft (both before d503eba) wrote no
count beside ``results``: the draft's ``config`` and ``results`` only (its published
``output/output.json`` at 262e682), the first layout ``{"results": ..., "config": ...}``
(64f000d ``utils.py`` ``write_output``), so a copy of theirs with a request cut reads as a
smaller run and cannot be told from the file.

The load (``src/llm_load_test/load_test.py`` and ``user.py``): ``concurrency`` user processes,
each sending its next request as soon as its last returned (``User.run_user_process``), until
``duration`` seconds have passed; a closed loop stopped by a time limit. The requests in flight
at the limit run to their end (``output_tokens_before_timeout`` counts the tokens received
before it). Results are gathered user by user, so the file is not in send order. The OpenAI
plugin sends ``max_tokens`` and ``min_tokens`` both at the dataset's output length
(``plugins/openai_plugin.py``), so a request's realised output is what it asked for.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.results.recorded_fields import (
    MAX_MEASURED_S,
    dig,
    fewer_rows,
    finish_columns,
    load_json,
    max_tokens_note,
    number,
    time_limit_note,
)
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule

TOOL = "llm-load-test"


def is_llm_load_test(doc: Mapping[str, Any]) -> bool:
    """llm-load-test's output: ``results`` of ``RequestResult`` objects beside ``config``
    (its first layout, 64f000d to 36eb1ca, Jan-Feb 2024: ``start``, ``end``, ``worker_id`` and
    ``ttft`` in ms, ``plugins/plugin.py`` ``_calculate_results_stream``; its v2 draft before
    that, 262e682 to cf9b7b5, Dec 2023 - Jan 2024, the same with ``TTFT``, ``TT_ack`` and
    ``TPOT``, ``plugins/caikit_client_plugin.py`` then ``plugins/plugin.py``
    ``calculate_results``)."""
    results = doc.get("results")
    first = results[0] if isinstance(results, list) and results else None
    if not isinstance(first, Mapping) or "config" not in doc:
        return False
    keys = set(first)
    return (
        {"user_id", "start_time", "end_time"} <= keys
        and ("first_token_time" in keys or "output_tokens_before_timeout" in keys)
    ) or {"worker_id", "start", "end", "input_tokens"} <= keys


def _one(path: Path, i: int, req: Any) -> tuple[float, float, float, float, float, str]:
    """prompt, output, start, ttft, e2e, status of ``results[i]``."""
    where = f"results[{i}]"
    if not isinstance(req, dict):
        raise TraceError(path, "must be an object", field=where)
    first_layout = "start_time" not in req and "start" in req
    key0, key1 = ("start", "end") if first_layout else ("start_time", "end_time")
    t0 = number(req.get(key0), path, f"{where}.{key0}")
    if math.isnan(t0):
        raise TraceError(path, "missing", field=f"{where}.{key0}")
    t1 = number(req.get(key1), path, f"{where}.{key1}")
    p = number(req.get("input_tokens"), path, f"{where}.input_tokens")
    o = number(req.get("output_tokens"), path, f"{where}.output_tokens")
    # its draft (262e682 to cf9b7b5, Dec 2023 - Jan 2024) wrote ``TTFT``, then ``ttft``
    ttft_key = "TTFT" if first_layout and "ttft" not in req and "TTFT" in req else "ttft"
    if first_layout:  # its TTFT in ms from the send
        ttft = number(req.get(ttft_key), path, f"{where}.{ttft_key}") / 1000.0
    else:
        ttft = number(req.get("first_token_time"), path, f"{where}.first_token_time") - t0
    e2e = t1 - t0
    for name, value in ((ttft_key if first_layout else "first_token_time", ttft), (key1, e2e)):
        if not math.isnan(value) and not 0 <= value <= MAX_MEASURED_S:
            raise TraceError(
                path,
                f"{'negative' if value < 0 else 'implausible'} time from {key0}: {value:g} s",
                field=f"{where}.{name}",
            )
    if not math.isnan(ttft) and not math.isnan(e2e) and e2e < ttft - 1e-9:
        raise TraceError(
            path,
            f"the request ends ({e2e:g} s) before its first token ({ttft:g} s)",
            field=f"{where}.{key1}",
        )
    code, text = req.get("error_code"), req.get("error_text")
    status = (
        "completed"
        if code is None and not text
        else f"error ({code})"
        if code is not None
        else "error"
    )
    return p, 0.0 if math.isnan(o) else o, t0, ttft, e2e, status


def _refuse_fewer_rows(path: Path, doc: Mapping[str, Any], n: int) -> None:
    """Refuse a file with fewer ``results`` than its ``summary.total_requests``, which
    llm-load-test sets to their number as it writes them (b27aad1 ``src/llm_load_test/
    utils.py:142`` ``req_count = len(df)``, the frame of ``results_list``, ``:227``; since
    d503eba): a copy with a request cut otherwise reads as a smaller run."""
    total = dig(doc, "summary", "total_requests")
    if isinstance(total, int) and not isinstance(total, bool) and total > n:
        raise TraceError(
            path,
            fewer_rows(
                f"results holds {n} requests, but the file's own summary.total_requests says "
                f"{total} were sent",
                f"summary.total_requests is set to {n}",
            ),
            field="summary.total_requests",
        )


def _stage(path: Path, doc: Mapping[str, Any], notes: list[str]) -> RecordedStage:
    """A closed loop of ``load_options.concurrency`` users (one run a file)."""
    users = dig(doc, "config", "load_options", "concurrency")
    if isinstance(users, int) and not isinstance(users, bool) and users >= 1:
        return RecordedStage(f"concurrency {users}", "closed", None, users)
    notes.append(
        "config.load_options.concurrency names no one number of users: load mode "
        "unknown, replayed at the recorded sends"
    )
    if users is not None and not isinstance(users, list):
        raise TraceError(
            path,
            f"must be a whole number >= 1, got {users!r}",
            field="config.load_options.concurrency",
        )
    return RecordedStage("", "unknown", None, None)


def _config(doc: Mapping[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {}
    model = dig(doc, "config", "plugin_options", "model_name")
    if isinstance(model, str) and model:
        config["model"] = model
    host = dig(doc, "config", "plugin_options", "host")
    if isinstance(host, str) and host:
        config["target"] = host
    plugin = dig(doc, "config", "plugin")
    if isinstance(plugin, str):
        config["plugin"] = plugin
    return config


def _streamed(path: Path, doc: Mapping[str, Any], ttft: np.ndarray) -> None:
    """Refuse a run made with ``plugin_options.streaming: false``: its plugins time only the
    whole answer (``request_http`` sets no ``first_token_time``; the first layout's
    ``_calculate_results`` writes no ``ttft``), so no request has a TTFT to compare."""
    if dig(doc, "config", "plugin_options", "streaming") is False and np.isnan(ttft).all():
        raise TraceError(
            path,
            "the run did not stream (llm-load-test's plugin_options.streaming: false): its "
            "requests hold the whole answer's time, no first token's; kvbudget compares "
            "streamed TTFT, TPOT and E2E: record a streamed run (plugin_options.streaming: "
            "true)",
            field="config.plugin_options.streaming",
        )


def read_llm_load_test(
    path: Path, default_tier: str, max_output_rule: MaxOutputRule | None = None
) -> Recording:
    """Read llm-load-test's ``output.json``."""
    doc = load_json(path)
    results = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or not isinstance(results, list) or not results:
        raise TraceError(
            path,
            "must hold a non-empty list of requests (llm-load-test's output.json)",
            field="results",
        )
    rows = [_one(path, i, req) for i, req in enumerate(results)]
    _refuse_fewer_rows(path, doc, len(rows))
    _streamed(path, doc, np.array([r[3] for r in rows]))
    prompt = np.array([r[0] for r in rows])
    if np.isnan(prompt).any():
        raise TraceError(
            path, "missing", field=f"results[{int(np.argmax(np.isnan(prompt)))}].input_tokens"
        )
    start = np.array([r[2] for r in rows], dtype=np.float64)
    notes: list[str] = []
    stage = _stage(path, doc, notes)
    workload, counts, warnings = finish_columns(
        path,
        "llm-load-test",
        prompt=prompt,
        output=np.array([r[1] for r in rows]),
        arrival=start - float(start.min()),
        fields={
            "prompt_tokens": "input_tokens",
            "output_tokens": "output_tokens",
            "arrival_s": "start_time",
            "max_output_tokens": "max_tokens",
        },
        default_tier=default_tier,
        max_output_rule=max_output_rule,
        # gathered user by user (load_test.py gather_results), not in send order
        completion_order=True,
    )
    order = workload.request_id
    status = [rows[r][5] for r in order.tolist()]
    counts["num_failed"] = sum(s.startswith("error") for s in status)
    notes.append(max_tokens_note(None, max_output_rule))
    if _config(doc).get("plugin") == "openai_plugin":
        notes.append(
            "llm-load-test's OpenAI plugin asked for max_tokens = min_tokens = the "
            "dataset's output length, so each realised output is what was asked"
        )
    seconds = dig(doc, "config", "load_options", "duration")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
        said = time_limit_note(
            stage.label,
            stage.load,
            float(seconds),
            "llm-load-test load_options.duration",
            len(order),
        )
        if said:
            notes.append(said)
    ttft = np.array([r[3] for r in rows])
    e2e = np.array([r[4] for r in rows])
    return build_recording(
        path,
        "llm-load-test",
        workload,
        ttft=ttft[order],
        e2e=e2e[order],
        status=status,
        stage=[stage.label] * len(order),
        itl_mean=None,
        config=_config(doc),
        counts=counts,
        notes=[*notes, *warnings],
        stages=(stage,),
        sent_s=start[order] - float(start.min()),
        tool=TOOL,
    )
