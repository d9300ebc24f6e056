"""Stepping's order of two replicas' step ends at one instant (``simulator/fleet_ties.py``),
hand-worked on replicas that only show their step ends."""

from __future__ import annotations

from dataclasses import dataclass, field

import simpy

from kvbudget.simulator.fleet_ties import FleetTies


@dataclass
class _Log:
    ends: list[float] = field(default_factory=list)

    def last_ends(self, n: int) -> list[float]:
        return self.ends[-n:] if n > 0 else []


@dataclass
class _Replica:
    """A replica's step ends that have ended (``log``) and its decode run in flight."""

    log: _Log
    num_steps: int
    run: list[float] | None = None

    def run_in_flight(self) -> list[float] | None:
        return self.run


def _two_replicas(first: int) -> FleetTies:
    """Two replicas started from idle at 0 (replica ``first`` woken first), steps of 0.25 s,
    now 0.75 s. Replica 0's step ending at 0.75 s has ended with a finish, and it has started
    a decode run ending at 1.0 and 1.25 s; replica 1 is in a decode run from 0 (its steps end
    at 0.25, 0.5, 0.75 and 1.0 s, none logged)."""
    env = simpy.Environment()
    replicas = [_Replica(_Log([0.25, 0.5, 0.75]), 3, [1.0, 1.25]),
                _Replica(_Log(), 0, [0.25, 0.5, 0.75, 1.0])]
    ties = FleetTies(env, replicas)
    ties.root(first, 0)
    ties.root(1 - first, 0)
    env.run(until=0.75)
    return ties


def test_a_replica_woken_later_ends_each_tied_step_after_the_one_woken_first() -> None:
    """Both started at 0: each step starts at the previous one's end, at the same instant for
    both, back to the wake, where the one woken first made its step's end event first. Replica
    0's finish at 0.75 s acts on replica 1 after replica 0's step end; replica 1's step ending
    then has ended before only when replica 1 was woken first. (Replica 0's own step ending at
    0.75 s is the logged one, not its run's first, which ends at 1.0 s.)"""
    for first, ended in ((0, False), (1, True)):
        ties = _two_replicas(first)
        ties.actor, ties.actor_s = 0, 0.75
        assert ties.before(1, 0.75) is ended


def test_a_finish_acts_on_the_others_at_its_own_instant_only() -> None:
    """With no finish at 0.75 s (none yet, or the last one at 0.5 s), what acts on replica 1 at
    0.75 s is the outside world's, which comes before every step ending then; the finishing
    replica itself has ended its step."""
    ties = _two_replicas(1)
    assert not ties.before(1, 0.75)
    ties.actor, ties.actor_s = 0, 0.5
    assert not ties.before(1, 0.75)
    ties.actor, ties.actor_s = 1, 0.75
    assert not ties.before(1, 0.75)
