"""What ``kvbudget serve`` reads from a client's request before any upstream work: who the
caller is (its tier, from a hashed key file or a trusted header), and what it asks for (the
body's prompt, ``max_tokens``, whether it streams), checked into one :class:`Completion` or
refused with a one-line reason (an HTTP 400)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvbudget.policies.tiers import TierConfig
from kvbudget.workloads.max_output import MAX_TOKENS

TOKENS_PER_MESSAGE_BOUND = 16
"""Chat-template tokens one message may add around its text: Llama 3's template adds 4
(``<|start_header_id|>role<|end_header_id|>\\n\\n ... <|eot_id|>``); 16 is a stated margin for
templates with longer role headers."""

PROMPT_OVERHEAD_BOUND = 16
"""Tokens a prompt may gain besides its text (a BOS token, a generation prompt)."""

TOOLS_OVERHEAD_BOUND = 512
"""Tokens a chat template may add around the tools it renders, besides their JSON (a stated
margin: Qwen's and Hermes' preambles, "You may call one or more functions ...", run to about
100 to 150 tokens)."""

CHAT_TEMPLATE_KEYS = ("tools", "chat_template", "chat_template_kwargs",
                      "add_generation_prompt", "continue_final_message", "add_special_tokens",
                      "mm_processor_kwargs", "media_io_kwargs")
"""A chat request's keys that change what its template renders, and so its prompt's tokens:
vLLM's ``/tokenize`` takes each (0.32.0, ``vllm/entrypoints/serve/tokenize/protocol.py``,
``TokenizeChatRequest``), and the gateway passes on those the request gives."""

KEY_DIGEST_CHARS = 64  # a SHA-256 in hex


def key_digest(key: str) -> str:
    """The hex SHA-256 of an API key, as the key file stores it (never the key itself)."""
    return hashlib.sha256(key.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class KeyTable:
    """API keys (as SHA-256 hex digests) to tier names. A lookup compares the presented key's
    digest with every stored one with ``hmac.compare_digest`` and never stops early, so
    neither a match's position nor a shared prefix shows in its timing."""

    digests: tuple[tuple[bytes, str], ...] = ()

    @classmethod
    def parse(cls, text: str, source: str, tiers: Mapping[str, object]) -> KeyTable:
        """``<sha256 hex> <tier>`` per line (``#`` starts a comment); a bad line raises
        ``ValueError`` naming ``source``, the line and the field."""
        rows: list[tuple[bytes, str]] = []
        for number, line in enumerate(text.splitlines(), 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 2:
                raise ValueError(f"{source}: line {number}: expected '<sha256 hex> <tier>', "
                                 f"got {len(fields)} fields")
            digest, tier = fields[0].lower(), fields[1]
            if len(digest) != KEY_DIGEST_CHARS or any(c not in "0123456789abcdef" for c in digest):
                raise ValueError(f"{source}: line {number}: the key digest must be 64 hex "
                                 "characters (sha256sum of the key), not the key itself")
            if tier not in tiers:
                raise ValueError(f"{source}: line {number}: unknown tier {tier!r}; "
                                 f"known tiers: {', '.join(sorted(tiers))}")
            rows.append((digest.encode(), tier))
        return cls(tuple(rows))

    @classmethod
    def load(cls, path: Path, tiers: Mapping[str, object]) -> KeyTable:
        return cls.parse(path.read_text(), str(path), tiers)

    def tier_of(self, key: str) -> str | None:
        digest = key_digest(key).encode()
        found: str | None = None
        for stored, tier in self.digests:
            if hmac.compare_digest(digest, stored):
                found = tier
        return found


@dataclass(frozen=True, slots=True)
class Completion:
    """A checked completion request. ``prompt_bound`` is the prompt's tokens as bounded from its
    bytes (:func:`prompt_token_bound`; None for a chat with content parts other than text,
    taken only where the upstream counts them); ``tokenize_body`` is what the upstream's ``/tokenize``
    takes to count them exactly; ``upstream_body`` the JSON sent upstream
    (:func:`upstream_body`)."""

    body: dict[str, Any]
    chat: bool
    stream: bool
    wants_usage: bool
    max_tokens: int
    prompt_bound: int | None
    tokenize_body: dict[str, Any]
    upstream_body: bytes = b""

    def prefix(self) -> bytes:
        """The prompt as bytes (the chat messages' JSON), for the prefix-affinity router."""
        prompt = self.body["messages"] if self.chat else self.body["prompt"]
        if isinstance(prompt, str):
            return prompt.encode()
        return json.dumps(prompt, separators=(",", ":")).encode()


class BadRequest(ValueError):
    """A request refused before admission: HTTP 400 with OpenAI's error JSON (``param``: the
    field at fault)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def _text_bytes(value: Any) -> int | None:
    """UTF-8 bytes of a message's content (a string, or OpenAI content parts with text)."""
    if isinstance(value, str):
        return len(value.encode())
    if isinstance(value, list):
        total = 0
        for part in value:
            text = part.get("text") if isinstance(part, dict) else None
            if not isinstance(part, dict) or part.get("type") != "text" or \
                    not isinstance(text, str):
                return None
            total += len(text.encode())
        return total
    return None


def _message_bytes(message: Any) -> int | None:
    """UTF-8 bytes a chat message's template renders: its text, and the JSON of the tool
    calls an assistant message made (whose content is then null, as OpenAI's tool-calling
    turns send it); None when it is not such a message."""
    if not isinstance(message, dict):
        return None
    content = message.get("content")
    size = 0 if content is None else _text_bytes(content)
    calls = message.get("tool_calls")
    if size is None or (calls is not None and not isinstance(calls, list)):
        return None
    return size + (len(json.dumps(calls, ensure_ascii=False).encode()) if calls else 0)


def _parts_only(message: Any) -> bool:
    """Whether a chat message is OpenAI content parts, each an object with a ``type`` (an
    ``image_url``, an ``input_audio``: what bytes cannot bound, an upstream counts)."""
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and all(
        isinstance(part, dict) and isinstance(part.get("type"), str) for part in content)


def prompt_token_bound(chat: bool, body: Mapping[str, Any], parts_counted: bool = False
                       ) -> int | None:
    """An upper bound on the prompt's tokens from its bytes; :class:`BadRequest` when the prompt
    is not one the gateway can bound. A chat with content parts other than text (images) has
    none: None where ``parts_counted`` (the upstream's ``/tokenize`` counts them), else
    :class:`BadRequest` saying which count takes them.

    Byte-level BPE tokenizers (GPT-2's, Llama 3's, Qwen's) cover every byte with at least one
    byte of a token, so ``n`` UTF-8 bytes are at most ``n`` tokens; the bound adds
    :data:`PROMPT_OVERHEAD_BOUND`, :data:`TOKENS_PER_MESSAGE_BOUND` per chat message, and a
    chat's ``tools`` as the bytes of their JSON plus :data:`TOOLS_OVERHEAD_BOUND` (the template
    renders them into the prompt). A list of token ids counts exactly. The error is one-sided: it over-reserves (English text runs
    about 4 bytes a token), never under-reserves."""
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list", "messages")
        total = PROMPT_OVERHEAD_BOUND
        if any(_message_bytes(m) is None for m in messages) and all(
                _message_bytes(m) is not None or _parts_only(m) for m in messages):
            if parts_counted:
                return None
            raise BadRequest("content parts other than text (images) are counted only by "
                             "the upstream: the gateway takes them with --count-tokens "
                             "upstream", "messages")
        for message in messages:
            size = _message_bytes(message)
            if size is None:
                raise BadRequest("each message must be an object whose content is text",
                                 "messages")
            total += size + TOKENS_PER_MESSAGE_BOUND
        tools = body.get("tools")
        if tools:  # rendered into the prompt by the template: their JSON and a preamble
            total += len(json.dumps(tools, ensure_ascii=False).encode()) + TOOLS_OVERHEAD_BOUND
        return total
    prompt = body.get("prompt")
    if isinstance(prompt, str) and prompt:
        return len(prompt.encode()) + PROMPT_OVERHEAD_BOUND
    if isinstance(prompt, list) and prompt and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt):
        return len(prompt) + PROMPT_OVERHEAD_BOUND
    raise BadRequest("'prompt' must be a non-empty string or a list of token ids (one prompt "
                     "per request)", "prompt")


def _max_tokens(body: dict[str, Any], tier: TierConfig, default: int) -> int:
    """The request's ``max_tokens`` (or ``max_completion_tokens``); the default, written into
    ``body``, when it gives neither. One over the tier's ``max_sequence_tokens`` is a request
    all the same: the gateway's admission refuses it as too large, and records it, as it does
    a prompt + ``max_tokens`` over the limit (a recording's simulation counts it too large
    too); one that is no count of tokens (not an integer, under 1, or over
    :data:`~kvbudget.workloads.max_output.MAX_TOKENS`, the most a records row holds, so that
    the run directory's refusal stays readable) is a bad request."""
    key = "max_completion_tokens" if body.get("max_completion_tokens") is not None \
        else "max_tokens"
    value = body.get(key)
    if value is None:
        value = min(default, tier.max_sequence_tokens - 1)
        body.pop("max_tokens", None)  # a null one: replaced
        body["max_tokens"] = value
    if not isinstance(value, int) or isinstance(value, bool) or not \
            1 <= value <= MAX_TOKENS:
        raise BadRequest(f"'{key}' must be an integer from 1 to {MAX_TOKENS:,} (tier "
                         f"{tier.name} takes prompt + {key} up to {tier.max_sequence_tokens} "
                         f"tokens), got {value!r}", key)
    return value


def parse_completion(raw: bytes, chat: bool, tier: TierConfig,
                     default_max_tokens: int, count_tokens: str = "bytes") -> Completion:
    """The request body checked (:class:`BadRequest` naming the field otherwise);
    ``count_tokens``: how the gateway counts the prompt (``upstream`` takes a chat's content
    parts other than text: :func:`prompt_token_bound`)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise BadRequest("the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest("'model' must be a string", "model")
    for key in ("n", "best_of"):
        if body.get(key, 1) not in (1, None):
            raise BadRequest(f"'{key}' must be 1: the gateway reserves one sequence a request",
                             key)
    stream = body.get("stream", False)
    if stream not in (True, False, None):
        raise BadRequest("'stream' must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    bound = prompt_token_bound(chat, body, count_tokens == "upstream")
    given = dict(body)
    max_tokens = _max_tokens(body, tier, default_max_tokens)
    wants_usage = isinstance(options, dict) and options.get("include_usage") is True
    if stream is True and not wants_usage:  # the gateway settles from the stream's usage
        body["stream_options"] = {**(options or {}), "include_usage": True}
    tokenize: dict[str, Any] = {"model": model} if model else {}
    if chat:  # what the template renders: the messages and the keys that change it
        tokenize.update(messages=body["messages"], add_generation_prompt=True)
        tokenize.update({k: body[k] for k in CHAT_TEMPLATE_KEYS if body.get(k) is not None})
    else:
        tokenize["prompt"] = body["prompt"]
    return Completion(body=body, chat=chat, stream=stream is True, wants_usage=wants_usage,
                      max_tokens=max_tokens, prompt_bound=bound, tokenize_body=tokenize,
                      upstream_body=upstream_body(raw, given, body))


def upstream_body(raw: bytes, given: dict[str, Any], body: dict[str, Any]) -> bytes:
    """``body`` (``given``, the client's ``raw`` JSON object, with keys the gateway added or
    changed) as JSON for the upstream. Where the gateway only added keys, and ``raw`` is UTF-8,
    they are written into ``raw`` before its closing brace, as one edit: the client's bytes
    are not parsed again nor written anew (``json.dumps`` of a 20 KB prompt takes about
    0.1 ms, the edit 4 us). Otherwise ``body`` is written whole."""
    added = {k: v for k, v in body.items() if k not in given}
    if len(body) != len(given) + len(added) or any(given[k] is not body[k] for k in given):
        return json.dumps(body).encode()  # a key changed or gone: written whole
    if not added:
        return raw
    text = raw.rstrip()
    if not (text.lstrip()[:1] == b"{" and text.endswith(b"}")):  # not UTF-8: written whole
        return json.dumps(body).encode()
    # the common addition, a stream's usage asked for, written once
    keys = _INCLUDE_USAGE_JSON if added == _INCLUDE_USAGE else json.dumps(added)[1:-1].encode()
    return text[:-1] + (b"," if given else b"") + keys + b"}"


_INCLUDE_USAGE = {"stream_options": {"include_usage": True}}
_INCLUDE_USAGE_JSON = json.dumps(_INCLUDE_USAGE)[1:-1].encode()


def usage_problem(usage: Any, max_tokens: int) -> str:
    """Why a ``usage`` object cannot settle a lease ('' when it can): the replay's checks of the
    server's count (a missing, negative or non-integer ``completion_tokens``, or more than the
    request allowed)."""
    if not isinstance(usage, dict):
        return "no usage object in the answer"
    tokens = usage.get("completion_tokens")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        return f"usage.completion_tokens {tokens!r} is not a token count"
    if tokens > max_tokens:
        return f"usage.completion_tokens {tokens} > max_tokens {max_tokens}"
    return ""


def context_max_tokens(prompt_tokens: int, max_tokens: int, max_model_len: int | None,
                       exact: bool = True) -> int:
    """The output a request is reserved for: ``max_tokens``, lowered to the context the prompt
    leaves where the upstream's ``max_model_len`` is known, as vLLM serves such a request
    (0.32.0: ``get_max_tokens`` in ``vllm/entrypoints/serve/utils/api_utils.py`` lowers
    ``max_tokens`` to ``max_model_len - prompt``; a ``max_tokens`` over the context it refuses,
    ``renderers/params.py``; see :mod:`kvbudget.workloads.context_limit`): its KV never holds
    more than the context. A counted (``exact``) prompt that fills the context is left as it
    is (the upstream refuses it). With a bound of the prompt (``--count-tokens bytes``) the
    reservation stays at least the use, as the bound is; a bound at or over the context may be
    a prompt under it, which vLLM serves within the context: the bound and one output token
    hold more than that (with ``max_tokens`` on top, a request vLLM serves was refused as too
    large)."""
    if max_model_len is None:
        return max_tokens
    if prompt_tokens >= max_model_len:
        return max_tokens if exact else 1
    return min(max_tokens, max_model_len - prompt_tokens)
