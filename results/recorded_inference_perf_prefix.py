"""The shared system prompts of inference-perf's ``shared_prefix`` data, as prefix hashes.

inference-perf 0.7.0's ``data: {type: shared_prefix, shared_prefix: {num_groups,
num_prompts_per_group, system_prompt_len, question_len, output_len}}``
(``inference_perf/config/datagen/config.py`` ``SharedPrefix``; the run's ``config.yaml``, which
inference-perf writes beside its reports, spells the first two ``num_unique_system_prompts`` and
``num_users_per_system_prompt``) starts every prompt with one of ``num_groups`` generated system
prompts of ``system_prompt_len`` tokens, then its own question: requests of one group share the
leading text of their body (a completion's ``prompt``, a chat's first message), which the
server's prefix cache served after its first prefill. The per-request report keeps each request
body, so the groups are read from it: each is one hash naming the prefix's whole KV blocks, as
GuideLLM's synthetic prefixes are (:mod:`kvbudget.results.recorded_guidellm_prefix`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # pyyaml ships no type hints

from kvbudget.results.recorded_fields import dig
from kvbudget.results.recorded_guidellm_prefix import (
    KEY_CHARS,
    KV_BLOCK_TOKENS,
    SharedPrefix,
    keyed_prefix,
)
from kvbudget.workloads.text_files import read_text

MIN_KEY_CHARS = 8
"""The fewest leading characters that tell two generated system prompts apart."""


def shared_prefix_settings(path: Path) -> Mapping[str, Any] | None:
    """The ``data.shared_prefix`` settings of the run's ``config.yaml`` beside ``path``, where
    its data type is ``shared_prefix``; None otherwise (no such file, another data type)."""
    config_path = path.parent / "config.yaml"
    if not config_path.is_file():
        return None
    try:
        config = yaml.safe_load(read_text(config_path, errors="replace"))
    except yaml.YAMLError:
        return None
    if dig(config, "data", "type") != "shared_prefix":
        return None
    settings = dig(config, "data", "shared_prefix")
    return settings if isinstance(settings, Mapping) else None


def _whole(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 \
        else None


def _key_chars(keys: Sequence[str], length: int, groups: int) -> int | None:
    """How many leading characters tell the groups apart: at most the prefix's (``2 x`` its
    tokens, :data:`KEY_CHARS` at most; fewer when its tokens are shorter, so that the key holds
    none of the question after it), no more distinct keys than ``groups``."""
    chars = min(KEY_CHARS, 2 * length)
    while chars >= MIN_KEY_CHARS:
        if len({k[:chars] for k in keys}) <= groups:
            return chars
        chars -= 1
    return None


def inference_perf_prefix(settings: Mapping[str, Any], keys: Sequence[str | None],
                          prompt_tokens: Sequence[float]) -> SharedPrefix:
    """The groups of the run's shared system prompts, as prefix hashes (``keys``: each
    request's leading body text, None where the body was not kept)."""
    length = _whole(settings.get("system_prompt_len"))
    groups = _whole(settings.get("num_unique_system_prompts", settings.get("num_groups")))
    said = "inference-perf shared_prefix data"
    if settings.get("enable_multi_turn_chat"):
        return SharedPrefix(None, None, f"prompts began with a shared system prompt ({said}, "
                            "multi-turn chat): not simulated as shared across the user "
                            "sessions, so each session's first round's simulated TTFT is too "
                            "high; each session's own history, which begins with it, is "
                            "shared within the session where the report links its rounds")
    if length is None or groups is None:
        why = ("its system prompts' lengths are drawn, and the report does not say which "
               "request had which")
        return SharedPrefix(None, None, f"prompts began with a shared system prompt ({said}); "
                            f"{why}: not simulated, every prompt is its own, so the simulated "
                            "TTFT is too high")
    return grouped_prefix(keys, prompt_tokens, length, groups,
                          f"one of {groups} system prompts of {length} tokens ({said})")


def grouped_prefix(keys: Sequence[str | None], prompt_tokens: Sequence[float], length: int,
                   groups: int, said: str) -> SharedPrefix:
    """Requests grouped by the leading text of their bodies (``keys``; None: not kept) into at
    most ``groups`` prefixes of ``length`` tokens, one hash a group naming its whole KV blocks;
    ``said`` names the prefixes in the note ("one of 2 system prompts of 32 tokens (...)")."""
    block = length - length % KV_BLOCK_TOKENS
    kept = [k for k, t in zip(keys, prompt_tokens, strict=True) if k is not None and t >= length]
    chars = _key_chars(kept, length, groups) if block and kept else None
    if chars is None:
        why = (f"shorter than a {KV_BLOCK_TOKENS}-token KV block" if not block else
               f"the request bodies do not begin with {groups} distinct texts")
        return SharedPrefix(None, None, f"prompts began with {said}; {why}: not simulated, "
                            "every prompt is its own, so the simulated TTFT is too high")
    return keyed_prefix(keys, prompt_tokens, length, chars, said, "distinct")
