"""What a load tool's file says of the server's refusals for the model's context.

AIPerf (``error.message``), inference-perf (``error.error_msg``) and SGLang's ``bench_serving``
(``errors``: "Bad Request: " and the body) keep the server's own error text per request; it is read with the one table of every engine's words,
:data:`kvbudget.results.records.CONTEXT_REFUSALS`. A refused request generated nothing, so it
is dropped like every request without output, never simulated: the simulation's own context
rules decide what it refuses. The note says how many the server refused, for which reason, in
which engine's words, and, where that engine refuses what vLLM (the default simulated engine)
serves cut, which ``--set engine.name=...`` simulates its rules: the two are not silently
compared. (``vllm bench serve`` saves the HTTP reason phrase only, "Bad Request": vLLM 0.32.0
``benchmarks/lib/endpoint_request_func.py``, ``output.error = response.reason``.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from kvbudget.results.records import ENGINE_NAMES, REFUSING, context_refusal_of

SIMULATED_AS: dict[str, str] = {"sglang": "sglang", "tgi": "tgi", "trtllm": "trtllm"}
"""The simulated engine whose context rules are an engine's (``--set engine.name=``)."""


def _tally(errors: Iterable[str]) -> tuple[Counter[str], Counter[str], set[str]]:
    """The context refusals among ``errors``: by reason, by engine, and the engines among them
    that refuse a prompt + ``max_tokens`` over the context and have a simulated preset."""
    reasons: Counter[str] = Counter()
    engines: Counter[str] = Counter()
    refusing: set[str] = set()
    for text in errors:
        found = context_refusal_of(text) if text else None
        if found is None:
            continue
        entry, reason = found
        reasons[reason] += 1
        engines[entry.engine] += 1
        if entry.rule == REFUSING and entry.engine in SIMULATED_AS:
            refusing.add(entry.engine)
    return reasons, engines, refusing


def _rules(refusing: set[str], server: str | None) -> str:
    return "".join(f"; {ENGINE_NAMES[engine]} refuses a prompt + max_tokens over the context, "
                   "which vLLM serves with its output cut: "
                   + (f"the command line simulates the recording's server by its rules "
                      f"(engine {SIMULATED_AS[engine]}) unless --engine or --set engine.name "
                      "chooses another" if engine == server else
                      f"--set engine.name={SIMULATED_AS[engine]} simulates its rules")
                   for engine in sorted(refusing))


def _server(engines: Counter[str]) -> str | None:
    """The simulated engine of the server whose words every context refusal was in, where
    that is one engine kvbudget simulates other than vLLM (:data:`SIMULATED_AS`): its error
    texts tell which server it was, as ``server_info`` does (the table's words are each one
    engine's)."""
    return SIMULATED_AS.get(next(iter(engines))) if len(engines) == 1 else None


def context_refusal_note(errors: Iterable[str]) -> tuple[int, str | None]:
    """How many of the recorded error texts ``errors`` are refusals for the model's context,
    and the note that says them (None when none is)."""
    total, note, _ = context_refusals(errors)
    return total, note


def context_refusals(errors: Iterable[str]) -> tuple[int, str | None, str | None]:
    """:func:`context_refusal_note`, and the simulated engine of the server whose words they
    all were (:func:`_server`; a recording's ``server_engine``), or None."""
    reasons, engines, refusing = _tally(errors)
    total = sum(reasons.values())
    if not total:
        return 0, None, None
    server = _server(engines)
    words = ", ".join(ENGINE_NAMES.get(e, e) for e in sorted(engines))
    return total, (f"{total} requests refused by the server for the model's context ("
                   + ", ".join(f"{n} {r}" for r, n in sorted(reasons.items()))
                   + f"; in {words}'s words): no output, so not simulated; the simulated "
                   "engine's own context rules decide what it refuses"
                   + _rules(refusing, server)), server


def say_context_refusals(errors: Iterable[str], counts: dict[str, int], notes: list[str],
                         config: dict[str, object]) -> None:
    """A load tool reader's refusals for the model's context (:func:`context_refusals`):
    counted (``num_refused_context``), noted, and the server's engine they tell kept as the
    recording's ``server_engine`` where the file told none."""
    refused, said, server = context_refusals(errors)
    if said:
        counts["num_refused_context"] = refused
        notes.append(said)
    if server is not None:
        config.setdefault("server_engine", server)


def engine_rules_said(errors: Iterable[str]) -> str | None:
    """The line a live run's summary says (``assumed``) when its server refused requests for
    the model's context in the words of an engine whose rules are not vLLM's (``errors``:
    the rows' error texts), else None: the replay sends by vLLM's rules and ``validate
    --url`` simulates them."""
    _, engines, refusing = _tally(errors)
    if not refusing:
        return None
    num = sum(engines[e] for e in refusing)
    names = ", ".join(ENGINE_NAMES[e] for e in sorted(refusing))
    flags = " or ".join(f"--set engine.name={SIMULATED_AS[e]}" for e in sorted(refusing))
    return (f"the server refused {num} requests for the model's context in {names}'s words: "
            f"{names} refuses a prompt + max_tokens over the context, which vLLM, whose rules "
            "the replay sends by and validate --url simulates, serves with its output cut; "
            f"validate --records on this run with {flags} simulates its rules")
