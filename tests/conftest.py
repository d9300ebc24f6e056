"""Shared test helpers: paths to ../shared and small workload builders."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import settings

from kvbudget.policies import make_policy
from kvbudget.results.run_result import RunResult
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import Workload, from_columns

# The property tests draw the same examples on every run (derandomize), so a clean clone's suite
# passes or fails the same way each time; a draw that fails is a finding to chase on purpose, not
# a flake in CI. `KVBUDGET_HYPOTHESIS=explore` draws fresh examples (and keeps hypothesis's
# example database) to hunt for new failures.
settings.register_profile("gate", derandomize=True, database=None)
settings.register_profile("explore")
settings.load_profile("explore" if os.environ.get("KVBUDGET_HYPOTHESIS") == "explore" else "gate")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def make_workload(
    arrival_s: Sequence[float],
    prompt_tokens: Sequence[int],
    output_tokens: Sequence[int],
    *,
    max_output_tokens: Sequence[int] | None = None,
    tiers: Sequence[str] | None = None,
    deadline_s: Sequence[float] | None = None,
) -> Workload:
    return from_columns(
        np.asarray(arrival_s, dtype=np.float64),
        np.asarray(prompt_tokens, dtype=np.int64),
        np.asarray(output_tokens, dtype=np.int64),
        max_output_tokens=None if max_output_tokens is None else np.asarray(max_output_tokens),
        tiers=tiers,
        deadline_s=None if deadline_s is None else np.asarray(deadline_s, dtype=np.float64),
    )


def mixed_workload(n: int, rate_rps: float, seed: int = 0) -> Workload:
    """Interactive and batch traffic with declared caps above the true output lengths."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1 / rate_rps, n))
    tiers = np.where(rng.random(n) < 0.7, "interactive", "batch")
    interactive = tiers == "interactive"
    prompt = (
        np.where(
            interactive, rng.lognormal(np.log(1500), 0.6, n), rng.lognormal(np.log(4000), 0.5, n)
        ).astype(np.int64)
        + 1
    )
    cap = np.where(interactive, 1024, 2048)
    out = np.where(
        interactive,
        np.minimum(rng.lognormal(np.log(250), 0.7, n).astype(np.int64) + 1, 1024),
        rng.integers(256, 2049, n),
    )
    return from_columns(arrival, prompt, out, max_output_tokens=cap, tiers=list(tiers))


@pytest.fixture
def shared() -> Path:
    if not SHARED.is_dir():
        pytest.skip(f"shared data folder {SHARED} is missing")
    return SHARED


def small_scenario_dict(
    n: int = 200,
    rate: float = 6.0,
    *,
    seed: int = 11,
    policy: str = "overcommit",
    policy_params: dict[str, object] | None = None,
    name: str = "small",
) -> dict[str, object]:
    """A few hundred synthetic requests (70 % interactive, 30 % batch) on a small KV cache
    (2,500 blocks of 16 tokens) so that policies differ: a scenario dict for sweeps and tuning."""
    scenario: dict[str, object] = {
        "name": name,
        "seed": seed,
        "policy": policy,
        "engine": {"num_gpu_blocks": 2500},
        "workload": {
            "kind": "synthetic",
            "num_requests": n,
            "arrival": {"kind": "poisson", "rate_rps": rate},
            "tiers": [
                {"name": "interactive", "share": 0.7,
                 "prompt": {"kind": "lognormal", "mean": 1000, "sigma": 0.8, "max_tokens": 8192},
                 "output": {"kind": "lognormal", "mean": 200, "sigma": 0.9},
                 "max_output": {"kind": "fixed", "tokens": 1024}},
                {"name": "batch", "share": 0.3,
                 "prompt": {"kind": "lognormal", "mean": 2000, "sigma": 0.6, "max_tokens": 8192},
                 "output": {"kind": "uniform", "low": 256, "high": 1024},
                 "max_output": {"kind": "fixed", "tokens": 1024}},
            ],
        },
    }
    if policy_params is not None:
        scenario["policy_params"] = policy_params
    return scenario


def assert_skip_ahead_matches_stepping(
    w: Workload, cfg: SimConfig, policy: str, params: dict[str, object] | None = None
) -> tuple[RunResult, RunResult]:
    """Simulate ``w`` stepping one step at a time and with skip-ahead: the records and the
    timeline must be identical. Returns both results (stepped, skipped)."""
    from dataclasses import replace

    step = replace(cfg, engine=replace(cfg.engine, skip_ahead=False))
    skip = replace(cfg, engine=replace(cfg.engine, skip_ahead=True))
    a = simulate(w, make_policy(policy, params or {}), step)
    b = simulate(w, make_policy(policy, params or {}), skip)
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    assert_token_gaps_equal(a, b)
    assert_token_gaps_consistent(a)
    return a, b


def assert_token_gaps_equal(a: RunResult, b: RunResult) -> None:
    """The two runs' inter-token gaps tables are identical, bit for bit."""
    ga, gb = a.token_gaps, b.token_gaps
    assert ga is not None and gb is not None
    assert ga.equals(gb)
    assert a.summary["overall"]["itl_s"] == b.summary["overall"]["itl_s"]


def assert_token_gaps_consistent(result: RunResult) -> None:
    """A simulated run's gaps are its tokens' gaps: per tier, ``output_tokens - 1`` of them per
    completed request, and (when no request restarted: no gateway revocation, no retry) their
    sum is the sum of the requests' last-token less first-token times (``finished_s`` less
    the front end's ``post_decode_s``)."""
    import math

    gaps = result.token_gaps
    assert gaps is not None
    rec = result.records
    done = rec[rec["status"] == "completed"]
    restarted = result.summary["engine"]["num_gateway_revocations"] > 0 or (
        "num_attempts" in rec and bool((rec["num_attempts"] > 1).any()))
    post = float(result.summary.get("frontend", {}).get("post_decode_s", 0.0))
    assert (gaps["num_gaps"] > 0).all()
    for tier in sorted(set(done["tier"]) | set(gaps["tier"])):
        mine = gaps[gaps["tier"] == tier]
        reqs = done[done["tier"] == tier]
        assert int(mine["num_gaps"].sum()) == int((reqs["output_tokens"] - 1).sum())
        if restarted:
            continue
        total = math.fsum((mine["gap_s"] * mine["num_gaps"]).tolist())
        spans = reqs[reqs["output_tokens"] > 1]
        expect = math.fsum((spans["finished_s"] - spans["first_token_s"] - post).tolist())
        assert math.isclose(total, expect, rel_tol=1e-9, abs_tol=1e-9), (tier, total, expect)


FIRST = (
    "tests/live/",
    "tests/unit/studies/test_ray_cluster.py",
    "tests/notebooks/",
    "tests/docs/",
    "tests/test_package.py",
    "tests/unit/live/test_live_campaign.py",
    "tests/model/test_properties.py",
    "tests/unit/simulator/test_engine_presets.py",
    "tests/unit/simulator/test_fleet.py",
)
"""The files that take longest, first: those whose tests wait on servers they start (the CPU
vLLM, a Ray cluster, Jupyter kernels), then the slowest others (the docs' examples, about 3
minutes in one file; a wheel and the API reference built; long property tests). Under pytest-xdist (``make test`` passes ``--no-loadscope-reorder``
so that this order holds) their waits overlap the rest of the suite instead of trailing it."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the suite: the :data:`FIRST` files first, and tests marked ``kills_vllm`` after
    the other live tests, as they stop the CPU vLLM server that the live tests share (a session
    fixture). Under pytest-xdist ``make test`` distributes the suite by file (``--dist
    loadfile``), so the live tests, all in ``tests/live/test_live_vllm.py``, run on one worker
    against one server. (``--dist loadgroup`` would allow several files, but with pytest 9.2 it
    no longer groups anything: pytest-dev/pytest-xdist#1386.)"""

    def rank(item: pytest.Item) -> tuple[int, bool]:
        path = Path(str(item.fspath)).relative_to(REPO).as_posix()
        first = next((i for i, prefix in enumerate(FIRST) if path.startswith(prefix)), len(FIRST))
        return first, item.get_closest_marker("kills_vllm") is not None

    items.sort(key=rank)


def unwrapped(text: str) -> list[str]:
    """The lines of a command's output as it means them: a line a fill() wrapped (its
    continuation lines indented by two spaces) joined back into one."""
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("  ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines
