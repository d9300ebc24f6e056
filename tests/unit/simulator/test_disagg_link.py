"""The link's fixed time per transfer: Mooncake's measured figure on the RDMA presets."""

from __future__ import annotations

import pytest

from kvbudget.simulator.disagg_config import KVLink


def test_the_rdma_presets_take_mooncakes_fixed_cost() -> None:
    # the line through (20 MB, 0.54 ms) and (4.50 GB, 31.65 ms): 31.11 ms per 4.48 GB,
    # 0.1389 ms for the first 20 MB, 0.54 - 0.1389 = 0.4011 ms
    for name in ("infiniband-ndr", "infiniband-hdr", "roce-200"):
        assert KVLink(name).transfer_latency_s == pytest.approx(0.4011e-3, abs=1e-7)
    for name in ("nvlink", "pcie"):
        assert KVLink(name).transfer_latency_s == 0.0


def test_a_given_latency_replaces_the_presets() -> None:
    assert KVLink("roce-200", latency_s=0.0).transfer_latency_s == 0.0
    assert KVLink("nvlink", latency_s=2e-3).transfer_latency_s == 2e-3
    with pytest.raises(ValueError, match="link_latency_s must be >= 0"):
        KVLink("pcie", latency_s=-1.0)
