"""The prefix prompts of AIPerf's synthetic data, as prefix hashes.

AIPerf 0.13.0's ``--num-prefix-prompts N --prefix-prompt-length L`` (the summary's
``input_config.datasets[].prefix_prompts``: ``pool_size`` N, ``length`` L) draws a pool of N
prompts of L tokens and starts each request's prompt with one of them
(``aiperf/dataset/generator/prompt.py``, ``initialize_prefix_pool``): the server's prefix cache
served a pool prompt after its first prefill. The records keep no prompt; the ``inputs.json``
AIPerf writes in the same artifact directory keeps every request body, by its session
(``data[].session_id``, ``payloads`` one a turn), which a record names
(``metadata.conversation_id``, ``turn_index``): the requests are grouped by the leading text of
their bodies (:func:`kvbudget.results.recorded_inference_perf_prefix.grouped_prefix`).

A multi-turn conversation (``--conversation-turn-mean``) sends each later turn with the
conversation so far: AIPerf's worker keeps a session's ``turn_list`` (``workers/
session_manager.py`` ``UserSession``: each turn appended, and the answer to it, captured live,
``store_response``; a dataset whose turns carry their own history replaces the list with it)
and the chat endpoint renders the whole list as messages. AIPerf 0.13.0's own run
(``multiturn3_delay300_concurrency2``, 32-token user messages) shows it: a conversation's
prompts of 48, 127 and 197 tokens (the server's count), each the one before, its answer and
32 new tokens. :func:`aiperf_history` shares each turn's prompt blocks with the turn before,
as GuideLLM's (:func:`kvbudget.results.recorded_guidellm_turns.conversation_prefix`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kvbudget.results.recorded_fields import dig, load_json
from kvbudget.results.recorded_guidellm_prefix import SharedPrefix, body_key
from kvbudget.results.recorded_guidellm_turns import (
    Turn,
    conversation_prefix,
    turn_links,
    turn_of,
    workload_conversations,
)
from kvbudget.results.recorded_inference_perf_prefix import grouped_prefix
from kvbudget.workloads.closed_loop import Conversations
from kvbudget.workloads.errors import TraceError

INPUTS_NAME = "inputs.json"


def _pool(summary: Mapping[str, Any]) -> tuple[int, int, str] | None:
    """The prefix the data gave the prompts: how many distinct, their tokens and what to call
    them; None where it gave none. A ``prefix_prompts`` pool (``pool_size``, ``length``), or a
    system prompt every request shares (``shared_system_length``: ``--shared-system-prompt-length``),
    which only a chat endpoint sends (0.13.0 ``endpoints/openai_chat.py`` merges the
    conversation's ``system_message`` into the messages; the completions endpoint drops it)."""
    datasets = dig(summary, "input_config", "datasets")
    chat = dig(summary, "input_config", "endpoint", "type") == "chat"
    for data in datasets if isinstance(datasets, list) else []:
        pool = data.get("prefix_prompts") if isinstance(data, Mapping) else None
        if not isinstance(pool, Mapping):
            continue
        size, length = _whole(pool.get("pool_size")), _whole(pool.get("length"))
        system = _whole(pool.get("shared_system_length"))
        if system and chat:
            return 1, system, (f"one system prompt of {system} tokens, the same for every "
                               f"request (AIPerf --shared-system-prompt-length {system})")
        if size and length:
            return size, length, (f"one of {size} prefix prompts of {length} tokens (AIPerf "
                                  f"--num-prefix-prompts {size} --prefix-prompt-length {length})")
    return None


def _whole(value: Any) -> int:
    """A positive whole number, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _bodies(path: Path) -> dict[tuple[str, int], Mapping[str, Any]] | None:
    """``inputs.json`` beside the records: each request body by (session, turn); None when
    there is none or it is not AIPerf's."""
    inputs = path.parent / INPUTS_NAME
    if not inputs.is_file():
        return None
    try:
        sessions = dig(load_json(inputs), "data")
    except TraceError:
        return None
    bodies: dict[tuple[str, int], Mapping[str, Any]] = {}
    for session in sessions if isinstance(sessions, list) else []:
        sid = session.get("session_id") if isinstance(session, Mapping) else None
        payloads = session.get("payloads") if isinstance(session, Mapping) else None
        if isinstance(sid, str) and isinstance(payloads, list):
            bodies.update({(sid, k): p for k, p in enumerate(payloads) if isinstance(p, Mapping)})
    return bodies or None


def aiperf_max_tokens(path: Path, records: list[tuple[int, Any]]) -> list[float] | None:
    """Each record's ``max_tokens`` as its body in ``inputs.json`` sent it (NaN where the body
    is not found or sets none); None where no body sets one. AIPerf 0.13.0 writes the turn's
    ``max_tokens`` (drawn from ``--osl``, ``dataset/composer/base.py`` ``_set_max_tokens``) as
    ``max_tokens`` in a completions body (``endpoints/openai_completions.py``) and as
    ``max_completion_tokens`` in a chat body (``endpoints/openai_chat.py``, ``max_tokens`` with
    ``use_legacy_max_tokens``), ``--extra-inputs`` merged after; a chat body with both is read
    as vLLM serves it, ``max_completion_tokens`` first."""
    bodies = _bodies(path)
    if bodies is None:
        return None
    out: list[float] = []
    for _, rec in records:
        meta = rec.get("metadata") if isinstance(rec, Mapping) else None
        sid = meta.get("conversation_id") if isinstance(meta, Mapping) else None
        turn = meta.get("turn_index", 0) if isinstance(meta, Mapping) else None
        body = bodies.get((sid, turn)) if isinstance(sid, str) and isinstance(turn, int) else None
        mt = None if body is None else body.get("max_completion_tokens", body.get("max_tokens"))
        out.append(float(mt) if isinstance(mt, int) and not isinstance(mt, bool) and mt >= 1
                   else float("nan"))
    return out if any(v == v for v in out) else None


def _trace_dataset(summary: Mapping[str, Any]) -> str | None:
    """The Mooncake trace the run's prompts were built from (``input_config.datasets[]`` of
    ``format`` ``mooncake_trace``, AIPerf 0.10.0's summary of ``--input-file T
    --custom-dataset-type mooncake_trace``: github.com/anud18/qwen36-vllm-aiperf-benchmark
    ``results/nvfp4/cf_llama31_agent/agent_flat/c1/profile_export_aiperf.json`` at f5ecc84c),
    by its path; None for other data."""
    datasets = dig(summary, "input_config", "datasets")
    for data in datasets if isinstance(datasets, list) else []:
        if isinstance(data, Mapping) and "mooncake_trace" in (data.get("format"),
                                                              data.get("custom_dataset_type")):
            where = data.get("path")
            return where if isinstance(where, str) and where else "its input file"
    return None


def aiperf_prefix(path: Path, summary: Mapping[str, Any], records: list[tuple[int, Any]],
                  prompt_tokens: Sequence[float]) -> SharedPrefix | None:
    """The pool prompts each record's prompt began with, as prefix hashes; None where the run
    drew no prefix pool. A run whose prompts came from a Mooncake trace gets a note: AIPerf
    builds each prompt from the entry's ``hash_ids`` (ai-dynamo/aiperf
    ``aiperf/dataset/generator/prompt.py``: one block of corpus tokens per id, cached, so the
    same id is the same text), so entries sharing leading ids shared a prefix in the server's
    cache; neither the records nor the summary keep the ids, so it is not simulated."""
    trace = _trace_dataset(summary)
    if trace is not None:
        return SharedPrefix(None, None, (
            f"prompts built from the Mooncake trace {trace} (AIPerf makes each hash_ids block "
            "one text, so entries sharing leading hash_ids shared a prefix the server could "
            "cache); the records keep no hash_ids: not simulated, every prompt is its own, so "
            f"the simulated TTFT is too high where they shared one (kvbudget simulate --trace "
            f"{trace} --format mooncake simulates the trace's prefixes, at its own timestamps, "
            "not this run's load)"))
    pool = _pool(summary)
    if pool is None:
        return None
    size, length, said = pool
    bodies = _bodies(path)
    if bodies is None:
        return SharedPrefix(None, None, f"prompts began with {said}; the records keep no prompt "
                            f"and no {INPUTS_NAME} is beside them: not simulated, every prompt "
                            "is its own, so the simulated TTFT is too high")
    keys: list[str | None] = []
    for _, rec in records:
        meta = rec.get("metadata") if isinstance(rec, Mapping) else None
        sid = meta.get("conversation_id") if isinstance(meta, Mapping) else None
        turn = meta.get("turn_index", 0) if isinstance(meta, Mapping) else None
        body = bodies.get((sid, turn)) if isinstance(sid, str) and isinstance(turn, int) else None
        keys.append(None if body is None else body_key(body))
    return grouped_prefix(keys, prompt_tokens, length, size, said)


AIPERF_TURNS = ("metadata.x_correlation_id, turn_index",
                "a later turn is sent by the user holding its conversation (AIPerf's session "
                "slot) the gap the recording shows after the turn before it ended (AIPerf's "
                "turn delay and its own lag), and not before its recorded send where a rate "
                "or trace timed the sends")
"""How AIPerf's records name a request's turn, and how its turns are replayed."""


def _record_turn(rec: Any) -> Turn:
    """A record's session (``x_correlation_id``: one a conversation as sent, where the
    dataset's ``conversation_id`` recurs when a run sends a conversation again) and turn."""
    meta = rec.get("metadata") if isinstance(rec, Mapping) else None
    if not isinstance(meta, Mapping):
        return None
    return turn_of(meta.get("x_correlation_id"), meta.get("turn_index"))


def aiperf_conversations(records: list[tuple[int, Any]], sent_s: Sequence[float],
                         e2e_s: Sequence[float], rows: Sequence[int]) -> Conversations | None:
    """The workload's turns of conversations (``rows``: each workload row's record): a later
    turn waits for the turn before it to end and then the gap recorded between that end and
    its own send (``sent_s``, ``e2e_s`` by record, seconds; 0 where the turn before has no
    E2E). Each user holds its conversation (``Conversations.held``): AIPerf 0.13.0's session
    slot is taken at a first turn (``credit/issuer.py``) and released at the last
    (``credit/callback_handler.py``)."""
    previous = turn_links([_record_turn(rec) for _, rec in records])
    delay = [max(0.0, sent_s[i] - sent_s[p] - e2e_s[p]) if p >= 0 and e2e_s[p] == e2e_s[p]
             else 0.0 for i, p in enumerate(previous)]
    return workload_conversations(previous, delay, rows, held=True)


def aiperf_history(records: list[tuple[int, Any]],
                   prompt_tokens: Sequence[float]) -> SharedPrefix | None:
    """Each later turn's history as prefix hashes, said in a note; None without later turns."""
    return conversation_prefix([_record_turn(rec) for _, rec in records], prompt_tokens,
                               AIPERF_TURNS)
