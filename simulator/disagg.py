"""Disaggregated prefill/decode: a prefill pool and a decode pool behind one gateway, the KV
moving between them over a link (``SimConfig(disaggregation=DisaggConfig(...))``;
:mod:`kvbudget.simulator.disagg_config`).

A request, once admitted, is routed to a prefill replica (the pool's router, ``prefix_affinity``
to follow prompt prefixes) and runs there with ``max_tokens = 1``, as vLLM's disaggregated
serving's proxy sends it to the prefill instance (vLLM's NIXL proxy,
``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``: ``do_remote_decode = True``,
``max_tokens = 1``, then the whole request to a decode instance with the returned
``kv_transfer_params``; Mooncake's ``mooncake_connector_proxy.py`` likewise). When its token is
sampled, the decode pool's router
picks a decode replica and the request joins that replica's waiting queue with its prompt's
KV remote: the decode replica allocates the prompt's blocks when it admits it, reads the KV
over the link (``WAITING_FOR_REMOTE_KVS``: :mod:`kvbudget.simulator.remote_kv`), then
computes the last prompt token, which gives the first output token the client sees, and
decodes. The prefill replica's token is not the client's (the proxy drops it), unless
``first_token = "prefill"`` (DistServe's, ``DisaggConfig.first_token``): the client gets it
when it is sampled, and the decode replica serves the request as a prompt one token longer
(that token) with one output token fewer, every prompt token computed but the new one.

The transfer takes ``latency_s + bytes / bandwidth``: ``bytes`` is the prompt's KV in whole
blocks of the prefill replica, per GPU (``ModelSpec.kv_bytes_per_token`` of the larger of the
two pools' per-GPU shards: each GPU moves its shard over its own link, in parallel).

A lease has a part per pool (``policies.stage_leases``): the policy's reservation on the
decode pool's KV (where the prompt and the output stay) and, on the prefill pool's KV, its
reservation for the request with ``max_tokens = 1``, held until the transfer ends; a request is
admitted only when both fit. See docs/disaggregation.md for what is modelled and what is not.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import numpy as np
import numpy.typing as npt
import simpy

from kvbudget.policies import BasePolicy, Gateway, GatewayConfig
from kvbudget.results.metrics import merge_gap_rows
from kvbudget.simulator.disagg_config import DisaggConfig, PoolConfig
from kvbudget.simulator.engine import Engine, EngineHooks, FloatArray, IntArray, RequestColumns
from kvbudget.simulator.engine_variants import make_engine
from kvbudget.simulator.exact_sum import to_float
from kvbudget.simulator.fast_decode import SkipAheadEngine
from kvbudget.simulator.fleet import Router
from kvbudget.simulator.fleet_events import FleetEvents
from kvbudget.simulator.fleet_ties import tie_replicas
from kvbudget.simulator.remote_kv import RemoteLoads
from kvbudget.simulator.replica_totals import ReplicaTotals
from kvbudget.simulator.served import pool_entry
from kvbudget.simulator.serving import RequestFigures
from kvbudget.simulator.sim_config import ReplicaSetup, SimConfig
from kvbudget.simulator.token_segments import UnreadSegments
from kvbudget.workloads import Workload

__all__ = ["DisaggFleet", "pool_setup"]

NOWHERE, PREFILL, DECODE = 0, 1, 2  # a row's stage


def pool_setup(config: SimConfig, pool: PoolConfig, *, decode: bool) -> ReplicaSetup:
    """A pool's replicas' configuration: its GPU and engine knobs over the run's (a decode
    replica without prefix caching: its prompts' KV comes over the link; ``skip_ahead`` the
    run's)."""
    gpu = pool.gpu or config.gpu
    # the speed-up is the run's choice (it changes no result)
    engine = replace(pool.engine or config.engine, skip_ahead=config.engine.skip_ahead)
    if decode:
        engine = replace(engine, enable_prefix_caching=False)
    own = replace(config, gpu=gpu, engine=engine, disaggregation=None,
                  cost_model=config.cost_model if gpu == config.gpu else None)
    try:
        return own.replica_setup()
    except ValueError as exc:  # a model that does not fit: the pool's own TP is the remedy
        name = "decode" if decode else "prefill"
        raise ValueError(f"disaggregation.{name}: " + str(exc).replace(
            "at engine.tensor_parallel_size=",
            f"at disaggregation.{name}.engine.tensor_parallel_size=")) from None


class DisaggFleet(ReplicaTotals):
    """A prefill pool and a decode pool that look like one engine to the driver
    (``ServingEngine``). Every replica's arrays are indexed by workload rows."""

    def __init__(self, env: simpy.Environment, workload: Workload, priority: IntArray,
                 config: SimConfig, hooks: EngineHooks, policy: BasePolicy, *,
                 gateway_config: Callable[[int, int | None], GatewayConfig]) -> None:
        d = config.disaggregation
        assert isinstance(d, DisaggConfig)
        self.config, self.hooks, self.w, self.env, self.disagg = config, hooks, workload, env, d
        n = len(workload)
        self.events = FleetEvents(env, workload.arrival_s, config.closed_loop is None,
                                  self._next_timer_s, config.timeline_period_s)
        p_pool, d_pool = d.pools
        self.setups = (pool_setup(config, p_pool, decode=False),
                       pool_setup(config, d_pool, decode=True))
        columns = RequestColumns.of(workload, priority)
        ones = np.ones(n, np.int64)  # the prefill side's max_tokens = 1
        p_cols = replace(columns, output_tokens=ones, max_output_tokens=ones)
        d_cols = replace(columns, prefix_hashes=None, prefix_offsets=None)
        self._prefill_token = d.first_token == "prefill"
        if self._prefill_token:  # the decode replica continues from the prefill's token
            d_cols = _after_first_token(d_cols)
        self._decode_prompt: list[int] = d_cols.prompt_tokens.tolist()
        self.prefill = [self._engine(self.setups[0], p_cols, r, False)
                        for r in range(p_pool.num_replicas)]
        self.decode = [self._engine(self.setups[1], d_cols, r, True)
                       for r in range(d_pool.num_replicas)]
        self.replicas: list[Engine] = [*self.prefill, *self.decode]
        # the run's KV figures (the timeline's KV columns, the summary's kv block) are the
        # decode pool's, whose capacity is the gateway's budget; the prefill pool's beside them
        self.kv_from = len(self.prefill)
        self._everyone = (list(range(len(self.prefill))), list(range(len(self.decode))))
        self._bytes_per_token = max(
            s.model.kv_bytes_per_token(s.engine.tensor_parallel_size, s.engine.kv_cache_dtype)
            for s in self.setups)
        self._bandwidth = d.link.bandwidth(self.setups[0].gpu)
        # each row's transfer seconds (:meth:`transfer_s`), all at once: the same arithmetic
        bs = self.prefill[0].block_size
        tokens = -(-workload.prompt_tokens.astype(np.int64) // bs) * bs
        self._transfer_rows: list[float] = (
            d.link.transfer_latency_s + tokens * self._bytes_per_token / self._bandwidth).tolist()
        # each row's stage, replicas and transfer (lists: a request's calls read and write
        # them one row at a time; the records' columns are made from them at the end)
        self.stage = [NOWHERE] * n
        self.prefill_replica = [-1] * n
        self.decode_replica = [-1] * n
        self.transfer_start_s = [math.nan] * n
        self.transfer_end_s = [math.nan] * n
        # whether those are the row's latest attempt's (:meth:`new_attempt`)
        self._latest = [True] * n
        self._load_ends: list[tuple[float, int]] = []  # (end, row) of the loads, some ended
        # (each replica's loads write the transfers' records: RemoteLoads.start_load)
        self.loads = [RemoteLoads(env, e, self._transfer_rows, self.transfer_start_s,
                                  self.transfer_end_s, self._load_ends) for e in self.decode]
        # whether a row fits each pool (its replicas share one setup and one set of columns:
        # it fits on all of them or on none; :meth:`fits`, :meth:`_allowed`)
        fits_p, fits_d = self.prefill[0].fits_rows(), self.decode[0].fits_rows()
        self._fits_p: list[bool] = fits_p.tolist()
        self._fits_d: list[bool] = fits_d.tolist()
        self._fits_both: list[bool] = (fits_p & fits_d).tolist()
        for e, loads in zip(self.decode, self.loads, strict=True):
            e.remote = loads
            # a decode replica's next external event is a KV load's request becoming
            # schedulable: its loads' notices' own method, without a call between
            e.hooks = replace(e.hooks, next_external_s=loads.notices.next_due_s)
        caps_p = [e.capacity_tokens for e in self.prefill]
        caps_d = [e.capacity_tokens for e in self.decode]
        # each row's tokens as the routers count them, once for both pools
        row_tokens: list[int] = (workload.prompt_tokens.astype(np.int64)
                                 + workload.max_output_tokens).tolist()
        self.router_p = Router(p_pool.router, caps_p, workload, row_tokens)
        self.router_d = Router(d_pool.router, caps_d, workload, row_tokens)
        self.capacity_tokens = sum(caps_d)  # the gateway's budget: the decode pool's KV
        self.num_gpu_blocks = sum(e.num_gpu_blocks for e in self.decode)
        self.block_size = self.decode[0].block_size
        self._gateway_samples: list[tuple[int, int]] = []
        env.process(self._sample_gateway())
        # a lease's part on each pool: the decode pool's (the budget), the prefill pool's
        self.gateway = Gateway(replace(
            gateway_config(config.gateway_capacity_tokens or self.capacity_tokens, max(caps_d)),
            first_stage_capacity_tokens=sum(caps_p)), policy)
        self.ties = tie_replicas(env, self.replicas)

    def _engine(self, setup: ReplicaSetup, columns: RequestColumns, r: int,
                decode: bool) -> Engine:
        on_finish = partial(self._decoded if decode else self._prefilled, r)
        hooks = EngineHooks(on_finish=on_finish, on_preempt=self._preempted,
                            next_external_s=partial(self._next_touch_s, r),
                            gateway_state=_no_gateway)
        engine = make_engine(self.env, setup, columns, hooks,
                             timeline_period_s=self.config.timeline_period_s)
        if isinstance(engine, SkipAheadEngine):
            engine.planner.tie = self.events.first_tie
        if not decode:  # its gaps are never read (token_gaps)
            engine.segments = UnreadSegments(len(self.w))
        else:
            # a decode replica's next external event is a KV load's request becoming
            # schedulable (LoadNotices.next_due_s), which joins the front of the
            # waiting queue at a step boundary (RemoteLoads.promote): a decode run planned to
            # it ends with the step in progress then, not a step past it
            engine.runs_past_external = False
        return engine

    # --- the link ------------------------------------------------------------------------------
    def transfer_s(self, i: int) -> float:
        """Seconds row ``i``'s prompt KV takes over the link (whole blocks of the prefill
        replica, each GPU's shard over its own link)."""
        return self._transfer_rows[i]

    def _next_load_end_s(self) -> float:
        """The earliest end of a load in progress on any decode replica (inf: none), from
        one heap of the loads' ends (an entry whose load ended or was cancelled goes when it
        reaches the top)."""
        ends = self._load_ends
        while ends:
            end, i = ends[0]
            d = self.decode_replica[i]
            if d >= 0 and self.loads[d].loading.get(i) == end:
                return end
            heapq.heappop(ends)
        return math.inf

    @property
    def on_transfer_end(self) -> Callable[[int, float], None] | None:
        """The driver's: the gateway is told a request's KV has moved (its prefill part
        goes), ``(row, now)``; each decode replica's loads call it."""
        return self.loads[0].on_end

    @on_transfer_end.setter
    def on_transfer_end(self, tell: Callable[[int, float], None] | None) -> None:
        for loads in self.loads:
            loads.on_end = tell

    # --- a replica's hooks ------------------------------------------------------------------
    # (each hook touches other replicas as replica ``r``'s step end does: ``ties.actor``, kept
    # for the instant: what follows from it then follows from that step end)
    def _prefilled(self, r: int, i: int, t: float) -> None:
        """Prefill replica ``r`` sampled row ``i``'s token: to a decode replica, which it
        joins with its KV remote (unless its earlier attempt's abort waits there still: it
        then computes its prompt there); or, when that token is the client's and its only
        one, done."""
        self.router_p.leave(i, r)
        if self._prefill_token and self.w.output_tokens.item(i) == 1:
            self.stage[i] = NOWHERE
            self._finished(r, i, t)
            return
        d = self.router_d.route(i, self._everyone[1] if self._fits_d[i] else [0])
        self.decode_replica[i] = d
        self.stage[i] = DECODE
        ties = self.ties
        if ties is not None:
            ties.actor, ties.actor_s = r, t
        pending = self.loads[d].pending
        pending.add(i)  # its KV is remote (before it is added: a run may take it in at once)
        if not self.decode[d].add_remote_request(i, self._decode_prompt[i] - 1):
            pending.remove(i)  # its earlier attempt's abort waits: computed there

    def _decoded(self, r: int, i: int, t: float) -> None:
        self.router_d.leave(i, r)
        self._finished(len(self.prefill) + r, i, t)

    def _finished(self, actor: int, i: int, t: float) -> None:
        """Row ``i`` finished at ``t`` on replica ``actor`` (its step end's tie)."""
        ties = self.ties
        if ties is not None:
            ties.actor, ties.actor_s = actor, t
        self.hooks.on_finish(i, t)

    def _preempted(self, i: int, t: float) -> None:
        self.hooks.on_preempt(i, t)

    def _next_touch_s(self, r: int) -> float:
        """Where prefill replica ``r``'s decode runs are planned to end (a plan only: whatever
        reaches a replica mid-run, an arrival, a hand-off, an abort, ends the run where
        stepping would, ``fleet.Fleet._next_touch_s``): the fleet's next event or a load's end
        (which may admit a request). (A decode replica's is its loads' notices': __init__.)"""
        return min(self.hooks.next_external_s(), self._next_load_end_s())

    def _next_timer_s(self) -> float | None:
        return self.gateway.next_timer_s()

    # --- the engine interface the driver uses ----------------------------------------------------
    def fits(self, i: int) -> bool:
        """Whether row ``i`` could run on both pools (a pool's replicas share one setup and
        one set of columns: it fits on all of them or on none)."""
        return self._fits_both[i]

    def add_request(self, i: int) -> str:
        # (the replicas that could run it: all of the pool, or the first; fits, _allowed)
        r = self.router_p.route(i, self._everyone[0] if self._fits_p[i] else [0])
        self.stage[i] = PREFILL
        self._latest[i] = True
        self.prefill_replica[i] = r
        self.decode_replica[i] = -1
        self.transfer_start_s[i] = self.transfer_end_s[i] = math.nan
        why = self.prefill[r].add_request(i)
        if why:
            self.router_p.leave(i, r)
            self.stage[i] = NOWHERE
        return why

    def new_attempt(self, i: int) -> None:
        """Row ``i``'s client sent it again: its records' replicas and transfer are this
        attempt's, none until it reaches a prefill replica (:meth:`add_request`); an earlier
        attempt's stay where the engine reads them (its output tokens)."""
        self._latest[i] = False

    def abort_request(self, i: int) -> None:
        stage = self.stage[i]
        if stage == PREFILL:
            r = self.prefill_replica[i]
            self.prefill[r].abort_request(i)
            self.router_p.leave(i, r)
        elif stage == DECODE:
            d = self.decode_replica[i]
            self.router_d.leave(i, d)
            self.loads[d].cancel(i)
        self.stage[i] = NOWHERE

    def output_tokens_of(self, i: int) -> int:
        d = self.decode_replica[i]
        decoded = 0 if d < 0 else self.decode[d].output_tokens_of(i)
        if not self._prefill_token:
            return decoded
        p = self.prefill_replica[i]
        return decoded + (0 if p < 0 else self.prefill[p].output_tokens_of(i))

    def forget_first_token(self, i: int) -> None:
        for e in self.replicas:
            e.forget_first_token(i)

    # --- figures ---------------------------------------------------------------------------
    @property
    def recomputed_tokens(self) -> IntArray:
        return np.asarray(sum(e.recomputed_tokens for e in self.replicas), np.int64)

    @property
    def num_preemptions(self) -> IntArray:
        return np.asarray(sum(e.num_preemptions for e in self.replicas), np.int64)

    def _decode_min(self, name: str, pool: list[Engine] | None = None) -> FloatArray:
        out = np.full(len(self.stage), np.nan)
        for e in self.decode if pool is None else pool:
            out = np.fmin(out, getattr(e, name))
        return out

    @property
    def first_token_s(self) -> FloatArray:
        """The client's first token: the decode replica's (the prefill's is dropped), or
        the prefill replica's (``first_token = "prefill"``)."""
        return self._decode_min("first_token_s", self.prefill if self._prefill_token else None)

    @property
    def finished_s(self) -> FloatArray:
        done = self._decode_min("finished_s")
        if self._prefill_token:  # a one-token output finishes on its prefill replica
            one = self.w.output_tokens == 1
            done[one] = self._decode_min("finished_s", self.prefill)[one]
        return done

    def output_tokens(self) -> IntArray:
        out = np.zeros(len(self.stage), np.int64)
        for pool, replica in ((self.decode, self.decode_replica),
                              (self.prefill if self._prefill_token else [], self.prefill_replica)):
            rows = np.array(replica, np.int64)
            for r, e in enumerate(pool):
                mask = rows == r
                out[mask] += e.output_tokens()[mask]
        return out

    def token_gaps(self, keep: npt.NDArray[np.bool_], tier: IntArray
                   ) -> tuple[IntArray, FloatArray, IntArray]:
        """The decode replicas' gaps (a prefill replica samples one token: none)."""
        num_codes = int(tier.max()) + 1 if tier.size else 0
        parts = [merge_gap_rows(*e.token_gaps(keep, tier), num_codes) for e in self.decode]
        if self._prefill_token:  # from the prefill's token to the decode replica's first
            rows = np.flatnonzero(keep & np.isfinite(self._decode_min("finished_s")))
            gap = (self._decode_min("first_token_s")[rows]
                   - self._decode_min("first_token_s", self.prefill)[rows])
            parts.append(merge_gap_rows(tier[rows], gap, np.ones(rows.size, np.int64),
                                        num_codes))
        codes, gaps, counts = zip(*parts, strict=True)
        return (np.concatenate(codes).astype(np.int64), np.concatenate(gaps).astype(np.float64),
                np.concatenate(counts).astype(np.int64))

    def request_figures(self, keep: npt.NDArray[np.bool_], tier: IntArray) -> RequestFigures:
        return RequestFigures(self.output_tokens(), self.first_token_s, self.finished_s,
                              self.num_preemptions, self.recomputed_tokens,
                              *self.token_gaps(keep, tier))

    def record_columns(self) -> dict[str, Any]:
        """The records' disaggregation columns (``results.records.OPTIONAL_RECORD_COLUMNS``):
        the replicas and transfer of each row's last attempt (-1, NaN: it reached none)."""
        stale = ~np.array(self._latest, np.bool_)
        columns = {"prefill_replica": np.array(self.prefill_replica, np.int64),
                   "decode_replica": np.array(self.decode_replica, np.int64),
                   "transfer_start_s": np.array(self.transfer_start_s, np.float64),
                   "transfer_end_s": np.array(self.transfer_end_s, np.float64)}
        for name, column in columns.items():
            column[stale] = -1 if name.endswith("replica") else math.nan
        return columns

    def _idle(self) -> bool:
        return all(e.idle for e in self.replicas) and not any(x.notices for x in self.loads)

    def prefill_timeline(self, rows: int) -> dict[str, npt.NDArray[np.int64]]:
        """The timeline's prefill-pool columns (``OPTIONAL_TIMELINE_COLUMNS``) over its
        ``rows`` samples: the pool's tokens in allocated KV blocks and its capacity, summed as
        :attr:`timeline` sums the decode pool's (an idle replica its capacity)."""
        used = np.zeros(rows, np.int64)
        cap = np.zeros(rows, np.int64)
        for e in self.prefill:
            tl = e.timeline
            for m in range(rows):
                if m < len(tl):
                    used[m] += tl[m][1]
                    cap[m] += tl[m][3]
                else:
                    cap[m] += e.capacity_tokens
        return {"prefill_kv_used_tokens": used, "prefill_kv_capacity_tokens": cap}

    def stats(self, span_s: float = math.nan) -> dict[str, object]:
        """The deployment's figures; each pool's KV capacity and mean use over ``span_s``
        (the run's span, first arrival to the last step's end: the summary's kv block's)."""
        end_s = np.array(self.transfer_end_s, np.float64)
        moved = np.isfinite(end_s)
        seconds = end_s[moved] - np.array(self.transfer_start_s, np.float64)[moved]
        pools = {}
        for name, pool, setup, engines in (("prefill", self.disagg.prefill, self.setups[0],
                                            self.prefill),
                                           ("decode", self.disagg.decode, self.setups[1],
                                            self.decode)):
            assert pool is not None
            pools[name] = {
                **pool_entry(pool, setup),
                **_kv_used(engines, span_s),
                "num_steps": sum(e.num_steps for e in engines),
                "num_preemptions": sum(e.num_preemptions_total for e in engines),
            }
        caps = self.prefill[0].stats().get("queue_caps")  # (the decode pool has none)
        return {
            "engine": self.config.engine.name,
            # the prefill pool's (the decode pool's prompts come over the link)
            "prefix_caching": self.prefill[0].kv.prefix is not None,
            **({"queue_caps": caps} if caps else {}),
            "disaggregation": {
                **pools,
                "first_token": self.disagg.first_token,  # which pool's token is the client's
                "link": self.disagg.link.name,
                "link_bandwidth_bytes_s": self._bandwidth,
                "link_latency_s": self.disagg.link.transfer_latency_s,
                "kv_bytes_per_token_per_gpu": self._bytes_per_token,
                "num_transfers": int(moved.sum()),
                "transfer_s_mean": float(seconds.mean()) if seconds.size else None,
            },
        }


def _kv_used(engines: list[Engine], span_s: float) -> dict[str, float | int | None]:
    """A pool's KV capacity in tokens and its tokens in use, time-weighted over ``span_s``,
    in tokens and as a fraction of the capacity (``None`` over no span)."""
    capacity = sum(e.capacity_tokens for e in engines)
    mean = (to_float(sum(e.kv_token_seconds_exact() for e in engines)) / span_s
            if span_s > 0 else None)
    return {"kv_capacity_tokens": capacity, "kv_used_mean": mean,
            "kv_used_mean_fraction": None if mean is None else mean / capacity}


def _after_first_token(cols: RequestColumns) -> RequestColumns:
    """A decode replica's columns when the prefill's token is the client's first: the prompt
    and that token, one output token fewer, the same tokens in all (a one-token output never
    reaches a decode replica: its row stays as it is)."""
    most = cols.output_tokens if cols.max_output_tokens is None else cols.max_output_tokens
    moved = (cols.output_tokens > 1).astype(np.int64)
    return replace(cols, prompt_tokens=cols.prompt_tokens + moved,
                   output_tokens=cols.output_tokens - moved, max_output_tokens=most - moved)


def _no_gateway() -> tuple[int, int]:
    return 0, 0  # the gateway is sampled on its own (_sample_gateway)
