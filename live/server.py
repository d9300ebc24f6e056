"""Questions to a live OpenAI-compatible server: which model, how much KV, is it still there."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import Any

import httpx

from kvbudget.live.openai_client import ServerTarget, error_message
from kvbudget.live.server_metrics import EngineSnapshot, snapshot


class BackendUnavailable(RuntimeError):
    """The server cannot be reached (it never started, or it died during the run)."""


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What kvbudget reads from a server before a run. ``kv_capacity_tokens`` is the usable
    capacity (``usable_blocks * block_size``; see :mod:`kvbudget.live.server_metrics`)."""

    model: str
    max_model_len: int | None
    kv_capacity_tokens: int | None
    num_gpu_blocks: int | None
    usable_blocks: int | None
    block_size: int | None
    has_metrics: bool
    capacity_problem: str = ""
    """Why ``/metrics``'s KV capacity was not taken (an absurd figure), '' otherwise."""
    model_root: str | None = None
    """What the server loaded (vLLM's ``/v1/models`` ``root``: the ``--model`` it was given,
    a repository id or a path), where ``model`` may be a ``--served-model-name`` alias."""
    enable_prefix_caching: bool | None = None
    kv_cache_dtype: str | None = None
    num_engines: int = 1
    num_gpu_blocks_by_engine: tuple[int, ...] = ()
    """Each data-parallel engine's ``cache_config_info`` figure (see
    :attr:`~kvbudget.live.server_metrics.EngineSnapshot.num_gpu_blocks_by_engine`)."""
    server_engine: str | None = None
    """The kvbudget engine of the server that named itself in its model entry
    (:func:`engine_of`); None for vLLM (the default engine) and any other."""

    def facts(self) -> dict[str, Any]:
        """What the server said of itself, as a run directory records it (``replay.json``'s
        ``server``; read back by :func:`kvbudget.results.recorded_records.read_run_dir`): the
        quantities it told, and no key for one it did not."""
        told: dict[str, Any] = {
            "model": self.model, "model_root": self.model_root,
            "max_model_len": self.max_model_len, "num_gpu_blocks": self.num_gpu_blocks,
            "block_size": self.block_size, "enable_prefix_caching": self.enable_prefix_caching,
            "kv_cache_dtype": self.kv_cache_dtype,
            "num_engines": self.num_engines if self.num_gpu_blocks is not None else None,
            "num_gpu_blocks_by_engine": list(self.num_gpu_blocks_by_engine)
            if self.num_gpu_blocks is not None and self.num_gpu_blocks_by_engine else None,
            "server_engine": self.server_engine}
        return {k: v for k, v in told.items() if v is not None and v != ""}


async def bounded_get(client: httpx.AsyncClient, url: str, *, headers: dict[str, str],
                      timeout_s: float) -> httpx.Response:
    """GET ``url`` within ``timeout_s`` in all: httpx's timeouts bound each read, so a server
    that drips a byte at a time would otherwise hold the call forever. Raises
    ``httpx.ReadTimeout`` (an ``httpx.HTTPError``) when the whole answer takes longer."""
    try:
        async with asyncio.timeout(timeout_s):
            return await client.get(url, headers=headers, timeout=timeout_s)
    except TimeoutError:
        raise httpx.ReadTimeout(f"{url} did not answer in {timeout_s:g} s") from None


async def fetch_snapshot(client: httpx.AsyncClient, target: ServerTarget) -> EngineSnapshot:
    """Scrape ``/metrics`` once (raises ``httpx.HTTPError`` when it cannot)."""
    response = await bounded_get(
        client, target.url("/metrics"), headers=target.headers(),
        timeout_s=target.connect_timeout_s)
    response.raise_for_status()
    return snapshot(response.text)


async def server_alive(
    client: httpx.AsyncClient, target: ServerTarget, *, tries: int = 3, pause_s: float = 0.5
) -> bool:
    """Whether the server answers HTTP at all (``/health``, any status), retried a few times."""
    for attempt in range(tries):
        try:
            await bounded_get(client, target.url("/health"), headers=target.headers(),
                              timeout_s=min(5.0, target.connect_timeout_s))
            return True
        except httpx.HTTPError:
            if attempt + 1 < tries:
                await asyncio.sleep(pause_s)
    return False


async def discover(client: httpx.AsyncClient, target: ServerTarget,
                   snap: EngineSnapshot | None = None) -> ServerInfo:
    """Model name (the first served model unless ``target.model`` names one), its context length
    where the server reports it (vLLM's ``max_model_len``), and the KV capacity from ``/metrics``
    (``snap``: that page as the caller read it already; else it is read now).
    """
    try:
        response = await bounded_get(
            client, target.url("/v1/models"), headers=target.headers(),
            timeout_s=target.connect_timeout_s)
    except httpx.HTTPError as exc:
        raise BackendUnavailable(target.redact(f"cannot reach {target.base_url}: {exc}")
                                 ) from None
    if response.status_code >= 400:
        raise BackendUnavailable(
            f"{target.url('/v1/models')} answered HTTP {response.status_code}"
            + _models_refusal_hint(response.status_code, target))
    try:
        payload = response.json()
    except ValueError:
        payload = None
    # anything else than OpenAI's shape (a bare list, a string, entries that are not
    # objects) lists no usable model
    models = served_models(payload)
    model = target.model
    max_model_len: int | None = None
    entry = next((m for m in models if not model or m.get("id") == model), None)
    if entry is None and not model:
        said = error_message(payload)
        raise BackendUnavailable(
            f"{target.url('/v1/models')} lists no model"
            + (f" (HTTP {response.status_code}, not a model list)"
               if 300 <= response.status_code < 400 else "")
            + (f": {target.redact(said)}" if said else ""))
    if entry is None and models:
        served = ", ".join(repr(m["id"]) for m in models[:8])
        raise BackendUnavailable(f"{target.url('/v1/models')} does not serve model {model!r} "
                                 f"(--model); it serves {served}")
    root: str | None = None
    if entry is not None:
        model = str(entry.get("id"))
        root, max_model_len = root_of(entry), context_of(entry)
    if snap is None:
        try:
            snap = await fetch_snapshot(client, target)
        except httpx.HTTPError:
            snap = None
    return server_info(model, max_model_len, root, snap,
                       engine=None if entry is None else engine_of(entry))


def _models_refusal_hint(status: int, target: ServerTarget) -> str:
    """What to do about a refused ``/v1/models``: a key it wants (401, 403), a URL that is
    no OpenAI-compatible server's root (404, 405: every one of them serves that path)."""
    if status in (401, 403):
        return (": the server wants an API key" if not target.api_key else
                ": the server refused the API key given") + " (--api-key or KVBUDGET_API_KEY)"
    if status in (404, 405):
        return (f": --url {target.base_url} is not the root of an OpenAI-compatible server "
                "(vLLM, SGLang, TGI and llama.cpp's server all answer GET /v1/models there)")
    return ""


def served_models(payload: Any) -> list[dict[str, Any]]:
    """The model entries of a ``/v1/models`` answer: OpenAI's shape is ``{"object": "list",
    "data": [{"id": ...}, ...]}``; an entry is a model when its id is a non-empty string."""
    raw_models = payload.get("data") if isinstance(payload, dict) else None
    return [m for m in raw_models if isinstance(m, dict) and isinstance(m.get("id"), str)
            and m["id"]] if isinstance(raw_models, list) else []


def root_of(entry: dict[str, Any]) -> str | None:
    """What the server loaded (vLLM's ``root``), where a model entry says it."""
    return entry.get("root") if isinstance(entry.get("root"), str) else None


def context_of(entry: dict[str, Any]) -> int | None:
    """A model entry's context (vLLM's ``max_model_len``), where it tells a sane one."""
    raw_len = entry.get("max_model_len")
    return (int(raw_len) if isinstance(raw_len, int | float) and not isinstance(
        raw_len, bool) and 1 <= raw_len < 2**53 else None)


OWNED_BY_ENGINES = {"sglang": "sglang"}
"""A model entry's ``owned_by`` as the server writes it of itself, and the kvbudget engine
that models that server: SGLang's ``ModelCard`` (``sglang/srt/entrypoints/openai/
protocol.py``: ``owned_by: str = "sglang"``). vLLM writes ``vllm``, kvbudget's default engine:
not recorded, so its runs' files stay as they were."""


def engine_of(entry: dict[str, Any]) -> str | None:
    """The kvbudget engine of the server a model entry names as its owner
    (:data:`OWNED_BY_ENGINES`), or None."""
    owned = entry.get("owned_by")
    return OWNED_BY_ENGINES.get(owned) if isinstance(owned, str) else None


def server_info(model: str, max_model_len: int | None, root: str | None,
                snap: EngineSnapshot | None, *, engine: str | None = None) -> ServerInfo:
    """What a server said of itself: its model entry's figures (``engine``:
    :func:`engine_of` it) and its ``/metrics`` (None: not read)."""
    return ServerInfo(
        model=model,
        max_model_len=max_model_len,
        kv_capacity_tokens=None if snap is None else snap.kv_capacity_tokens,
        num_gpu_blocks=None if snap is None else snap.num_gpu_blocks,
        usable_blocks=None if snap is None else snap.usable_blocks,
        block_size=None if snap is None else snap.block_size,
        has_metrics=snap is not None,
        capacity_problem="" if snap is None else snap.capacity_problem,
        model_root=root,
        enable_prefix_caching=None if snap is None else snap.enable_prefix_caching,
        kv_cache_dtype=None if snap is None else snap.kv_cache_dtype,
        num_engines=1 if snap is None else snap.num_engines,
        num_gpu_blocks_by_engine=() if snap is None else snap.num_gpu_blocks_by_engine,
        server_engine=engine,
    )


def with_model(target: ServerTarget, info: ServerInfo) -> ServerTarget:
    """The target with the discovered model name filled in."""
    return target if target.model == info.model else replace(target, model=info.model)
