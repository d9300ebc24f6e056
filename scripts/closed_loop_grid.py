"""The closed-loop grid: 80 requests sent by 1-11 closed-loop users thinking 0, 0.125, 0.25 or
0.5 s, on steps of 0.1, 0.125 or 0.25 s (sends and step ends tie), every engine preset, async
scheduling on or off, on one engine or (``--fleet``) two replicas; stepping against skip-ahead.
Prints the draws whose records or timeline differ (or that raise) and the count (issue 37
item 4: none should). The draws are ``tests/model/test_closed_loop.closed_loop_draw``'s.
Measured as the closed loop's sends became URGENT: one engine 0 of 500 (5 at 0fc8ebf, where
a send waited behind the step ends already due at its instant); two replicas 30 of 150 (109
at 0fc8ebf). Since a send a finish frees follows that replica's step end in the fleet's tie
order (``fleet_ties.FleetTies.actor``, kept for the instant): two replicas 0 of 150 (seeds
0-149) and 0 of 150 (150-299), one engine 0 of 300.

Usage: python scripts/closed_loop_grid.py [--n N] [--base B] [--fleet]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kvbudget.policies import make_policy
from kvbudget.simulator.run import simulate
from tests.model.test_closed_loop import closed_loop_draw


def same(seed: int, fleet: bool) -> bool:
    """Whether stepping and skip-ahead give the same records and timeline on draw ``seed``."""
    w, cfg, policy = closed_loop_draw(seed, fleet)
    a, b = (simulate(w, make_policy(policy), replace(cfg, engine=replace(cfg.engine, skip_ahead=s)))
            for s in (False, True))
    return bool(a.records.equals(b.records) and a.timeline.equals(b.timeline))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=150)
    parser.add_argument("--base", type=int, default=0)
    parser.add_argument("--fleet", action="store_true", help="two replicas (default: one engine)")
    args = parser.parse_args()
    bad = 0
    for seed in range(args.base, args.base + args.n):
        try:
            answer = "equal" if same(seed, args.fleet) else "differ"
        except Exception as e:  # a crash is a finding too
            answer = type(e).__name__
        if answer != "equal":
            bad += 1
            print(seed, answer, flush=True)
    print(f"{bad} of {args.n} draws differ")


if __name__ == "__main__":
    main()
