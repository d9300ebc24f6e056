"""Whether a run kept up with its load, from its own records (analysis/backlog.py)."""

from __future__ import annotations

import math

import numpy as np

from kvbudget.analysis.backlog import (
    Backlog,
    backlog,
    load_said,
    loads_said,
    tiers_grown,
    with_deadlines,
)


def columns(arrival: list[float], finished: list[float], status: list[str] | None = None
            ) -> dict[str, object]:
    return {"arrival_s": np.array(arrival), "finished_s": np.array(finished),
            "status": np.array(status or ["completed"] * len(arrival))}


def summary(cols: dict[str, object], drain_s: float) -> dict[str, object]:
    arrival = np.asarray(cols["arrival_s"])
    return {"overall": {"offered": len(arrival)}, "drain_s": drain_s,
            "offered_window_s": float(arrival.max() - arrival.min())}


def test_a_level_backlog_kept_up_and_a_growing_one_did_not() -> None:
    arrival = [float(k) for k in range(101)]  # 1 req/s over 100 s: 100 gaps
    # each served in 2 s: two in the system at any time
    kept = columns(arrival, [a + 2.5 for a in arrival])
    assert backlog(kept) == Backlog(at_mid=3, at_end=3, num_shed=0, num_offered=101,
                                   halves=(50, 51), num_completed=101)
    said = load_said(kept, summary(kept, 2.5)).replace("\n  ", " ")
    assert said.startswith("load: 1 req/s offered (over the arrival window, first to last "
                           "arrival)")  # (n - 1) / span: the library's offered rate
    assert "3 at the window's midpoint, 3 at the last arrival, the last finish 2.5 s after " \
        "it: the backlog stayed level: the simulated deployment kept up" in said
    # served one every 2 s, in order: the queue grows by half a request a second
    behind = columns(arrival, [2.0 * (k + 1) for k in range(101)])
    b = backlog(behind)
    assert b is not None and (b.at_mid, b.at_end) == (26, 51) and b.grew
    said = load_said(behind, summary(behind, 102.0)).replace("\n  ", " ")
    assert "the backlog grew: requests arrived faster than they finished, so this load is " \
        "past what the simulated deployment sustains" in said


def test_a_gateway_that_turns_requests_away_is_not_said_to_keep_up() -> None:
    arrival = [float(k) for k in range(101)]
    status = ["rejected_overloaded" if k % 2 else "completed" for k in range(101)]
    cols = columns(arrival, [a + (0.0 if s != "completed" else 2.5)
                             for a, s in zip(arrival, status, strict=True)], status)
    said = load_said(cols, summary(cols, 2.5)).replace("\n  ", " ")
    assert "50 of 101 (50%) shed (refused as overloaded, expired or dropped): the backlog " \
        "stayed level by turning requests away" in said
    assert "kept up" not in said


def test_noise_is_not_growth() -> None:
    # a backlog of 100 that rises by 29 is within 3 Poisson deviations (30): level
    assert not Backlog(100, 129, 0, 1000).grew and Backlog(100, 131, 0, 1000).grew
    assert math.isclose(3 * math.sqrt(100), 30)


def test_nothing_to_say_for_a_closed_loop_or_one_instant() -> None:
    cols = columns([0.0, 1.0, 2.0], [1.0, 2.0, 3.0])
    assert load_said(cols, {**summary(cols, 1.0), "closed_loop": {"num_users": 2}}) == ""
    at_once = columns([0.0, 0.0], [1.0, 2.0])
    assert backlog(at_once) is None and load_said(at_once, summary(at_once, 2.0)) == ""


def test_a_rate_that_moves_over_the_window_is_said_beside_the_verdict() -> None:
    # 1 req/s for 100 s, then 3 req/s for 100 s, each served in 5 s: the engine keeps up,
    # yet the backlog at the last arrival is three times the midpoint's (5 -> 15, beyond
    # noise: "grew"); that growth is the higher rate's queue settling, not overload, and the
    # verdict must not stand alone
    arrival = [float(k) for k in range(100)] + [100.0 + k / 3 for k in range(301)]
    cols = columns(arrival, [a + 5.0 for a in arrival])
    b = backlog(cols)
    assert b is not None and b.halves == (100, 301) and b.rate_moved == 1 and b.grew
    said = load_said(cols, summary(cols, 5.0)).replace("\n  ", " ")
    assert ("but the arrivals rose over the window (100 in its first half, 301 in its "
            "second), and a queue's backlog follows its rate even where it keeps up") in said
    # a steady rate says no more than before
    steady = columns([float(k) for k in range(101)], [k + 2.5 for k in range(101)])
    assert backlog(steady).rate_moved == 0  # type: ignore[union-attr]
    assert "arrivals rose" not in load_said(steady, summary(steady, 2.5))
    # a rate that falls: the first half's load is not judged by the level backlog
    falling = list(reversed([200.0 - a for a in arrival]))
    cols = columns(falling, [a + 2.5 for a in falling])
    said = load_said(cols, summary(cols, 2.5)).replace("\n  ", " ")
    assert "the arrivals fell over the window" in said and "no verdict on the first half" in said


def test_requests_refused_or_dropped_are_not_counted_in_the_system() -> None:
    # as a run's records hold them: no finish (NaN) for a refused, expired or dropped request;
    # they were counted in the system for ever after their arrival, so a gateway turning half
    # its requests away at arrival was said to have a growing backlog
    nan = float("nan")
    arrival = [float(k) for k in range(101)]
    status = ["rejected_overloaded" if k % 2 else "completed" for k in range(101)]
    finished = [a + 2.5 if s == "completed" else nan for a, s in zip(arrival, status, strict=True)]
    cols = columns(arrival, finished, status)
    b = backlog(cols)
    assert b is not None and (b.at_mid, b.at_end) == (2, 2) and not b.grew
    said = load_said(cols, summary(cols, 2.5)).replace("\n  ", " ")
    assert "50 of 101 (50%) shed" in said and "stayed level by turning requests away" in said
    # one dropped after admission left when its record last shows it (its admission)
    cols["admitted_s"] = np.array([a + 1.0 for a in arrival])
    assert backlog(cols) == b  # (admitted 1 s after arrival: gone before the next instant)
    # every request refused as too large: nothing completed, nothing to judge
    big = columns([0.0, 1.0, 2.0], [nan] * 3, ["rejected_too_large"] * 3)
    said = load_said(big, summary(big, 0.0)).replace("\n  ", " ")
    assert "no request completed" in said and "kept up" not in said


def test_a_request_that_waited_and_expired_left_at_its_deadline() -> None:
    """One that waited in the gateway's queue until its admission deadline passed (``expired``,
    ``deadline``: no finish in its record) was counted gone from its arrival, though the
    gateway held it until the deadline (``policies/gateway.py`` ``_expire``). Worked by hand:
    one arrival a second over 0..100 s; the even ones served in 2.5 s, the odd ones waiting
    their tier's 10 s and expiring. At the midpoint (50 s) in the system: the served ones that
    arrived after 47.5 s (48, 50) and the waiting ones that arrived after 40 s (41, 43, 45, 47,
    49): 7, not 2; at the last arrival (100 s) likewise 98, 100 and 91, ..., 99: 7."""
    nan = float("nan")
    arrival = [float(k) for k in range(101)]
    status = ["expired" if k % 2 else "completed" for k in range(101)]
    finished = [a + 2.5 if s == "completed" else nan for a, s in zip(arrival, status, strict=True)]
    cols = columns(arrival, finished, status)
    cols["reason"] = np.array(["deadline" if k % 2 else "" for k in range(101)])
    cols["tier"] = np.array(["chat"] * 101)
    # without a deadline to place them: counted from their arrival, and said so
    b = backlog(cols)
    assert b is not None and (b.at_mid, b.at_end, b.num_unplaced) == (2, 2, 50)
    said = " ".join(load_said(cols, summary(cols, 2.5)).split())
    assert "50 of 101 (50%) shed (refused as overloaded, expired or dropped) (50 of them " \
        "waited in the gateway's queue and expired at a time the records do not keep: " \
        "counted gone from their arrival, so the backlogs may be that many higher)" in said
    # the tier's 10 s wait after each arrival, as a simulated run's gateway gives it
    placed = with_deadlines(cols, np.full(101, nan), {"chat": 10.0})
    assert np.array_equal(placed["deadline_s"], np.array(arrival) + 10.0)
    b = backlog(placed)
    assert b is not None and (b.at_mid, b.at_end, b.num_unplaced) == (7, 7, 0)
    said = " ".join(load_said(placed, summary(cols, 2.5)).split())
    assert "7 at the window's midpoint, 7 at the last arrival" in said
    assert "do not keep" not in said
    # a request's own deadline (a workload's deadline_s) wins over its tier's wait: request 41
    # given 1 s leaves at 42 s, before the midpoint (6 then); a tier without a wait gives none
    own = np.full(101, nan)
    own[41] = 42.0
    b = backlog(with_deadlines(cols, own, {"chat": 10.0}))
    assert b is not None and (b.at_mid, b.at_end) == (6, 7)
    assert np.isnan(with_deadlines(cols, own, {"chat": None})["deadline_s"][43])
    # a serve run's records hold deadline_s: kept as they are
    assert with_deadlines(placed, own, {"chat": 1.0}) is placed
    # a client's later attempt waited from its own sending, which the row does not keep
    retried = {**placed, "num_attempts": np.array([2 if k == 49 else 1 for k in range(101)])}
    b = backlog(retried)
    assert b is not None and (b.at_mid, b.num_unplaced) == (6, 1)
    # one still waiting when the run ended never left: in the system at both instants
    ended = {**placed, "reason": np.array(["end_of_run" if k == 1 else r
                                           for k, r in enumerate(placed["reason"])])}
    b = backlog(ended)
    assert b is not None and (b.at_mid, b.at_end) == (8, 8)


def test_requests_dropped_after_a_revoke_are_said_where_the_records_cannot_place_them() -> None:
    """A request revoked, requeued and then past its new deadline (``preempted_dropped``) left
    at its revoke plus its new wait (``policies/gateway.py`` ``_revoke``), a time its record
    does not keep: it was counted gone at its last admission or first token without a word.
    The line says how many such rows there are; a run without any says nothing of them."""
    nan = float("nan")
    arrival = [float(k) for k in range(101)]
    status = ["preempted_dropped" if k % 10 == 3 else "completed" for k in range(101)]
    finished = [a + 2.5 if s == "completed" else nan for a, s in zip(arrival, status, strict=True)]
    cols = columns(arrival, finished, status)
    cols["admitted_s"] = np.array(arrival)
    cols["first_token_s"] = np.array(arrival) + 0.5
    cols["reason"] = np.array(["preempted" if s != "completed" else "" for s in status])
    b = backlog(cols)
    assert b is not None and (b.num_shed, b.num_dropped, b.num_unplaced) == (10, 10, 0)
    said = " ".join(load_said(cols, summary(cols, 2.5)).split())
    assert "10 of 101 (10%) shed (refused as overloaded, expired or dropped) (10 of them dropped " \
        "after their lease was taken back, revoked or run out, at a time the records do not " \
        "keep: counted gone at their last admission or first token, so the backlogs may be " \
        "that many higher)" in said, said
    kept = columns(arrival, [a + 2.5 for a in arrival])
    assert "taken back" not in load_said(kept, summary(kept, 2.5))


def test_compares_load_line_says_the_workload_once_and_each_runs_backlogs() -> None:
    """``compare``'s ``load:`` line (:func:`loads_said`): the rate and the window's halves
    once (the policies ran one workload), each run's backlogs, a verdict shared by the runs
    that reach it, the advice once; runs of different workloads keep a line each."""
    arrival = [float(k) for k in range(100)] + [100.0 + k / 3 for k in range(301)]
    kept = columns(arrival, [a + 5.0 for a in arrival])  # the rising rate's settling queue
    quick = columns(arrival, [a + 0.1 for a in arrival])
    runs = [("a", kept, summary(kept, 5.0)), ("b", quick, summary(quick, 0.1)),
            ("c", kept, summary(kept, 5.0))]
    said = loads_said(runs).replace("\n  ", " ")
    assert said.count("req/s offered") == 1 and said.count("rose over the window") == 1
    assert ": a 5 and 15; b 1 and 1; c 5 and 15: " in said, said
    assert said.count("the backlog grew under ") == 1, said  # one verdict for a and c
    assert "the backlog grew under a and c: requests arrived faster than they finished, so " \
        "this load is past what the simulated deployment sustains under each; the backlog " \
        "stayed level under b: the simulated deployment kept up with this load under it" in said
    assert "none of these is a verdict on the higher rate alone (how far each policy" in said
    other = columns([float(k) for k in range(101)], [k + 2.5 for k in range(101)])
    said = loads_said([runs[0], ("d", other, summary(other, 2.5))]).replace("\n  ", " ")
    assert said.count("req/s offered") == 2 and "load under policy d: 1 req/s" in said
    assert said.count("kvbudget capacity") == 1
    closed = {**summary(kept, 5.0), "closed_loop": {"num_users": 2}}
    assert loads_said([("a", kept, closed)]) == ""


def test_a_backlog_that_grew_in_one_tier_alone_says_so() -> None:
    """A gateway that serves its interactive tier ahead keeps that tier's backlog level while
    batch work piles up: "the backlog grew ... past what the simulated deployment sustains"
    stood beside the table's "interactive SLO met", a contradiction to a reader. The line
    says which tier's backlog grew."""
    arrival = [float(k) for k in range(101)]
    tier = ["interactive" if k % 2 else "batch" for k in range(101)]
    # interactive served in 2.5 s; batch one every 2 s in order: its queue grows
    finished, t = [], 0.0
    for a, name in zip(arrival, tier, strict=True):
        if name == "interactive":
            finished.append(a + 2.5)
        else:
            t = max(t, a) + 4.0
            finished.append(t)
    cols = {**columns(arrival, finished), "tier": np.array(tier)}
    assert tiers_grown(cols) == (("batch",), ("interactive",))
    said = " ".join(load_said(cols, summary(cols, 100.0)).split())
    assert ("the backlog grew: requests arrived faster than they finished, so this load is past "
            "what the simulated deployment sustains under this policy; only the batch tier's "
            "backlog grew (the interactive tier's stayed level)") in said, said
    both = " ".join(loads_said([("a", cols, summary(cols, 100.0)),
                                ("b", cols, summary(cols, 100.0))]).split())
    assert "under every policy, only the batch tier's backlog grew (the interactive tier's " \
        "stayed level)" in both, both
    # both tiers grew alike, or one tier only: nothing more said
    alike = {**columns(arrival, [2.0 * (k + 1) for k in range(101)]), "tier": np.array(tier)}
    assert tiers_grown(alike) == ((), ()) and "tier's" not in load_said(alike, summary(alike, 1.0))
    assert tiers_grown(columns(arrival, finished)) == ((), ())
