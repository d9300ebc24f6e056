"""The history a GuideLLM multi-turn run sends with each later turn, as prefix hashes.

GuideLLM 0.6+ runs a data row of several turns (synthetic ``turns``, or a multi-turn dataset)
as one conversation: ``scheduler/worker_group.py`` (``requests_generator``) gives its turns
one ``conversation_id`` and their ``turn_index`` (``RequestInfo``, ``schemas/info.py``), and a
worker sends a turn only when the turn before it ended (``scheduler/worker.py``: the rest of
the conversation is requeued with its history). Each later turn carries the conversation so
far ahead of its own message (v0.7.3 ``backends/openai/request_handlers.py``: a text
completion joins the earlier prompts and responses before its prompt; a chat request lists
them as messages before its user message), so its prompt begins with the turn before's
prompt: the server's prefix cache serves that part. A published report (GuideLLM 0.7.3,
synthetic ``turns: 8`` of 2,048 prompt and 512 output tokens, chat completions) lists prompts
of 2,061, 4,615, 7,184 ... 20,032 tokens in one conversation: simulated each as its own, the
eighth prefilled 20,032 tokens where the server computed about 2,600.

:func:`conversation_prefix` gives each turn of a conversation of several turns the hashes of
its prompt's whole KV blocks, numbered within its conversation, so that a turn shares the
blocks of the prompt before it (the chain of hashes, as vLLM's). The earlier turn's output is
not counted shared: the chat template renders it anew into the next prompt, where its tokens
need not fall on the same block boundaries.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.results.recorded_fields import dig, number
from kvbudget.results.recorded_guidellm_prefix import KV_BLOCK_TOKENS, SharedPrefix
from kvbudget.workloads.closed_loop import MAX_THINK_TIME_S, Conversations
from kvbudget.workloads.errors import TraceError

Turn = tuple[str, int] | None
"""A request's conversation and its index in it; None when the report does not say."""


def conversation_turn(req: Mapping[str, Any]) -> Turn:
    """The request's ``info.conversation_id`` and ``info.turn_index`` (GuideLLM 0.6+)."""
    return turn_of(dig(req, "info", "conversation_id"), dig(req, "info", "turn_index"))


def requeue_delay_s(path: Path, req: Mapping[str, Any], where: str) -> float:
    """The think time GuideLLM waits after this request ends before its conversation's next
    turn may go (``info.settings.requeue_delay``, seconds, 0.8; 0.8.1 ``scheduler/dag.py``
    ``mark_completed``: the child is available ``requeue_delay`` of the completed parent
    after it); 0 when the report gives none (or one of 0 or less: no wait). Refused where it
    is not a number, or longer than a simulated user's think time may be (a day)."""
    field = f"{where}.info.settings.requeue_delay"
    delay = number(dig(req, "info", "settings", "requeue_delay"), path, field)
    if delay > MAX_THINK_TIME_S:
        raise TraceError(path, f"implausibly long: {delay:g} s (over a day; are the times in "
                         "seconds?)", field=field)
    return delay if delay > 0 else 0.0


def turn_links(turns: Sequence[Turn]) -> list[int]:
    """Each request's turn before it in its conversation, as an index into ``turns`` (-1: a
    first turn, or no conversation): the request of the same conversation with the next lower
    turn index (ties in the file's order)."""
    by_conversation: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, turn in enumerate(turns):
        if turn is not None:
            by_conversation[turn[0]].append((turn[1], i))
    previous = [-1] * len(turns)
    for rows in by_conversation.values():
        for (_, before), (_, after) in pairwise(sorted(rows)):
            previous[after] = before
    return previous


def workload_conversations(previous: Sequence[int], delay_s: Sequence[float],
                           rows: Sequence[int], held: bool = False) -> Conversations | None:
    """The conversations of a workload whose row ``j`` is the file's request ``rows[j]``:
    ``previous`` and ``delay_s`` by the file's requests (:func:`turn_links`; each request's
    delay after the turn before it ended). A turn whose turn before it was not simulated, or
    does not come before it in the workload's order (sent no sooner: the tool did not wait
    for it), waits for none. ``held``: each user keeps its conversation
    (``Conversations.held``). None when no row waits."""
    row_of = {r: j for j, r in enumerate(rows)}
    linked = [row_of.get(previous[r], -1) for r in rows]
    linked = [p if p < j else -1 for j, p in enumerate(linked)]
    if all(p < 0 for p in linked):
        return None
    return Conversations(tuple(linked),
                         tuple(float(delay_s[r]) if p >= 0 else 0.0
                               for r, p in zip(rows, linked, strict=True)), held)


def turn_of(conversation: Any, index: Any) -> Turn:
    """A file's conversation id and turn index as a :data:`Turn`: None unless the id is a
    non-empty string and the index a whole number >= 0."""
    if (not isinstance(conversation, str) or not conversation or not isinstance(index, int)
            or isinstance(index, bool) or index < 0):
        return None
    return conversation, index


def _grows(rows: list[tuple[int, int]], prompt_tokens: Sequence[float]) -> bool:
    """Whether each turn's prompt holds the one before it (turns in order, none repeated)."""
    indexes = [turn for turn, _ in rows]
    if len(set(indexes)) < len(indexes):
        return False
    tokens = [prompt_tokens[i] for _, i in rows]
    return all(b >= a for a, b in pairwise(tokens))


GUIDELLM_TURNS = ("info.conversation_id, info.turn_index",
                  "a simulated user sends a conversation's next turn only when the turn before "
                  "it ended (and its requeue_delay passed), before a new conversation, as "
                  "GuideLLM's workers do (an open stage's turn also no sooner than its "
                  "recorded send)")
"""How a GuideLLM report names a request's turn, and how its turns are replayed."""


def conversation_prefix(turns: Sequence[Turn], prompt_tokens: Sequence[float],
                        said: tuple[str, str] = GUIDELLM_TURNS) -> SharedPrefix | None:
    """Prefix hashes of the conversations' history (one hash a ``KV_BLOCK_TOKENS`` block);
    None when no request is a later turn of its conversation. ``said``: the file's fields
    that name the turns, and how the replay sends them (for the note)."""
    by_conversation: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, turn in enumerate(turns):
        if turn is not None:
            by_conversation[turn[0]].append((turn[1], i))
    shared = {c: sorted(rows) for c, rows in by_conversation.items()
              if len(rows) > 1 and max(t for t, _ in rows) > 0}
    if not shared:
        return None
    good = {c: rows for c, rows in shared.items() if _grows(rows, prompt_tokens)}
    first: dict[int, int] = {}  # request -> its conversation's first hash
    base = 1
    for rows in good.values():
        for _, i in rows:
            first[i] = base
        base += int(max(prompt_tokens[i] for _, i in rows)) // KV_BLOCK_TOKENS + 1
    flat: list[int] = []
    offsets = [0]
    for i, tokens in enumerate(prompt_tokens):
        if i in first:
            flat.extend(range(first[i], first[i] + int(tokens) // KV_BLOCK_TOKENS))
        offsets.append(len(flat))
    later = sum(len(rows) - 1 for rows in good.values())
    note = (f"{later} requests are later turns of {len(good)} multi-turn conversations "
            f"({said[0]}), each sent with the conversation so far before its own message: "
            f"simulated with its prompt's whole {KV_BLOCK_TOKENS}-token KV blocks shared with "
            "the turn before, which the prefix cache serves after their first prefill (the "
            "earlier turn's output, rendered anew into the next prompt, is not counted "
            f"shared); {said[1]}")
    if len(good) < len(shared):
        note += (f"; {len(shared) - len(good)} conversations whose prompts do not grow turn by "
                 "turn (no history sent, or turns missing) get none: each turn prefilled whole")
    if not flat:
        return SharedPrefix(None, None, note)
    return SharedPrefix((np.array(flat, dtype=np.int64), np.array(offsets, dtype=np.int64)),
                        KV_BLOCK_TOKENS, note)


def with_history(synthetic: SharedPrefix | None,
                 history: SharedPrefix | None) -> tuple[SharedPrefix | None, list[str]]:
    """The prompt prefixes the server could cache, and their notes: the synthetic data's shared
    prefix, else the conversations' history (:func:`conversation_prefix`); a run with both
    keeps the synthetic prefix's hashes, which name whole prefixes, and says the history is
    not shared."""
    notes = [] if synthetic is None else [synthetic.note]
    if history is None:
        return synthetic, notes
    if synthetic is not None and synthetic.hashes is not None:
        return synthetic, [*notes, "the requests are also turns of multi-turn conversations, "
                           "whose history is not simulated as shared beside the synthetic "
                           "prefix: later turns are prefilled whole, so their simulated TTFT "
                           "is too high"]
    return history, [*notes, history.note]
