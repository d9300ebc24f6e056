"""``kvbudget serve``'s run directories: every request it answered, in the records schema.

Rows go to a :class:`~kvbudget.live.run_dir.RunDir`'s part files as requests end (flushed, so a
crash keeps them); a directory is closed into ``requests.parquet``, ``timeline.parquet`` and
``summary.json`` (the files ``kvbudget report`` and ``calibrate --records`` read) when it holds
``rotate_requests`` requests and when the server stops. Directories are ``run-0001``,
``run-0002``, ... under the root, numbered on from the highest already there.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kvbudget.live.run_dir import (
    META_FILE,
    REQUESTS_PART,
    TIMELINE_PART,
    TOKEN_GAPS_KEY,
    RunDir,
    read_jsonl,
    read_parts,
    token_gaps_of_parts,
    write_outputs,
)
from kvbudget.live.serve_admission import Admission, Ticket
from kvbudget.live.server_metrics import kv_used_unknown_said
from kvbudget.policies.gateway import GatewayConfig
from kvbudget.policies.request import Request
from kvbudget.policies.tiers import TierConfig
from kvbudget.results.metrics import summarize
from kvbudget.results.run_result import REQUESTS_FILE

CONTEXT_REASONS = ("context_length", "prompt_too_long")
"""A record's reasons for a refusal for the model's context (``results.records``)."""

RUN_NAME = re.compile(r"run-(\d{4,})$")
log = logging.getLogger("kvbudget.serve")


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one request ended at the gateway (times on the admission's clock)."""

    status: str
    reason: str = ""
    output_tokens: int = 0
    admitted_s: float = math.nan
    first_token_s: float = math.nan
    finished_s: float = math.nan
    reserved_tokens: int = 0
    num_preemptions: int = 0
    error: str = ""
    token_gaps_s: tuple[float, ...] = ()


def request_row(request: Request, outcome: Outcome,
                max_tokens: int | None = None) -> dict[str, Any]:
    """One row of the records table (TTFT, TPOT and E2E as vLLM defines them; ``deadline_s``
    the admission deadline it was given, the tier's or its client's shorter one); its
    ``max_output_tokens`` is ``max_tokens`` where given (what the request declared:
    :meth:`ServeRecorder.write_request`), else the reservation's."""
    ttft = outcome.first_token_s - request.arrival_s
    e2e = outcome.finished_s - request.arrival_s
    n = outcome.output_tokens
    tpot = (e2e - ttft) / (n - 1) if n > 1 and math.isfinite(e2e - ttft) else math.nan
    return {
        "request_id": request.request_id, "tier": request.tier, "arrival_s": request.arrival_s,
        "prompt_tokens": request.prompt_tokens,
        "max_output_tokens": request.max_output_tokens if max_tokens is None else max_tokens,
        "output_tokens": n, "status": outcome.status, "reason": outcome.reason,
        "admitted_s": outcome.admitted_s, "first_token_s": outcome.first_token_s,
        "finished_s": outcome.finished_s, "ttft_s": ttft, "tpot_s": tpot, "e2e_s": e2e,
        "num_preemptions": outcome.num_preemptions, "reserved_tokens": outcome.reserved_tokens,
        "error": outcome.error, TOKEN_GAPS_KEY: list(outcome.token_gaps_s),
        "deadline_s": math.nan if request.deadline_s is None else request.deadline_s,
    }


def gateway_row(admission: Admission, kv_used: int | None,
                engine_preemptions: int | None = None) -> dict[str, Any]:
    """One timeline row of the gateway's state now; ``kv_used``: the tokens in the upstreams'
    allocated KV blocks as their ``/metrics`` tell it (None: 0, said by the summary; the
    gateway's own ledger holds reservations only, a lease's use settled as it ends);
    ``engine_preemptions``: their engines' preemptions so far (the column is the engine's, as
    the simulator and the replay write it; the gateway's own revocations are each request's
    ``num_preemptions``)."""
    gw = admission.gateway
    return {"time_s": admission.now(), "kv_used_tokens": 0 if kv_used is None else kv_used,
            "kv_reserved_tokens": gw.budget.reserved_tokens,
            "kv_capacity_tokens": gw.config.capacity_tokens, "num_running": len(gw.admitted),
            "num_waiting": gw.num_waiting(),
            "num_preemptions": 0 if engine_preemptions is None else engine_preemptions}


class ServeRecorder:
    """Rotating run directories under ``root`` (see the module doc)."""

    def __init__(self, root: Path, *, tiers: Sequence[TierConfig], policy: Mapping[str, Any],
                 rotate_requests: int, meta: Mapping[str, Any]) -> None:
        if rotate_requests < 1:
            raise ValueError(f"rotate_requests must be >= 1, got {rotate_requests!r}")
        self.root = root
        self.tiers = tuple(tiers)
        self.policy = dict(policy)
        self.rotate_requests = rotate_requests
        self.meta = dict(meta)
        root.mkdir(parents=True, exist_ok=True)
        taken = [int(m.group(1)) for p in root.iterdir() if (m := RUN_NAME.match(p.name))]
        self._number = max(taken, default=0)
        self.closed: list[Path] = []
        self.recovered: list[Path] = []  # directories left open before, closed at the start
        self._run: RunDir | None = None
        self._num_rows = 0
        self._started_s = 0.0
        self._capacity_tokens = 1
        self._last_sample: dict[str, Any] | None = None
        self._last_known = True
        # the rows at which the budget moved while no directory was open (since the last
        # close, or the start; with whether each knew the KV used): a directory opens at its
        # first request's end, and a move while its requests waited is its timeline's
        self._moved: list[tuple[dict[str, Any], bool]] = []
        self._num_unknown = 0  # timeline rows of the open directory without the KV in use
        self._preemptions_base = 0
        for path in sorted(root.iterdir()):
            if RUN_NAME.match(path.name) and (path / REQUESTS_PART).is_file() and \
                    not (path / REQUESTS_FILE).exists():
                self._close_left_open(path)

    def _current(self, now_s: float) -> RunDir:
        if self._run is None:
            self._number += 1
            self._run = RunDir(self.root / f"run-{self._number:04d}", self.meta, resume=False)
            self._num_rows = 0
            self._started_s = now_s
            self._num_unknown = 0
            # the engines' preemptions are counted from the directory's start
            self._preemptions_base = int((self._last_sample or {}).get("num_preemptions", 0))
            if self._last_sample is not None:  # the state the directory starts from
                carried = self._moved if len(self._moved) > 1 else []
                if not carried or carried[-1][0] is not self._last_sample:
                    carried = [*carried, (self._last_sample, self._last_known)]
                for row, known in carried:
                    self._run.write_timeline(self._from_base(row))
                    self._num_unknown += not known
            self._moved = []
        return self._run

    def write_request(self, ticket: Ticket, outcome: Outcome, now_s: float) -> None:
        """The row of a request that ended (:func:`request_row`): its ``max_output_tokens``
        is what the gateway reserved for, ended at the upstreams' context, as the simulated
        gateway of ``validate --records`` then weighs it and the simulated vLLM serves it (cut
        there); a request the upstream refused for its context (``context_length``,
        ``prompt_too_long``) keeps the ``max_tokens`` it declared, which the simulated engine
        refuses by its rules as the upstream did (vLLM 0.32.0 a ``max_tokens`` over the
        context; SGLang, TGI prompt + ``max_tokens`` over it)."""
        refused = outcome.status == "rejected_too_large" and outcome.reason in CONTEXT_REASONS
        self.write(request_row(ticket.request, outcome,
                               ticket.max_tokens if refused else None), now_s)

    def write(self, row: Mapping[str, Any], now_s: float) -> None:
        self._current(now_s).write_record(row)
        self._num_rows += 1
        if self._num_rows >= self.rotate_requests:
            self.close(now_s)

    def sample(self, row: Mapping[str, Any], now_s: float, *,
               kv_used_known: bool = True) -> None:
        """One timeline row of the gateway's state, written to the open directory (a
        directory opens with the last row before it, and, where the budget moved while none
        was open, with the rows at which it moved since the last closed: requests that
        waited then are the next directory's). ``kv_used_known``: whether its
        ``kv_used_tokens`` was read from the upstreams (else it holds 0, which the
        directory's summary says)."""
        self._capacity_tokens = max(int(row.get("kv_capacity_tokens") or 1), 1)
        self._last_sample = dict(row)
        self._last_known = kv_used_known
        if self._run is None and (not self._moved or self._moved[-1][0].get(
                "kv_capacity_tokens") != row.get("kv_capacity_tokens")):
            self._moved.append((self._last_sample, kv_used_known))
        if self._run is not None:
            self._run.write_timeline(self._from_base(row))
            self._num_unknown += not kv_used_known

    def _from_base(self, row: Mapping[str, Any]) -> dict[str, Any]:
        count = int(row.get("num_preemptions", 0)) - self._preemptions_base
        return {**row, "num_preemptions": max(count, 0)}

    def close(self, now_s: float) -> Path | None:
        """Turn the open directory into its parquet files and summary; the next row opens a new
        one. Returns the directory closed (``None`` when none was open)."""
        run = self._run
        if run is None:
            return None
        run.close()
        self._run = None
        if self._last_sample is not None:  # the state the next directory may start from
            self._moved = [(self._last_sample, self._last_known)]
        assumed = [] if not self._num_unknown else [
            kv_used_unknown_said(self._num_unknown, "the upstreams' /metrics")]
        self._finish(run.path, self.policy, self._capacity_tokens,
                     max(now_s - self._started_s, 0.0), assumed)
        self.closed.append(run.path)
        return run.path

    def restart(self, now_s: float, told: Mapping[str, Any]) -> Path | None:
        """Close the open directory (returned; ``None`` when none was open) and record
        ``told`` (``replay.json``'s ``server`` or ``servers``: what the upstreams now say of
        themselves) in the next: the upstreams were restarted with other settings."""
        closed = self.close(now_s)
        self.meta = {k: v for k, v in self.meta.items() if k not in ("server", "servers")}
        self.meta.update(told)
        return closed

    def new_policy(self, now_s: float, policy: Mapping[str, Any],
                   gateway: Mapping[str, Any] | None = None) -> Path | None:
        """The scenario was reloaded with another ``policy`` (as it describes itself) or other
        gateway caps (``gateway``: :func:`gateway_meta`): close the open directory (returned;
        ``None`` when none was open or nothing changed), whose rows ran under those before and
        say them, and record the new ones in the next, so that ``validate --records``
        simulates each directory under the policy, front door and lease TTL it ran with."""
        caps = dict(gateway or {})
        if dict(policy) == self.policy and all(self.meta.get(k, v) == v
                                               for k, v in caps.items()):
            return None
        closed = self.close(now_s)
        self.policy = dict(policy)
        self.meta["policy"] = dict(policy)
        self.meta.update(caps)
        if closed is not None:
            log.warning("%s closed: its requests ran under the policy and gateway caps before "
                        "the reload; the next run directory records the new ones", closed)
        return closed

    def _close_left_open(self, path: Path) -> None:
        """A directory a gateway left open (it stopped without closing it: killed, crashed):
        closed now from the rows it wrote, which no command could read before (its summary
        says what it holds and what it was given)."""
        try:
            meta = json.loads((path / META_FILE).read_text())
        except (OSError, ValueError):
            meta = {}
        given = meta.get("policy") if isinstance(meta, dict) else None
        policy: Mapping[str, Any] = given if isinstance(given, dict) else self.policy
        tiers = _recorded_tiers(meta)
        timeline = read_jsonl(path / TIMELINE_PART)
        capacity = max((int(r.get("kv_capacity_tokens") or 1) for r in timeline), default=1)
        times = [float(r["time_s"]) for r in timeline if "time_s" in r]
        self._finish(path, policy, capacity, max(times) - min(times) if times else 0.0, [
            "closed when kvbudget serve next started, from the rows written before the gateway "
            "stopped without closing it (killed or crashed): requests in flight then are not "
            "in it" + ("" if tiers else ", and its tiers are the restarted gateway's")],
            tiers or self.tiers)
        self.recovered.append(path)
        log.warning("%s was left open by a gateway that did not stop cleanly: closed now "
                    "from its rows", path)

    def _finish(self, path: Path, policy: Mapping[str, Any], capacity_tokens: int,
                wall_time_s: float, assumed: list[str],
                tiers: Sequence[TierConfig] | None = None) -> None:
        records, timeline = read_parts(path)
        gaps = token_gaps_of_parts(path)
        summary = summarize(
            {str(c): records[c].to_numpy() for c in records.columns},
            {str(c): timeline[c].to_numpy() for c in timeline.columns},
            tiers=self.tiers if tiers is None else tiers, kv_capacity_tokens=capacity_tokens,
            policy=str(policy.get("name", "")), seed=0, wall_time_s=wall_time_s,
            token_gaps=gaps,
            extra={"executor": "serve", "policy_params": _plain(policy),
                   "engine": {"num_engine_preemptions": int(timeline["num_preemptions"].max())
                              if len(timeline) else 0,
                              "num_gateway_revocations": int(records["num_preemptions"].sum())
                              if len(records) else 0},
                   "workload": {"num_requests": len(records), "num_recorded": len(records)},
                   "complete": True, **({"assumed": assumed} if assumed else {})},
        )
        write_outputs(path, records, timeline, summary, None, gaps)


def gateway_meta(config: GatewayConfig) -> dict[str, Any]:
    """``replay.json``'s keys for the gateway's own caps, read back by ``validate --records``
    into the simulated gateway (a scenario's ``[front_door]`` and ``lease_ttl_s``):
    ``front_door`` (its caps, ``tier_max_queued`` as a table; ``None``: none) and
    ``lease_ttl_s`` (``None``: a lease lasts until its request ends). Without them a directory
    of a gateway that refused at its front door was simulated as one that did not."""
    door = config.front_door
    kept = None if door is None else {**asdict(door),
                                      "tier_max_queued": dict(door.tier_max_queued)}
    return {"front_door": kept, "lease_ttl_s": config.lease_ttl_s}


def _recorded_tiers(meta: Any) -> tuple[TierConfig, ...]:
    """The tiers a directory's ``replay.json`` says its gateway admitted by (none where it does
    not say them, or says them wrong: a version before they were kept, a damaged file)."""
    given = meta.get("tiers") if isinstance(meta, dict) else None
    try:
        return tuple(TierConfig(**t) for t in given) if isinstance(given, list) else ()
    except (TypeError, ValueError):
        return ()


def _plain(value: Any) -> Any:
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return str(value)
