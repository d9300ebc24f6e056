"""A disaggregated deployment's configuration: a prefill pool, a decode pool and the link the KV
moves over (:class:`DisaggConfig`, ``SimConfig.disaggregation``; the run is
:mod:`kvbudget.simulator.disagg`).

Links (:data:`LINKS`), bandwidth per GPU and per direction (each GPU of a tensor-parallel
replica moves its own shard of the KV over its own link, as NIXL and Mooncake's transfer engine
do, one NIC per GPU):

* ``nvlink``: the GPU's own NVLink figure (``perf.hardware``'s
  ``interconnect_bandwidth_bytes_s``, per direction: H100 SXM 450 GB/s, half the 900 GB/s the
  NVIDIA H100 datasheet gives for both directions); prefill and decode in one NVLink domain;
* ``pcie``: the GPU's PCIe link (``pcie_bandwidth_bytes_s``: PCIe 5.0 x16 64 GB/s on H100);
* ``infiniband-ndr``: 400 Gb/s = 50 GB/s, NVIDIA ConnectX-7 (NDR), one per GPU in a DGX H100
  (NVIDIA DGX H100 user guide: eight single-port ConnectX-7 for the compute fabric);
* ``infiniband-hdr`` and ``roce-200``: 200 Gb/s = 25 GB/s, NVIDIA ConnectX-6 (HDR InfiniBand
  or 200 GbE RoCE), one per GPU in a DGX A100.

``latency_s`` (the fixed cost of one transfer: the read's set-up and the notification), unless
given, is the preset's (:data:`LINK_LATENCY_S`): on the RDMA links, 0.40 ms, from Mooncake's
vLLM v1 connector benchmark (kvcache-ai.github.io/Mooncake/performance/vllm-v1-support-benchmark
.html: 1 prefill + 1 decode instance of Qwen3-8B over 8 x 200 Gb/s RoCE; "actual transfer
time" 0.54 ms for 20 MB, 128 tokens, and 31.65 ms for 4.50 GB, 32,768 tokens; the line through
those two points has 0.40 ms of fixed cost and 144 GB/s); on NVLink and PCIe 0 (no published
figure found). The transfer's end is noticed at the decode engine's next step, as vLLM's
scheduler polls ``finished_recving``, which the engine model does by itself. ``bandwidth_bytes_s`` given
replaces the preset's (Mooncake's FAST '25 paper reports its transfer engine at 87 GB/s on
4 x 200 Gb/s and 190 GB/s on 8 x 400 Gb/s RoCE, below line rate: give such a measured figure).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from kvbudget.perf.hardware import GPUSpec, get_gpu
from kvbudget.perf.models import get_model
from kvbudget.simulator.engine_config import QUEUE_CAP_ENGINES, EngineConfig
from kvbudget.simulator.sim_config import ROUTERS, RouterName

if TYPE_CHECKING:
    from kvbudget.simulator.sim_config import SimConfig

__all__ = ["FIRST_TOKENS", "LINKS", "LINK_LATENCY_S", "DisaggConfig", "KVLink", "PoolConfig",
           "disagg_from_tables"]

GBIT = 1e9 / 8
LINKS: dict[str, float | None] = {
    "nvlink": None,  # the GPU's interconnect_bandwidth_bytes_s
    "pcie": None,  # the GPU's pcie_bandwidth_bytes_s
    "infiniband-ndr": 400 * GBIT,
    "infiniband-hdr": 200 * GBIT,
    "roce-200": 200 * GBIT,
}
"""Link presets: bandwidth per GPU and direction in bytes/s (None: the GPU's own figure)."""

MOONCAKE_TRANSFER_LATENCY_S = 0.54e-3 - 20e6 * (31.65e-3 - 0.54e-3) / (4.50e9 - 20e6)
"""0.40 ms: the fixed cost of one KV transfer over RDMA, the intercept of the line through
Mooncake's two published transfers (module doc): 0.54 ms for 20 MB, 31.65 ms for 4.50 GB."""
LINK_LATENCY_S: dict[str, float] = {
    "nvlink": 0.0, "pcie": 0.0,  # no published per-transfer figure found
    "infiniband-ndr": MOONCAKE_TRANSFER_LATENCY_S,
    "infiniband-hdr": MOONCAKE_TRANSFER_LATENCY_S,
    "roce-200": MOONCAKE_TRANSFER_LATENCY_S,
}
"""Each preset's fixed time per transfer (seconds), when ``link_latency_s`` is not given: the
RDMA links Mooncake's measured figure (measured on RoCE; InfiniBand takes the same verbs
path), the others 0."""


@dataclass(frozen=True, slots=True)
class KVLink:
    """The link between the pools: a preset name (:data:`LINKS`), optionally its bandwidth per
    GPU (bytes/s) and a fixed time per transfer (None: the preset's, :data:`LINK_LATENCY_S`)."""

    name: str = "infiniband-ndr"
    bandwidth_bytes_s: float | None = None
    latency_s: float | None = None

    def __post_init__(self) -> None:
        if self.name not in LINKS:
            raise ValueError(f"disaggregation.link: unknown link {self.name!r}; known: "
                             f"{', '.join(LINKS)}")
        bw = self.bandwidth_bytes_s
        if bw is not None and (isinstance(bw, bool) or not (math.isfinite(bw) and bw > 0)):
            raise ValueError(f"disaggregation.link_bandwidth_gb_s must be > 0, got {bw / 1e9!r}")
        lat = self.latency_s
        if lat is not None and (isinstance(lat, bool) or not (math.isfinite(lat) and lat >= 0)):
            raise ValueError(f"disaggregation.link_latency_s must be >= 0, got {lat!r}")

    @property
    def transfer_latency_s(self) -> float:
        """The fixed time of one transfer: the given one, else the preset's."""
        return LINK_LATENCY_S[self.name] if self.latency_s is None else self.latency_s

    def bandwidth(self, gpu: GPUSpec) -> float:
        """Bytes/s per GPU and direction on ``gpu`` (the prefill pool's)."""
        if self.bandwidth_bytes_s is not None:
            return self.bandwidth_bytes_s
        preset = LINKS[self.name]
        if preset is not None:
            return preset
        if self.name == "nvlink":
            if gpu.interconnect != "nvlink" or gpu.interconnect_bandwidth_bytes_s is None:
                raise ValueError(f"disaggregation.link: {gpu.name} has no NVLink; use pcie, "
                                 "infiniband-ndr, infiniband-hdr or roce-200")
            return gpu.interconnect_bandwidth_bytes_s
        return gpu.pcie_bandwidth_bytes_s


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """One pool: its replicas, their GPU (``None``: the run's), engine knobs (``None``: the
    run's) and router."""

    num_replicas: int = 1
    gpu: str | None = None
    engine: EngineConfig | None = None
    router: RouterName = "least_tokens"

    def check(self, where: str) -> None:
        n = self.num_replicas
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{where}.num_replicas must be an integer >= 1, got {n!r}")
        if self.router not in ROUTERS:
            raise ValueError(f"{where}.router: unknown router {self.router!r}; known routers: "
                             f"{', '.join(ROUTERS)}")


FIRST_TOKENS = ("decode", "prefill")
"""Where the client's first token comes from (``DisaggConfig.first_token``)."""


@dataclass(frozen=True, slots=True)
class DisaggConfig:
    """A prefill pool, a decode pool and the link between them. Both pools are required.

    ``first_token``: ``decode`` (vLLM's P/D, the default): the prefill replica's token is
    dropped by the proxy and the decode replica computes the last prompt token, which samples
    the client's first token (vLLM 0.32.0 ``v1/core/sched/scheduler.py`` lines 3170-3172,
    ``num_computed_tokens = num_tokens - 1``); ``prefill`` (DistServe's): the prefill instance's
    token goes to the client when it is sampled (``distserve/single_stage_engine.py``, commit
    82831f1, lines 374-385: ``engine_on_new_step_output_callback`` at ``ContextEnd``), a request
    whose output is that one token finishes there (lines 393-403: only an unfinished request
    migrates), and the decode instance, given the prompt's KV, decodes from that token on (its
    first step computes the token's KV and samples the second)."""

    prefill: PoolConfig | None = None
    decode: PoolConfig | None = None
    link: KVLink = KVLink()
    first_token: str = "decode"

    def __post_init__(self) -> None:
        if self.first_token not in FIRST_TOKENS:
            raise ValueError(f"disaggregation.first_token must be 'decode' or 'prefill', got "
                             f"{self.first_token!r}")
        for where, pool in (("prefill", self.prefill), ("decode", self.decode)):
            if pool is None:
                raise ValueError(f"disaggregation.{where}: a disaggregated deployment needs a "
                                 f"{where} pool ([disaggregation.{where}] with num_replicas)")
            pool.check(f"disaggregation.{where}")

    @property
    def pools(self) -> tuple[PoolConfig, PoolConfig]:
        """(prefill, decode)."""
        assert self.prefill is not None and self.decode is not None
        return self.prefill, self.decode

    def check(self, config: SimConfig) -> None:
        """What a run of ``config`` needs of the pools: vLLM engines (its KV connector), GPUs
        and tensor parallelism the model allows, no ``[fleet]`` beside."""
        if config.fleet is not None:
            raise ValueError("disaggregation: not with [fleet] (each pool has its own "
                             "num_replicas and router)")
        for where, pool in zip(("prefill", "decode"), self.pools, strict=True):
            engine = pool.engine or config.engine
            if engine.name != "vllm":
                raise ValueError(f"disaggregation.{where}.engine.name: disaggregated serving is "
                                 f"modelled for vllm (its KV connector), got {engine.name!r}")
            for knob in ("speculative_config", "kv_offloading_size"):
                if getattr(engine, knob) is not None:
                    raise ValueError(f"disaggregation.{where}.engine.{knob}: not modelled with "
                                     "disaggregated serving yet")
            for knob in QUEUE_CAP_ENGINES:
                if where == "decode" and getattr(engine, knob) is not None:
                    raise ValueError(
                        f"disaggregation.decode.engine.{knob}: not modelled: a decode replica "
                        "takes its requests from the prefill pool's hand-off, and its own "
                        "server's queue cap is not applied; give the cap to the prefill pool "
                        f"(disaggregation.prefill.engine.{knob}), whose server a request "
                        "reaches first")
            if where == "decode" and engine.scheduling_policy != "fcfs":
                raise ValueError("disaggregation.decode.engine.scheduling_policy: only fcfs is "
                                 "modelled on a decode replica (vLLM drains the requests whose "
                                 f"KV arrived first), got {engine.scheduling_policy!r}")
            if pool.gpu is not None:
                try:
                    get_gpu(pool.gpu)
                except ValueError as exc:
                    raise ValueError(f"disaggregation.{where}.gpu: {exc}") from None
            try:
                get_model(config.model).check_tensor_parallel(engine.tensor_parallel_size)
            except ValueError as exc:
                raise ValueError(f"disaggregation.{where}.engine.{exc}") from None


def _pool(where: str, table: Mapping[str, Any] | None, engine: Mapping[str, Any]
          ) -> PoolConfig | None:
    """A pool from its scenario table, its ``engine`` knobs over the scenario's ``[engine]``."""
    if table is None:
        return None
    known = {f.name for f in fields(EngineConfig)}
    for key in table["engine"]:
        if key not in known:
            raise ValueError(f"disaggregation.{where}.engine.{key}: unknown engine knob; known: "
                             f"{', '.join(sorted(known))}")
    if where == "decode" and table["engine"].get("enable_prefix_caching"):
        # (a library PoolConfig's engine is the whole table, the run's value in it: not told)
        raise ValueError("disaggregation.decode.engine.enable_prefix_caching: not modelled: a "
                         "decode replica runs without prefix caching (its prompt's KV comes "
                         "over the link); leave it out or set it false")
    for knob in QUEUE_CAP_ENGINES:  # the scenario's [engine] cap, which the decode pool takes
        if where == "decode" and engine.get(knob) is not None and knob not in table["engine"]:
            raise ValueError(
                f"engine.{knob}: with [disaggregation] it is each pool's server's own cap and "
                "a decode replica's is not modelled: give it to the prefill pool "
                f"(disaggregation.prefill.engine.{knob}), whose server a request reaches first")
    try:
        knobs = EngineConfig(**{**engine, **table["engine"]})
    except (TypeError, ValueError) as exc:  # a message naming engine.KNOB: the pool's KNOB
        text = str(exc)
        if text.startswith("engine."):
            raise ValueError(f"disaggregation.{where}.{text}") from None
        raise ValueError(f"disaggregation.{where}.engine: {text}") from None
    return PoolConfig(table["num_replicas"], table["gpu"], knobs, table["router"])


def disagg_from_tables(tables: Mapping[str, Any], engine: Mapping[str, Any]) -> DisaggConfig:
    """The configuration of a scenario's ``[disaggregation]`` tables (``engine``: its
    ``[engine]`` table, which each pool's ``engine`` knobs override)."""
    bw = tables["link_bandwidth_gb_s"]
    link = KVLink(tables["link"], None if bw is None else bw * 1e9, tables["link_latency_s"])
    return DisaggConfig(_pool("prefill", tables["prefill"], engine),
                        _pool("decode", tables["decode"], engine), link, tables["first_token"])
