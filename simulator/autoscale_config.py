"""``[fleet.autoscale]``: a fleet whose replica count an autoscaler moves, as the Kubernetes
Horizontal Pod Autoscaler does when KEDA feeds it a vLLM Prometheus metric.

The settings and their defaults, each from its source:

* ``metric``: the vLLM 0.32.0 metric the scaler reads of each serving replica
  (``vllm/v1/metrics/loggers.py``): ``vllm:num_requests_running`` (the gauge of line 528,
  "Number of requests in model execution batches"), ``vllm:num_requests_waiting`` (line 538),
  ``vllm:kv_cache_usage_perc`` (line 620, "1 means 100 percent usage"), or
  ``vllm:request_success`` (the counter of line 809) read as a rate over ``rate_window_s``
  (PromQL ``rate(vllm:request_success_total[1m])``, requests per second);
* ``target``: the metric's value per replica the scaler aims at (an HPA ``AverageValue``
  target of an external metric, the way KEDA's Prometheus scaler exposes a query):
  ``desiredReplicas = ceil(currentReplicas * currentMetricValue / target)``, where
  ``currentMetricValue`` is the serving replicas' average (the HPA algorithm,
  https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/#algorithm-details);
* ``tolerance`` 0.1: no change while the ratio is within 10 % of 1 (the same page:
  ``--horizontal-pod-autoscaler-tolerance``, default 0.1);
* ``polling_interval_s`` 30: how often the metric is read and the rule applied (KEDA's
  ``pollingInterval``, "Default: 30 seconds", https://keda.sh/docs/2.15/reference/scaledobject-spec/);
* ``scale_down_stabilization_s`` 300 and ``scale_up_stabilization_s`` 0: scale down to the
  highest recommendation of the last 300 s, scale up at once (the HPA's default behaviour,
  ``stabilizationWindowSeconds``: "For scale up: 0 ... For scale down: 300", Kubernetes API
  ``HPAScalingRules``); a scale-up adds at most ``max(4, current)`` replicas an evaluation (the
  default ``scaleUp`` policies: 4 pods or 100 % a period, the higher);
* ``scale_up_delay_s``: from the decision to the replica taking requests (the pod's cold
  start). ``None``: the model's weights at the GPU's host-to-device (PCIe) bandwidth
  (``perf.hardware.GPUSpec.pcie_bandwidth_bytes_s``, each GPU loading its shard) plus
  ``engine_start_s``;
* ``engine_start_s`` 14.18: vLLM's engine initialisation after the weights are loaded
  (profile, KV cache, CUDA-graph warm-up): "init engine (profile, create kv cache, warmup
  model) took 14.18 seconds" for Meta-Llama-3-8B (vllm-project/vllm pull request 11005); the
  same log line reads 34.11 s in vllm-project/vllm issue 20264, so give yours;
* ``initial_replicas``: the replicas up at time 0 (``None``: ``min_replicas``).

Scale-down drains: a replica chosen to go (booting ones first, then the one up last) takes no
new request and is removed when its last one finishes; no request is lost. KEDA's
``cooldownPeriod`` (300 s) acts only between one replica and none, which ``min_replicas >= 1``
rules out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["AUTOSCALE_METRICS", "AutoscaleConfig", "AutoscaleMetric", "cold_start_s"]

AutoscaleMetric = Literal["vllm:num_requests_running", "vllm:num_requests_waiting",
                          "vllm:kv_cache_usage_perc", "vllm:request_success"]
AUTOSCALE_METRICS: tuple[str, ...] = ("vllm:num_requests_running", "vllm:num_requests_waiting",
                                      "vllm:kv_cache_usage_perc", "vllm:request_success")

KEDA_POLLING_INTERVAL_S = 30.0
HPA_TOLERANCE = 0.1
HPA_SCALE_DOWN_STABILIZATION_S = 300.0
HPA_SCALE_UP_PODS = 4
VLLM_ENGINE_START_S = 14.18
PROMQL_RATE_WINDOW_S = 60.0


@dataclass(frozen=True, slots=True)
class AutoscaleConfig:
    """The autoscaler of a fleet (see the module's docstring for each field's source)."""

    min_replicas: int = 1
    max_replicas: int = 4
    metric: AutoscaleMetric = "vllm:num_requests_running"
    target: float = 64.0
    polling_interval_s: float = KEDA_POLLING_INTERVAL_S
    tolerance: float = HPA_TOLERANCE
    scale_down_stabilization_s: float = HPA_SCALE_DOWN_STABILIZATION_S
    scale_up_stabilization_s: float = 0.0
    scale_up_delay_s: float | None = None
    engine_start_s: float = VLLM_ENGINE_START_S
    rate_window_s: float = PROMQL_RATE_WINDOW_S
    initial_replicas: int | None = None

    def __post_init__(self) -> None:
        where = "fleet.autoscale."
        for name in ("min_replicas", "max_replicas"):
            value = getattr(self, name)
            if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
                raise ValueError(f"{where}{name} must be an integer >= 1, got {value!r}")
        if self.min_replicas > self.max_replicas:
            raise ValueError(f"{where}min_replicas ({self.min_replicas}) must be <= "
                             f"max_replicas ({self.max_replicas})")
        if self.metric not in AUTOSCALE_METRICS:
            raise ValueError(f"{where}metric: unknown metric {self.metric!r}; known: "
                             f"{', '.join(AUTOSCALE_METRICS)}")
        _positive(where, "target", self.target)
        _positive(where, "polling_interval_s", self.polling_interval_s)
        _positive(where, "rate_window_s", self.rate_window_s)
        for name in ("tolerance", "scale_down_stabilization_s", "scale_up_stabilization_s",
                     "engine_start_s"):
            _non_negative(where, name, getattr(self, name))
        if self.scale_up_delay_s is not None:
            _non_negative(where, "scale_up_delay_s", self.scale_up_delay_s)
        # a field that nothing reads in this setting is refused, not dropped (its own default
        # is let through: it changes nothing either way)
        if self.metric != "vllm:request_success" and self.rate_window_s != PROMQL_RATE_WINDOW_S:
            raise ValueError(f"{where}rate_window_s: the rate window of vllm:request_success "
                             f"only; metric {self.metric!r} is read as it is (a gauge), got "
                             f"{self.rate_window_s!r}")
        if self.scale_up_delay_s is not None and self.engine_start_s != VLLM_ENGINE_START_S:
            raise ValueError(f"{where}engine_start_s: part of the cold start worked out when "
                             "scale_up_delay_s is left out; scale_up_delay_s is given "
                             f"({self.scale_up_delay_s!r} s): give one of them")
        if self.metric == "vllm:kv_cache_usage_perc" and self.target > 1:
            raise ValueError(f"{where}target: vllm:kv_cache_usage_perc is a fraction (1 means "
                             f"100 percent); the target must be in (0, 1], got {self.target!r}")
        n = self.initial_replicas
        if n is not None and not (isinstance(n, int) and self.min_replicas <= n
                                  <= self.max_replicas):
            raise ValueError(f"{where}initial_replicas must be an integer within [min_replicas, "
                             f"max_replicas] = [{self.min_replicas}, {self.max_replicas}], "
                             f"got {n!r}")

    @property
    def num_initial(self) -> int:
        return self.min_replicas if self.initial_replicas is None else self.initial_replicas

    def describe(self, scale_up_delay_s: float) -> dict[str, object]:
        """The settings a run assumed (the delay resolved) and where its delay came from:
        ``engine_start_s`` only where it is part of it (a given delay does not use it)."""
        given = self.scale_up_delay_s is not None
        return {
            "min_replicas": self.min_replicas, "max_replicas": self.max_replicas,
            "initial_replicas": self.num_initial, "metric": self.metric, "target": self.target,
            "polling_interval_s": self.polling_interval_s, "tolerance": self.tolerance,
            "scale_down_stabilization_s": self.scale_down_stabilization_s,
            "scale_up_stabilization_s": self.scale_up_stabilization_s,
            "scale_up_delay_s": scale_up_delay_s,
            "scale_up_delay": "given (fleet.autoscale.scale_up_delay_s)" if given
            else "worked out: the slowest GPU's weights at its PCIe bandwidth + engine_start_s",
            **({} if given else {"engine_start_s": self.engine_start_s}),
            **({"rate_window_s": self.rate_window_s}
               if self.metric == "vllm:request_success" else {}),
        }


def cold_start_s(weight_bytes_per_gpu: float, pcie_bandwidth_bytes_s: float,
                 engine_start_s: float) -> float:
    """A replica's cold start: its GPU's share of the weights over the host-to-device link,
    then the engine's start."""
    return weight_bytes_per_gpu / pcie_bandwidth_bytes_s + engine_start_s


def _positive(where: str, name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{where}{name} must be a finite number > 0, got {value!r}")


def _non_negative(where: str, name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
        raise ValueError(f"{where}{name} must be a finite number >= 0, got {value!r}")
