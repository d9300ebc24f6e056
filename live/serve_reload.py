"""A reload of ``kvbudget serve``'s scenario (SIGHUP, or the file changed): what it may change
on a running gateway, and applying it.

Safe to change live: the policy, the budget (through the same
:meth:`~kvbudget.live.serve_admission.Admission.resize` as a capacity read from the upstreams'
``/metrics``), the front door and the lease TTL. The tiers are not: the gateway's queues and
guarantees are built from them, so a file whose tiers changed is refused (a restart applies
it). A refused reload keeps everything running and logs one line.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from kvbudget.live.serve_admission import Admission
from kvbudget.live.serve_records import gateway_meta
from kvbudget.policies.base import Policy
from kvbudget.policies.gateway import FrontDoor, GatewayConfig
from kvbudget.policies.tiers import TierConfig

__all__ = ["Reloaded", "ScenarioReloads", "apply_reload", "tier_change"]

log = logging.getLogger("kvbudget.serve")


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload read from the scenario file: the policy and the gateway's settings.
    ``capacity_tokens``: the budget, ``None`` where the file does not set it (a
    ``--capacity-tokens`` flag or the upstreams' ``/metrics`` do). ``tiers`` must be the
    running ones: a tier change is refused (the gateway's queues and guarantees are built from
    them: a restart applies it)."""

    policy: Policy
    tiers: tuple[TierConfig, ...]
    capacity_tokens: int | None = None
    front_door: FrontDoor | None = None
    lease_ttl_s: float | None = None


def tier_change(running: tuple[TierConfig, ...], new: tuple[TierConfig, ...]) -> str:
    """'' when ``new`` is ``running``, else what changed (one phrase)."""
    if tuple(t.name for t in running) != tuple(t.name for t in new):
        return (f"the tiers changed from {', '.join(t.name for t in running)} to "
                f"{', '.join(t.name for t in new)}")
    for old, now in zip(running, new, strict=True):
        if old != now:
            return f"tier {old.name!r} changed"
    return ""


def apply_reload(admission: Admission, read: Callable[[], Policy | Reloaded],
                 new_policy: Callable[[float, dict[str, object], dict[str, Any]], object]
                 | None = None, applied: Callable[[], object] | None = None
                 ) -> bool:
    """Read the scenario again with ``read`` (the policy alone, or a :class:`Reloaded`) and
    apply what is safe to change live (the module doc); True when it was applied, and then
    ``new_policy`` (the run directories': :meth:`ServeRecorder.new_policy`) is told the time
    and the policy as it describes itself, with the gateway's caps (its front door and lease
    TTL: :func:`~kvbudget.live.serve_records.gateway_meta`), then ``applied`` is called (the
    gateway's: a timeline row, so that a budget moved by the reload is recorded as moved
    then). A bad file (``ValueError``, ``OSError``), or one
    whose tiers changed, keeps everything running and logs one line."""
    gw = admission.gateway
    try:
        new = read()
        if isinstance(new, Reloaded):
            change = tier_change(gw.config.tiers, new.tiers)
            if change:
                raise ValueError(f"{change}: tiers change only at a restart")
            config = replace(gw.config, front_door=new.front_door, lease_ttl_s=new.lease_ttl_s)
    except (ValueError, OSError) as exc:
        log.error("reload refused, the running policy and budget stay: %s", exc)
        return False
    if not isinstance(new, Reloaded):
        admission.replace_policy(new)
        log.warning("policy reloaded: %s", policy_said(new.describe()))
    else:
        _reconfigure(admission, new, config)
    if new_policy is not None:
        new_policy(admission.now(), gw.policy.describe(), gateway_meta(gw.config))
    if applied is not None:
        applied()
    return True


def _reconfigure(admission: Admission, new: Reloaded, config: GatewayConfig) -> None:
    gw = admission.gateway
    admission.reconfigure(new.policy, config)
    if new.capacity_tokens is not None:
        admission.resize(new.capacity_tokens, config.max_request_tokens)
    log.warning("reloaded: policy %s; capacity %d tokens; lease TTL %s; front door %s",
                policy_said(new.policy.describe()), gw.config.capacity_tokens,
                "none" if new.lease_ttl_s is None else f"{new.lease_ttl_s:g} s",
                _door_said(new.front_door))


def policy_said(described: Mapping[str, object]) -> str:
    """A policy as it describes itself, as the start line says it: its name and its
    parameters (``overcommit (batch_on_overload wait, overcommit_ratio 0.5)``)."""
    params = ", ".join(f"{k} {v}" for k, v in described.items() if k != "name")
    return f"{described.get('name')}" + (f" ({params})" if params else "")


def _door_said(door: FrontDoor | None) -> str:
    """The front door's caps that are set, each named (``none`` without one)."""
    if door is None:
        return "none"
    said = [f"{f.name} {v}" for f in fields(door) if (v := getattr(door, f.name)) not in
            (None, ())]
    return ", ".join(said)


class ScenarioReloads:
    """One reload per change of the scenario file ``path``, whichever sees it first: SIGHUP
    (:meth:`signalled`) or the file watcher (:meth:`poll`, every ``period_s`` in
    :meth:`watch`). An operator who edits the file and then sends SIGHUP was reloaded twice
    (the signal, then the watcher seeing the new modification time, or the other way round):
    two ``reloaded`` lines for one change. Each now reloads only a content other than the one
    last read (a SHA-256 of the file's bytes; at the start, the content the gateway started
    with); a SIGHUP that finds the file as last read says so in one line and reloads nothing,
    the watcher stays silent. A file that cannot be read is always passed on to ``reload``,
    which refuses it in one line."""

    def __init__(self, path: Path, reload: Callable[[], bool], period_s: float = 1.0) -> None:
        self.path = path
        self.reload = reload
        self.period_s = period_s
        self._stamp = self._stat()
        self._read = self._digest()  # the content last read (None: it could not be)
        self._applied = True  # whether that content's reload was applied (the start's was)

    def _stat(self) -> tuple[float, int] | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_mtime, st.st_size

    def _digest(self) -> str | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).hexdigest()
        except OSError:
            return None

    def signalled(self) -> None:
        """SIGHUP: reload, unless the file is as last read."""
        digest = self._digest()
        if digest is not None and digest == self._read:
            log.warning("SIGHUP: %s is as last read (%s): nothing to reload", self.path,
                        "applied" if self._applied else "refused then")
            return
        self._reload(digest)

    def poll(self) -> bool:
        """One look by the watcher: reload where the file's modification time or size changed
        and its content is not the one last read. Whether it reloaded."""
        stamp = self._stat()
        if stamp == self._stamp or stamp is None:
            self._stamp = stamp
            return False
        self._stamp = stamp
        digest = self._digest()
        if digest is not None and digest == self._read:
            return False
        self._reload(digest)
        return True

    def _reload(self, digest: str | None) -> None:
        self._read = digest
        self._applied = self.reload()

    async def watch(self) -> None:
        """Poll the file every ``period_s`` until cancelled."""
        while True:
            await asyncio.sleep(self.period_s)
            self.poll()
