"""What ``kvbudget serve``'s upstreams say of themselves, followed while it runs.

At its start the gateway reads each upstream's ``/v1/models`` (its context, ``max_model_len``,
and what it loaded) and ``/metrics`` (``vllm:cache_config_info``: its KV blocks, their size,
prefix caching, the KV dtype). Those settings cap a request's reservation at the context
(:func:`~kvbudget.live.serve_request.context_max_tokens`), round every reservation up to
their KV blocks (:func:`block_tokens`) and go into each run directory's
``replay.json`` (``server``, ``servers``), which ``validate``/``calibrate --records`` read
back as the simulated server. An upstream restarted with other settings (a larger
``--max-model-len``) kept the old ones: requests were reserved up to the old context and used
more (the invariant "no request begins prefill unless its reservation fits" broken), and every
later directory said the old server. :class:`UpstreamSettings` reads them again at each
capacity read (the ``/metrics`` already scraped for the capacity, and one ``GET /v1/models``
an upstream); a change moves the context cap and the block rounding (an upstream restarted
with another ``--block-size`` kept the old rounding before: reservations of 16-token blocks on
an engine allocating 32) and closes the open run directory, so the next one records the new
settings.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from kvbudget.live.serve_records import ServeRecorder
from kvbudget.live.serve_upstream import UpstreamError, Upstreams
from kvbudget.live.server import context_of, engine_of, root_of, served_models, server_info
from kvbudget.live.server_metrics import EngineSnapshot

log = logging.getLogger("kvbudget.serve")


def fleet_context(facts: Sequence[dict[str, Any]]) -> int | None:
    """The upstreams' context: the largest where they differ (a request goes to one of them,
    and the refusal of a longer prompt is the one that cannot take it), ``None`` (no cap) when
    one of them does not tell its own."""
    contexts = [f.get("max_model_len") for f in facts]
    if not contexts or not all(isinstance(c, int) for c in contexts):
        return None
    return max(c for c in contexts if isinstance(c, int))


def block_tokens(facts: Sequence[Mapping[str, Any]]) -> int:
    """The largest KV block size the upstreams tell (their ``block_size``; 1 where none does):
    the unit a reservation is rounded up to (with several of different sizes, the largest: a
    reservation in its blocks covers the blocks of any smaller size it may run in)."""
    return max((b for f in facts if isinstance(b := f.get("block_size"), int) and b > 0),
               default=1)


def told(facts: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """``replay.json``'s keys for what the upstreams said: a lone upstream's as ``server`` (a
    replay's), several as ``servers``; none where nothing was read."""
    if len(facts) == 1:
        return {"server": dict(facts[0])}
    return {"servers": [dict(f) for f in facts]} if facts else {}


class UpstreamSettings:
    """Each upstream's settings as last read (``facts``, in the upstreams' order: what
    :meth:`~kvbudget.live.server.ServerInfo.facts` keeps; ``{}`` for one that said nothing)."""

    def __init__(self, facts: Sequence[dict[str, Any]]) -> None:
        self.facts = [dict(f) for f in facts]

    @property
    def context(self) -> int | None:
        return fleet_context(self.facts)

    @property
    def block_tokens(self) -> int:
        """The unit a reservation is rounded up to (:func:`block_tokens`)."""
        return block_tokens(self.facts)

    async def _read(self, upstreams: Upstreams, index: int,
                    snap: EngineSnapshot) -> dict[str, Any] | None:
        """Upstream ``index``'s settings now (its ``/v1/models`` read, ``snap`` its
        ``/metrics``); ``None`` when its model list cannot be read (the last read stands)."""
        url = upstreams.urls[index] + "/v1/models"
        try:
            async with asyncio.timeout(upstreams.options.connect_timeout_s):
                status, content, _ = await upstreams.get(url)
            payload = json.loads(content) if status == 200 else None
        except (UpstreamError, TimeoutError, ValueError):
            return None
        models = served_models(payload)
        named = self.facts[index].get("model")
        entry = next((m for m in models if m["id"] == named), models[0] if models else None)
        if entry is None:
            return None
        return server_info(str(entry["id"]), context_of(entry), root_of(entry), snap,
                           engine=engine_of(entry)).facts()

    async def follow(self, upstreams: Upstreams, snaps: Sequence[EngineSnapshot],
                     recorder: ServeRecorder | None, now_s: float) -> bool:
        """Read the upstreams' settings again (``snaps``: their ``/metrics`` as the capacity
        read them); where one changed (restarted with other settings), the context cap
        becomes the new one and the open run directory is closed (the next records them),
        with one line logged. Whether one changed (:attr:`context` is then the cap)."""
        now = await asyncio.gather(*(self._read(upstreams, i, snap)
                                     for i, snap in enumerate(snaps)))
        changed = [i for i, f in enumerate(now) if f is not None and f != self.facts[i]]
        if not changed:
            return False
        said = "; ".join(f"{upstreams.urls[i]}: {_diff(self.facts[i], now[i] or {})}"
                         for i in changed)
        block = self.block_tokens
        for i in changed:
            self.facts[i] = now[i] or {}
        closed = None
        if recorder is not None:
            closed = recorder.restart(now_s, told(self.facts))
        context = self.context
        log.warning("upstream settings changed (%s): a reservation now ends at %s%s%s", said,
                    "no context (one upstream does not tell its own)" if context is None
                    else f"the context {context:,}",
                    "" if self.block_tokens == block else " and is rounded up to whole KV "
                    f"blocks of {self.block_tokens} tokens (was {block}: the upstreams' "
                    "block_size, the largest where they differ)",
                    f"; {closed} closed, the next run directory records them" if closed
                    else "")
        return True


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The settings that changed, ``name old -> new``."""
    return ", ".join(f"{k} {old.get(k, 'untold')} -> {new.get(k, 'untold')}"
                     for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k))
