"""The shared prompt prefix of GuideLLM's synthetic data (``prefix_tokens``), as prefix hashes.

GuideLLM's synthetic text data (0.4+, ``guidellm/data/deserializers/synthetic.py``,
``SyntheticTextDataArgs``) takes ``prefix_tokens`` and ``prefix_count`` (shorthand for one
``prefix_buckets`` entry) and starts each prompt with one of ``prefix_count`` generated
prefixes of ``prefix_tokens`` tokens (``_create_prefix_iter``: ``rand.choice`` of them): the
text-completions request is ``prefix + " " + prompt`` and the chat request carries the prefix as
its first (system) message (``backends/openai/request_handlers.py``), so requests that shared
a prefix share the leading text of their body. The server's prefix cache served that prefix
once per prefix; a simulation that gives every prompt its own blocks prefills it every time
(a published sweep, inference-sim's ``jan20-codellama-prefill-1``: a 1,024-token prefix in
prompts of about 3,000 tokens, TTFT +30 % at one user for that alone).

:func:`shared_prefix` reads the data settings from the report's ``args.data`` (a dict, its
JSON or Python ``repr``, or ``key=value,...`` text; 0.7+: ``config.spec.data``) and groups the requests by the leading
text of their body: each group is one hash naming the prefix's whole KV blocks.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from kvbudget.results.recorded_fields import dig

KV_BLOCK_TOKENS = 16
"""vLLM's default ``block_size``: the prefix cache shares whole blocks, so a prefix hash names
the prefix's whole 16-token blocks (a prefix of 1,000 tokens shares 992)."""

KEY_CHARS = 64
"""Leading characters of a request body that tell its prefix: GuideLLM's prefixes are
generated text (faker sentences), two of which do not share 64 leading characters. A prefix of
``n`` tokens is told by its first ``min(64, 2 n)`` characters (a token of such text is at least
two characters), so that a short prefix's key holds none of the prompt after it."""


def _parse_item(item: Any) -> Any:
    """One ``--data`` entry as GuideLLM saved it: a dict, JSON, a Python ``repr`` or
    ``key=value,key=value`` text; None when it is none of these (a dataset path)."""
    if isinstance(item, (dict, list)) or not isinstance(item, str) or len(item) > 100_000:
        return item if isinstance(item, (dict, list)) else None
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(item)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            continue
    if "=" not in item:
        return None
    pairs = [part.split("=", 1) for part in item.split(",") if "=" in part]
    out: dict[str, Any] = {}
    for key, value in pairs:
        try:
            out[key.strip()] = json.loads(value.strip())
        except (ValueError, RecursionError):
            out[key.strip()] = value.strip()
    return out


def _configs(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The data settings: ``args.data`` (0.4-0.6: the ``--data`` texts) or
    ``config.spec.data`` (0.7+: each a dict, ``prefix_buckets`` resolved from the shorthand)."""
    args, spec = doc.get("args"), dig(doc, "config", "spec")
    data = args.get("data") if isinstance(args, Mapping) else None
    if data is None and isinstance(spec, Mapping):
        data = spec.get("data")
    items = data if isinstance(data, list) else [data]
    out: list[Mapping[str, Any]] = []
    for item in items:
        parsed = _parse_item(item)
        for one in parsed if isinstance(parsed, list) else [parsed]:
            if isinstance(one, Mapping):
                out.append(one)
    return out


def _positive_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def prefix_lengths(doc: Mapping[str, Any]) -> set[int]:
    """The prefix lengths (tokens) the report's synthetic data settings give its prompts."""
    lengths: set[int] = set()
    for config in _configs(doc):
        buckets = config.get("prefix_buckets")
        if isinstance(buckets, list):
            lengths.update(_positive_int(b.get("prefix_tokens")) for b in buckets
                           if isinstance(b, Mapping) and b.get("bucket_weight", 1) != 0)
        else:
            lengths.add(_positive_int(config.get("prefix_tokens")))
    lengths.discard(0)
    return lengths


def body_key(body: Mapping[str, Any]) -> str | None:
    """The leading text of a request body that holds its prefix: a text completion's
    ``prompt``, else its first chat message (the system message the prefix goes in)."""
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return prompt[:KEY_CHARS]
    messages = body.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], Mapping):
        content = messages[0].get("content")
        text = content if isinstance(content, str) else json.dumps(content, sort_keys=True)
        return text[:KEY_CHARS] if text else None
    return None


IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class SharedPrefix:
    """What :func:`shared_prefix` found: per-request prefix hashes (flat, row offsets; None
    when no request gets one), the prompt tokens each hash names, and the note saying so."""

    hashes: tuple[IntArray, IntArray] | None
    block_tokens: int | None
    note: str


def shared_prefix(doc: Mapping[str, Any], keys: Sequence[str | None],
                  prompt_tokens: Sequence[float]) -> SharedPrefix | None:
    """The shared prefix of the report's synthetic data, as prefix hashes; None when its data
    settings give no prefix. A request whose body was not kept, or whose prompt is shorter than
    the prefix, gets no hash."""
    lengths = prefix_lengths(doc)
    if not lengths:
        return None
    said = f"GuideLLM synthetic data prefix_tokens={'/'.join(map(str, sorted(lengths)))}"
    length = max(lengths)
    block = length - length % KV_BLOCK_TOKENS
    if len(lengths) > 1 or not block:
        why = ("the report does not say which request had which length" if len(lengths) > 1
               else f"shorter than a {KV_BLOCK_TOKENS}-token KV block")
        return SharedPrefix(None, None, f"prompts began with a shared prefix ({said}); {why}: "
                            "not simulated, every prompt is its own, so the simulated TTFT is "
                            "too high")
    return keyed_prefix(keys, prompt_tokens, length, min(KEY_CHARS, 2 * length),
                        f"a {length}-token prefix ({said})", "distinct prefixes")


def keyed_prefix(keys: Sequence[str | None], prompt_tokens: Sequence[float], length: int,
                 chars: int, began: str, distinct: str) -> SharedPrefix:
    """Requests grouped by the first ``chars`` characters of their bodies (``keys``; None: not
    kept) into prefixes of ``length`` tokens, one hash a group naming its whole KV blocks; a
    request whose body was not kept, or whose prompt is shorter, gets none. The note says
    "prompts began with ``began``: N ``distinct`` in the bodies of M requests, ..."."""
    block = length - length % KV_BLOCK_TOKENS
    group: dict[str, int] = {}
    flat: list[int] = []
    offsets = [0]
    for key, tokens in zip(keys, prompt_tokens, strict=True):
        if key is not None and tokens >= length:
            flat.append(group.setdefault(key[:chars], len(group) + 1))
        offsets.append(len(flat))
    note = (f"prompts began with {began}: {len(group)} {distinct} in the bodies of {len(flat)} "
            f"requests, simulated as shared prefix blocks of {block} tokens (whole "
            f"{KV_BLOCK_TOKENS}-token KV blocks) that the prefix cache serves after their first "
            "prefill")
    if len(flat) < len(keys):
        note += (f"; {len(keys) - len(flat)} requests whose body the report does not keep, or "
                 "whose prompt is shorter, get none (each prefilled whole)")
    if not flat:
        return SharedPrefix(None, None, note)
    return SharedPrefix((np.array(flat, dtype=np.int64), np.array(offsets, dtype=np.int64)),
                        block, note)


def cache_note(cached: Sequence[float], prompt: Sequence[float], rows: IntArray,
               prefix: SharedPrefix | None) -> tuple[str, int] | None:
    """The note on the prompt tokens the server served from its prefix cache (GuideLLM 0.8's
    per-request ``cached_tokens``: the server's ``usage.prompt_tokens_details.cached_tokens``
    where it reports them) over the simulated ``rows``, with their total; None where the
    report holds none."""
    hits_of = np.nan_to_num(np.asarray(cached, dtype=np.float64)[rows])
    hits, total = float(hits_of.sum()), float(np.nansum(np.asarray(prompt)[rows]))
    if hits <= 0 or total <= 0:
        return None
    then = ("the simulation shares the prefix blocks above and no other prompt "
            "tokens" if prefix is not None and prefix.hashes is not None else
            "the simulation has no prompt contents and caches none of them, so its prefill "
            "work and TTFT are too high for those requests")
    return (f"the server served {hits:,.0f} of the {total:,.0f} prompt tokens "
            f"({100 * hits / total:.0f} %) from its prefix cache (cached_tokens); {then}",
            int(hits))
