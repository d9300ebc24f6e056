"""A disaggregated prefill replica keeps no token segments (its gaps are never read):
``token_segments.UnreadSegments``, worked by hand beside ``TokenSegments``."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest
import simpy

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import make_policy
from kvbudget.simulator.disagg import DisaggFleet
from kvbudget.simulator.disagg_config import DisaggConfig, PoolConfig
from kvbudget.simulator.engine import EngineHooks
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.sim_config import SimConfig, gateway_config
from kvbudget.simulator.token_segments import NO_SEGMENT, TokenSegments, UnreadSegments
from kvbudget.workloads import from_columns


def _calls(s: TokenSegments) -> None:
    """Row 1 comes in and gets its first token at step 5; rows 0 and 2 their first at 7."""
    s.reset(1)
    s.new_segment(1, 1, 5)
    s.note(np.array([0, 2], np.int64), np.array([1, 1], np.int64), 7)


def test_token_segments_worked_by_hand() -> None:
    # token k of a segment from step s came at base + k: base = s - 1 for a first token
    s = TokenSegments(3)
    _calls(s)
    assert s.base.tolist() == [6, 4, 6] and s.start.tolist() == [7, 5, 7]
    assert s.closed == {}


def test_unread_segments_keep_nothing_and_have_no_gaps() -> None:
    s = UnreadSegments(3)
    _calls(s)
    assert s.base.tolist() == [NO_SEGMENT] * 3 and s.start.tolist() == [0, 0, 0]
    assert s.closed == {}
    with pytest.raises(AssertionError, match="no gaps"):
        s.gaps(np.zeros(7), np.array([1], np.int64), np.array([1], np.int64),
               np.array([0], np.int64))


def test_only_the_prefill_replicas_keep_no_segments() -> None:
    config = SimConfig(engine=EngineConfig(num_gpu_blocks=8, block_size=16),
                       cost_model=LinearCostModel(0.01, 0.0, 0.0, 0.0),
                       disaggregation=DisaggConfig(PoolConfig(2), PoolConfig(3)))
    hooks = EngineHooks(on_finish=lambda i, t: None, on_preempt=lambda i, t: None,
                        next_external_s=lambda: math.inf, gateway_state=lambda: (0, 0))
    w = from_columns([0.0, 0.0], [16, 32], [3, 2])
    fleet = DisaggFleet(simpy.Environment(), w, np.zeros(2, np.int64), config, hooks,
                        make_policy("unlimited"), gateway_config=partial(gateway_config, config))
    assert [type(e.segments) for e in fleet.prefill] == [UnreadSegments] * 2
    assert [type(e.segments) for e in fleet.decode] == [TokenSegments] * 3
