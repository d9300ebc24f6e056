"""The per-request CSV of LMCache's multi-round QA benchmark and its kin.

``benchmarks/multi-round-qa/multi-round-qa.py`` (LMCache/LMCache; vllm-project/production-stack
at 0a330da, the same file) writes, at ``--output summary.csv``, one row a completed request:
``prompt_tokens``, ``generation_tokens`` (the server's streamed ``usage``), ``ttft`` and
``generation_time`` in seconds, ``user_id``, ``question_id`` (``UserSession.summary``: the
user's requests numbered 1, 2, ... in the order they finished) and ``launch_time`` /
``finish_time`` (``time.time()``). LMBench's workloads (LMCache/LMBench at 18fe892,
``3-workloads/sharegpt/workload_execution/sharegpt-qa.py``, ``random/random-qa.py``) write the
same columns without the user and question.

The load (``UserSession.step``): users join one every ``gap_between_users`` seconds; each sends
its next question when ``num_users / qps`` seconds have passed since its last send *and* its
last answer came, with the whole conversation so far (``ChatHistory``) after a system prompt
that begins alike for every user. A request that raised is not written. So the file holds
every send time, TTFT and end (``finish_time - launch_time``), but not ``max_tokens``
(``answer_len``, or a ShareGPT answer's length) nor whether it bound.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from kvbudget.results.recorded_fields import (
    MAX_FILE_BYTES,
    MAX_MEASURED_S,
    finish_columns,
    max_tokens_note,
)
from kvbudget.results.recorded_guidellm_prefix import KV_BLOCK_TOKENS, SharedPrefix
from kvbudget.results.recorded_guidellm_turns import (
    Turn,
    conversation_prefix,
    turn_links,
    workload_conversations,
)
from kvbudget.results.recording import RecordedStage, Recording, build_recording
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.max_output import MaxOutputRule
from kvbudget.workloads.text_files import read_text

TOOL = "multi-round-qa"
COLUMNS = ("prompt_tokens", "generation_tokens", "ttft", "generation_time", "launch_time",
           "finish_time")
"""The columns every such file has (``pd.DataFrame`` of ``Response`` fields)."""

SYSTEM_PROMPT_TOKENS = 1000
"""The length of the system prompt every user's first question begins with
(``--shared-system-prompt``) assumed where the CSV does not say it (it never does): the value
of both commands of the benchmark's README (vllm-project/production-stack a6c01db,
``benchmarks/multi-round-qa/README.md``: ``--shared-system-prompt 1000 --user-history-prompt
2000``), at most the shortest prompt less one token."""


def is_multi_round_qa(header: list[str]) -> bool:
    """A CSV header of such a file (pandas may add an unnamed index column)."""
    return set(COLUMNS) <= set(header)


def _rows(path: Path) -> tuple[list[str], list[list[str]]]:
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise TraceError(path, f"is over {MAX_FILE_BYTES >> 30} GiB: too large for a "
                             "recording")
        text = read_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceError(path, f"cannot be read ({exc})") from None
    rows = [row for row in csv.reader(io.StringIO(text)) if row]
    if len(rows) < 2:
        raise TraceError(path, "lists no request (a header and no rows)")
    return [h.strip() for h in rows[0]], rows[1:]


def _cell(path: Path, text: str, line: int, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(path, f"not a number: {text[:40]!r}", line=line, field=name) from None
    if not math.isfinite(value):
        raise TraceError(path, f"not finite: {text}", line=line, field=name)
    return value


def _turn(user: float, question: float) -> Turn:
    if math.isnan(user) or math.isnan(question) or question < 1:
        return None
    return f"{user:g}", int(question) - 1


def read_multi_round_qa(path: Path, default_tier: str,
                        max_output_rule: MaxOutputRule | None = None) -> Recording:
    """Read a multi-round QA (or LMBench workload) ``summary.csv``."""
    header, rows = _rows(path)
    col = {name: header.index(name) for name in header}
    values = np.full((len(rows), 8), np.nan)
    for i, row in enumerate(rows):
        for j, name in enumerate((*COLUMNS, "user_id", "question_id")):
            if name in col and col[name] < len(row) and row[col[name]].strip():
                values[i, j] = _cell(path, row[col[name]].strip(), i + 2, name)
    prompt, output, ttft, _, start, end, user, question = values.T
    for j, name in ((0, "prompt_tokens"), (4, "launch_time")):
        if np.isnan(values[:, j]).any():
            raise TraceError(path, "missing", line=int(np.argmax(np.isnan(values[:, j]))) + 2,
                             field=name)
    e2e = end - start
    for name, measured in (("ttft", ttft), ("finish_time", e2e)):
        bad = np.isfinite(measured) & ((measured < 0) | (measured > MAX_MEASURED_S))
        if bad.any():
            i = int(np.argmax(bad))
            raise TraceError(path, f"{'negative' if measured[i] < 0 else 'implausible'} time "
                             f"from launch_time: {measured[i]:g} s", line=i + 2, field=name)
    late = np.isfinite(ttft) & np.isfinite(e2e) & (e2e < ttft - 1e-6)
    if late.any():
        i = int(np.argmax(late))
        raise TraceError(path, f"the request ends ({e2e[i]:g} s) before its first token "
                         f"({ttft[i]:g} s)", line=i + 2, field="finish_time")
    turns = [_turn(u, q) for u, q in zip(user, question, strict=True)]
    previous = turn_links(turns)
    history = conversation_prefix(turns, prompt.tolist(), (
        "user_id, question_id", "a later question is sent no sooner than its recorded send "
        "nor than the user's question before it ended plus the gap recorded between them"))
    history, said_system = _with_system_prompt(history, turns, prompt.tolist())
    workload, counts, warnings = finish_columns(
        path, TOOL, prompt=prompt, output=np.nan_to_num(output), arrival=start - start.min(),
        fields={"prompt_tokens": "prompt_tokens", "output_tokens": "generation_tokens",
                "arrival_s": "launch_time", "max_output_tokens": "max_tokens"},
        default_tier=default_tier, max_output_rule=max_output_rule, completion_order=True,
        prefix=None if history is None else history.hashes,
        prefix_block_tokens=None if history is None else history.block_tokens)
    order = workload.request_id
    notes = [_load_note(len(order), "user_id" in col), max_tokens_note(None, max_output_rule)]
    if history is not None:
        notes.append(history.note)
    if said_system:
        notes.append(said_system)
    stage = RecordedStage("", "unknown")
    return build_recording(path, TOOL, workload, ttft=ttft[order], e2e=e2e[order],
                           status=["completed"] * len(order), stage=[""] * len(order),
                           itl_mean=None, config={}, counts=counts, notes=[*notes, *warnings],
                           stages=(stage,), sent_s=(start - start.min())[order], tool=TOOL,
                           conversations=workload_conversations(
                               previous, [max(0.0, start[i] - end[p]) if p >= 0 and end[p] == end[p]
                                          else 0.0 for i, p in enumerate(previous)],
                               order.tolist()))


def _with_system_prompt(history: SharedPrefix | None, turns: list[Turn],
                        prompt: list[float]) -> tuple[SharedPrefix | None, str | None]:
    """The users' prefix hashes with the system prompt all of them begin alike shared across
    users (its whole KV blocks get the same hashes in every user's requests, each user's own
    history after it), and the note saying what was assumed of its length; ``history`` (each
    user's conversation, :func:`conversation_prefix`) unchanged without users. The benchmark
    puts ``"Hi, here's some system prompt: " + "hi" * system_prompt_len + "."`` before the
    user's own context in its first question (``UserSession._build_system_prompt``), so a
    request's prompt begins with it whatever its turn."""
    users = [i for i, t in enumerate(turns) if t is not None]
    if not users:
        return history, None
    shared = max(0, min(SYSTEM_PROMPT_TOKENS, int(min(prompt[i] for i in users)) - 1))
    blocks = shared // KV_BLOCK_TOKENS
    said = (f"the system prompt every user's first question begins with "
            "(--shared-system-prompt; UserSession._build_system_prompt) is the same for all "
            f"users, but its length is not in the CSV: {shared} tokens assumed (the "
            f"benchmark README's --shared-system-prompt {SYSTEM_PROMPT_TOKENS}, at most the "
            "shortest prompt less one), ")
    if blocks == 0:
        return history, said + "less than one KV block: nothing shared across users"
    flat, offsets = history.hashes if history is not None and history.hashes is not None \
        else (np.zeros(0, dtype=np.int64), np.zeros(len(prompt) + 1, dtype=np.int64))
    common = list(range(int(flat.max(initial=0)) + 1, int(flat.max(initial=0)) + 1 + blocks))
    out: list[int] = []
    bounds = [0]
    for i, tokens in enumerate(prompt):
        own = flat[offsets[i]:offsets[i + 1]].tolist()
        if turns[i] is not None:
            k = min(blocks, int(tokens) // KV_BLOCK_TOKENS)
            own = common[:k] + own[k:]
        out.extend(own)
        bounds.append(len(out))
    said += (f"its whole {blocks} {KV_BLOCK_TOKENS}-token KV blocks shared by every user's "
             "requests in the prefix cache (a run with a shorter system prompt shared less, "
             "its simulated TTFTs then too low; a longer one more)")
    return SharedPrefix((np.array(out, dtype=np.int64), np.array(bounds, dtype=np.int64)),
                        KV_BLOCK_TOKENS, history.note if history is not None else said), said


def _load_note(n: int, has_users: bool) -> str:
    if has_users:
        return (f"LMCache's multi-round QA summary (benchmarks/multi-round-qa, also vLLM "
                f"production-stack's): {n} completed requests, replayed at their recorded "
                "sends; each user sent its next question only after its last answer came "
                "(UserSession.step), and so does the replay; requests that raised are not in "
                "the file")
    return (f"an LMBench workload's per-request CSV (3-workloads/sharegpt/workload_execution/"
            f"sharegpt-qa.py and its kin: no user_id / question_id): {n} completed requests, "
            "replayed at their recorded sends (sharegpt-qa sends one every 1/qps seconds "
            "whatever the answers; its max_tokens, min(256, the dataset's output length), is "
            "not in the file); requests that raised are not in the file; the conversation "
            "history a later turn carried is not said, so it is not shared and its simulated "
            "TTFT is too high")
