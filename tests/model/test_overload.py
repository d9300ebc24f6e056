"""Past saturation: the engine's queue against a fluid model worked by hand.

Under a test cost model every step takes a constant ``delta`` seconds, and every request has a
fixed prompt and output, so a request holds its place in the batch for exactly ``K`` steps
(its prefill step samples the first token, ``K - 1`` decode steps the rest): its service time
is ``S = K * delta``. When ``c`` requests at most can run at once (``max_num_seqs``, or the KV
blocks when each request needs a fixed number of them), the engine serves ``c / S`` requests
a second. Requests arrive every ``1 / lam`` seconds with ``lam > c / S``. The fluid model of
this queue (deterministic arrivals and service, so only the discreteness of steps and arrivals
separates it from the engine: a few requests at most):

- started by ``t``: ``c t / S``; completed by ``t``: ``c (t - S) / S``;
- waiting at ``t``, while requests arrive: ``lam t - c t / S``, growing at ``lam - c / S``;
  after the last arrival it drains at ``c / S`` a second;
- with clients that give up ``T`` seconds after they sent a request (``T > S``; the engine
  aborts what they leave), served first come first served: the request started at ``t``
  arrived at ``a(t) = t c / (S lam)`` and has waited ``w(t) = t (1 - 1/rho)`` with
  ``rho = lam S / c``. It completes only if ``w + S <= T``, so completions stop at
  ``t1 = (T - S) / (1 - 1/rho)``, after about ``c t1 / S`` of them. After ``t1`` every started
  request is aborted before it ends: ``w`` keeps growing towards ``T - c / lam`` (the servers
  start requests as fast as they give up), never back below ``T - S``. Nothing completes any
  more although the engine stays busy: the goodput collapse of a FIFO server under client
  timeouts, which a capacity answer past saturation has to show.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import TierConfig, make_policy
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import from_columns


def overloaded(*, lam: float, n: int, prompt: int, output: int, delta_s: float,
               num_gpu_blocks: int, max_num_seqs: int, skip_ahead: bool,
               timeout_s: float | None = None) -> RunResult:
    arrival = np.arange(n) / lam
    w = from_columns(arrival, np.full(n, prompt), np.full(n, output),
                     timeout_s=None if timeout_s is None else np.full(n, timeout_s))
    engine = EngineConfig(num_gpu_blocks=num_gpu_blocks, max_num_seqs=max_num_seqs,
                          max_num_batched_tokens=8192, enable_prefix_caching=False,
                          skip_ahead=skip_ahead)
    config = SimConfig(
        engine=engine,
        tiers=(TierConfig("interactive", queue_timeout_s=None, max_sequence_tokens=10**9),),
        cost_model=LinearCostModel(delta_s, 0.0, 0.0, 0.0),
    )
    return simulate(w, make_policy("unlimited"), config)


def gauges(result: RunResult, t: float) -> tuple[int, int, int]:
    """(waiting, running, completed) at ``t``: the timeline's sample at ``t``, the records'
    requests whose last token came by ``t``."""
    tl, rec = result.timeline_columns, result.record_columns
    k = int(np.searchsorted(tl["time_s"], t, side="right")) - 1
    end = np.asarray(rec["arrival_s"]) + np.asarray(rec["e2e_s"])
    return int(tl["num_waiting"][k]), int(tl["num_running"][k]), int(np.count_nonzero(end <= t))


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_queue_grows_at_lam_minus_c_over_s_at_the_seq_cap(skip_ahead: bool) -> None:
    """``max_num_seqs = 4``, ``S = 100 x 0.01 s = 1 s``: 4 served a second, 8 arrive a second
    for 40 s, so the queue grows by 4 a second to 160 and drains in 40 s more."""
    c, s, lam, n = 4, 1.0, 8.0, 320
    result = overloaded(lam=lam, n=n, prompt=1, output=100, delta_s=0.01, num_gpu_blocks=10**6,
                        max_num_seqs=c, skip_ahead=skip_ahead)
    last_arrival = (n - 1) / lam
    for t in (5.0, 10.0, 20.0, 30.0, 39.0, 50.0, 70.0):
        waiting, running, done = gauges(result, t)
        started = min(c * t / s, n)
        fluid_waiting = min(lam * t, n) - started
        assert running == c
        assert abs(waiting - fluid_waiting) <= c + 1, (t, waiting, fluid_waiting)
        assert abs(done - c * (t - s) / s) <= c + 1, (t, done)
    growth = np.polyfit([10.0, 30.0], [gauges(result, 10.0)[0], gauges(result, 30.0)[0]], 1)[0]
    assert growth == pytest.approx(lam - c / s, rel=0.05)
    end = np.asarray(result.record_columns["arrival_s"]) + result.record_columns["e2e_s"]
    assert last_arrival < n * s / c <= end.max() <= n * s / c + 1.0


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_queue_grows_at_lam_minus_c_over_s_when_kv_blocks_bind(skip_ahead: bool) -> None:
    """Each request holds exactly 4 blocks of 16 tokens all its life (a 56-token prompt and 8
    output tokens: 64 tokens), 16 blocks make ``c = 4`` (``max_num_seqs`` 256 does not bind,
    and nothing is ever preempted); ``S = 8 x 0.05 s = 0.4 s``: 10 served a second, 20
    arrive a second."""
    c, s, lam, n = 4, 0.4, 20.0, 400
    result = overloaded(lam=lam, n=n, prompt=56, output=8, delta_s=0.05, num_gpu_blocks=16,
                        max_num_seqs=256, skip_ahead=skip_ahead)
    for t in (5.0, 10.0, 15.0, 19.0):
        waiting, running, done = gauges(result, t)
        assert running == c
        assert abs(waiting - (lam - c / s) * t) <= c + 1, (t, waiting)
        assert abs(done - c * (t - s) / s) <= c + 1, (t, done)
    assert int(result.timeline_columns["num_preemptions"][-1]) == 0


@pytest.mark.parametrize("skip_ahead", [True, False])
def test_client_timeouts_past_saturation_collapse_goodput(skip_ahead: bool) -> None:
    """``c = 4``, ``S = 1 s``, ``lam = 8`` (``rho = 2``), ``T = 5 s``: completions stop at
    ``t1 = (5 - 1) / (1 - 1/2) = 8 s`` after about ``4 x 8 = 32``; the other 448 of the 480
    requests time out, though the engine runs 4 requests throughout."""
    c, s, lam, n, timeout_s = 4, 1.0, 8.0, 480, 5.0
    result = overloaded(lam=lam, n=n, prompt=1, output=100, delta_s=0.01, num_gpu_blocks=10**6,
                        max_num_seqs=c, skip_ahead=skip_ahead, timeout_s=timeout_s)
    rho = lam * s / c
    t1 = (timeout_s - s) / (1 - 1 / rho)
    rec = result.records
    completed = rec[rec.status == "completed"]
    assert abs(len(completed) - c * t1 / s) <= c, len(completed)
    assert (rec.status[rec.status != "completed"] == "client_timeout").all()
    # the last completion: a request started by t1 ends S later (arrivals c/lam apart stagger
    # the servers' starts by up to c/lam)
    assert (completed.arrival_s + completed.e2e_s).max() <= t1 + s + c / lam
    for t in (20.0, 40.0, 55.0):
        assert gauges(result, t)[1] == c  # busy to the end, serving requests that give up
