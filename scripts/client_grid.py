"""The client grid: fleet-grid cases (``tests/model/test_properties._grid_fleet_case``: arrivals,
steps and queue timeouts on one grid, where they tie) with every tier's client timing out and
retrying on that grid, each run on its two replicas and on one engine, stepping and with
skip-ahead; prints the cases whose records, timeline, token gaps or attempts differ (or that
raise) and the count (issue 37 item 4: none should).

Case ``k`` draws its seed, router, budget, blocks, step, engine, client timeout (1, 2 or 3 s),
retry backoff (0, 0.25 or 0.5 s, constant) and policy from ``default_rng(base + k)``.

Usage: python scripts/client_grid.py [--n N] [--base B]   (default: 60 cases from 1000)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbudget.simulator.engine_variants import ENGINE_CLASSES
from tests.model.test_clients import _client_grid_runs

Case = tuple[int, str, str, int, float, str, float, float, str]


def case(base: int, k: int) -> Case:
    """Case ``k``: seed, router, budget, blocks, step_s, engine, timeout_s, backoff_s, policy."""
    rng = np.random.default_rng(base + k)
    return (int(rng.integers(0, 100)),
            str(rng.choice(["round_robin", "least_tokens", "prefix_affinity"])),
            str(rng.choice(["global", "per_replica"])),
            int(rng.choice([20, 40, 60])),
            float(rng.choice([0.25, 0.125, 0.1])),
            str(rng.choice(sorted(ENGINE_CLASSES))),
            float(rng.choice([1.0, 2.0, 3.0])),
            float(rng.choice([0.0, 0.25, 0.5])),
            str(rng.choice(["preemptive", "overcommit", "unlimited"])))


def same(c: Case, fleet: bool) -> bool:
    """Whether stepping and skip-ahead give the same records, timeline, gaps and attempts
    (``tests/model/test_clients._client_grid_runs`` asserts it)."""
    try:
        _client_grid_runs(*c, fleet=fleet)
    except AssertionError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--base", type=int, default=1000)
    args = parser.parse_args()
    bad = 0
    for k in range(args.n):
        c = case(args.base, k)
        answers: list[str] = []
        for fleet in (True, False):
            try:
                answers.append("equal" if same(c, fleet) else "differ")
            except Exception as e:  # a crash is a finding too
                answers.append(f"{type(e).__name__}")
        if answers != ["equal", "equal"]:
            bad += 1
            print(k, c, "fleet:", answers[0], "one engine:", answers[1], flush=True)
    print(f"{bad} of {args.n} cases differ")


if __name__ == "__main__":
    main()
