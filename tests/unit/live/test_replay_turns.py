"""The live replay's closed loop of conversations: each later turn goes only after the turn
before it returned and its delay passed, in the order :class:`TurnOrder` (the simulator's rule)
gives for the same completions."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import (
    ReplayConfig,
    ReplayMeta,
    prompt_of,
    prompt_token_ids,
    replay,
)
from kvbudget.live.replay_ticks import TickedUsers
from kvbudget.live.replay_turns import TurnUsers
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.results.recorded_guidellm_turns import conversation_prefix
from kvbudget.workloads import Workload, from_columns
from kvbudget.workloads.closed_loop import ClosedLoop, Conversations
from kvbudget.workloads.ticks import Ticks
from kvbudget.workloads.turn_order import TurnOrder
from tests.unit.live.test_backends_live_gateway import Fake, fake  # noqa: F401 (the fixture)

# conversations a (rows 0, 2, 5), b (1, 4), c (3, 7, 9), d (6, 8) and one lone request (10)
PREVIOUS = (-1, -1, 0, -1, 1, 2, -1, 3, 6, 7, -1)
DELAY_S = (0.0, 0.0, 0.05, 0.0, 0.12, 0.0, 0.0, 0.08, 0.03, 0.0, 0.0)
OUTPUT = (6, 2, 3, 9, 4, 2, 5, 3, 7, 2, 4)  # unequal, so the turns end in a mixed order


def _workload() -> Workload:
    n = len(PREVIOUS)
    return from_columns([0.0] * n, [8 + 4 * i for i in range(n)], list(OUTPUT), tiers=["batch"] * n)


def ends_seen(monkeypatch: pytest.MonkeyPatch) -> dict[int, float]:
    """``{row: when the replay's users saw it end}``, filled as the replay runs."""
    seen: dict[int, float] = {}
    ended = TurnUsers.ended

    def spy(self: TurnUsers, row: int, t: float) -> None:
        seen[row] = t
        ended(self, row, t)

    monkeypatch.setattr(TurnUsers, "ended", spy)
    return seen


def reference_order(turns: Conversations, num_users: int, think_s: float,
                    ended_s: dict[int, float], not_before_s: list[float] | None = None
                    ) -> list[int]:
    """The rows in the order the loop's users send them as :class:`TurnOrder` says, each row
    ending at ``ended_s[row]`` (as its user saw it), users free at 0 and ``think_s`` after
    each end their conversation does not hold; none before its ``not_before_s``."""
    order_of = TurnOrder(turns, not_before_s)
    free = [0.0] * min(num_users, len(turns.previous))
    ends: list[tuple[float, int]] = []  # rows sent, by when they end
    order: list[int] = []
    while len(order) < len(turns.previous):
        t, row = order_of.next_send(free[0] if free else math.inf)
        if ends and ends[0][0] <= t:  # an end before the send may change it
            e, done = heapq.heappop(ends)
            order_of.ended(done, e)
            if not order_of.holds(done):
                heapq.heappush(free, e + think_s)
            continue
        assert row >= 0, "nothing may go, and nothing is in flight"
        if order_of.sent(row):
            heapq.heappop(free)
        order.append(row)
        heapq.heappush(ends, (ended_s[row], row))
    return order


@pytest.mark.parametrize(("held", "think_s"), [(False, 0.0), (False, 0.02), (True, 0.0)])
def test_later_turns_wait_for_their_turn_before_and_go_in_turn_orders_order(
        fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        held: bool, think_s: float) -> None:
    num_users = 2
    fake.state.token_s = 0.002
    # no token until both users' first requests are in: the first two sends are sent while
    # nothing has ended, so they are first turns, whatever the machine's speed
    fake.state.gate = lambda: fake.state.max_active >= num_users
    seen = ends_seen(monkeypatch)
    turns = Conversations(PREVIOUS, DELAY_S, held=held)
    loop = ClosedLoop(num_users, think_time_s=think_s, conversations=turns)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=loop)
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    out = replay(_workload(), make_policy("unlimited"), config, tmp_path / "run", meta=meta)
    assert out.complete and not out.error
    rec = out.records.set_index("request_id").sort_index()
    assert (rec["status"] == "completed").all()
    arrival = rec["arrival_s"].to_numpy()
    finished = rec["finished_s"].to_numpy()
    for i, p in enumerate(PREVIOUS):
        if p >= 0:  # never before the turn before it returned and its delay passed
            assert arrival[i] >= finished[p] + DELAY_S[i], (i, p)
            assert arrival[i] >= seen[p] + DELAY_S[i]
    sent = sorted(range(len(PREVIOUS)), key=lambda i: arrival[i])
    assert sent[:num_users] == [0, 1]
    assert sent == reference_order(turns, num_users, think_s, seen)
    # never more than num_users requests in flight (not held), conversations open (held)
    open_at: list[Any] = []
    for t in arrival:
        if held:
            first = {c: min(_rows_of(c)) for c in _conversations()}
            last = {c: max(_rows_of(c)) for c in _conversations()}
            open_at.append(sum(arrival[first[c]] <= t < seen[last[c]] for c in first))
        else:
            open_at.append(int(((arrival <= t) & (finished > t)).sum()))
    assert max(open_at) <= num_users
    assumed = out.summary["assumed"]
    assert any("6 requests are later turns of conversations" in a and "6 of them: each its "
               "recorded length in token ids of its own" in a for a in assumed)


def test_an_open_stages_turns_go_at_their_recorded_sends_and_after_the_turn_before(
        fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # an open stage of conversations (a rate's sends, stage_plans' loop of as many users as
    # requests, none sending before its recorded send): each request no sooner than its
    # recorded send, a later turn no sooner than the turn before it returned and its delay
    # passed; the live replay refused it (a capped loop), and its users would have sent every
    # first turn at once without the recorded sends
    fake.state.token_s = 0.002
    seen = ends_seen(monkeypatch)
    due = [0.0, 0.0, 0.05, 0.1, 0.1, 0.15, 0.2, 0.2, 0.25, 0.3, 0.35]
    turns = Conversations(PREVIOUS, DELAY_S)
    loop = ClosedLoop(len(PREVIOUS), not_before_arrival=True, conversations=turns)
    w = replace(_workload(), arrival_s=np.array(due))
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=loop)
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    out = replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=meta)
    assert out.complete and not out.error
    rec = out.records.set_index("request_id").sort_index()
    assert (rec["status"] == "completed").all()
    arrival = rec["arrival_s"].to_numpy()
    finished = rec["finished_s"].to_numpy()
    assert (arrival >= np.array(due) - 1e-9).all()  # never before its recorded send
    for i, p in enumerate(PREVIOUS):
        if p >= 0:
            assert arrival[i] >= max(finished[p], seen[p]) + DELAY_S[i], (i, p)
    sent = sorted(range(len(PREVIOUS)), key=lambda i: arrival[i])
    assert sent == reference_order(turns, len(PREVIOUS), 0.0, seen, due)


def test_held_conversations_under_ticks_go_at_the_ticks_a_ready_turn_first(
        fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # AIPerf's multi-turn sessions at --request-rate R --concurrency C: a session holds its
    # slot, each turn goes at a tick, a continuation turn ready by a tick before a new session
    # (RequestRateStrategy.execute_phase's priority 1); the live replay refused it
    fake.state.token_s = 0.004
    seen: dict[int, float] = {}
    ended = TickedUsers.ended

    def spy(self: TickedUsers, row: int, t: float) -> None:
        seen[row] = t
        ended(self, row, t)

    monkeypatch.setattr(TickedUsers, "ended", spy)
    turns = Conversations(PREVIOUS, DELAY_S, held=True)
    first = [0.04 * i for i in range(len(PREVIOUS))]  # AIPerf's issue times: the first ticks
    loop = ClosedLoop(2, not_before_arrival=True, tick_rate_per_s=25.0, conversations=turns)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=loop)
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    w = replace(_workload(), arrival_s=np.array(first))
    out = replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=meta)
    assert out.complete and not out.error
    rec = out.records.set_index("request_id").sort_index()
    assert (rec["status"] == "completed").all()
    arrival = rec["arrival_s"].to_numpy()
    for i, p in enumerate(PREVIOUS):
        if p >= 0:  # after the turn before ended and its delay passed
            assert arrival[i] >= seen[p] + DELAY_S[i], (i, p)
    order, took = ticked_reference(turns, 2, Ticks(first, loop, seed=0), seen)
    assert sorted(range(len(PREVIOUS)), key=lambda i: arrival[i]) == order
    assert all(arrival[row] >= tick - 1e-9 for row, tick in zip(order, took, strict=True))
    assert len(set(took)) == len(took)  # one request a tick


def ticked_reference(turns: Conversations, num_users: int, ticks: Ticks,
                     ended_s: dict[int, float]) -> tuple[list[int], list[float]]:
    """The rows in the order held conversations under ticks send them (TurnOrder's, a tick
    each: the simulator's users' rule), each row ending at ``ended_s[row]``, and their ticks."""
    order_of = TurnOrder(turns, None)
    free = [0.0] * num_users
    ends: list[tuple[float, int]] = []
    order: list[int] = []
    took: list[float] = []
    while len(order) < len(turns.previous):
        t, row = order_of.next_send(free[0] if free else math.inf)
        tick = ticks.first_at_or_after(t)
        if ends and ends[0][0] <= tick:  # an end before the tick may change it
            e, done = heapq.heappop(ends)
            order_of.ended(done, e)
            if not order_of.holds(done):
                heapq.heappush(free, e)
            continue
        tick = ticks.take(t)
        row = order_of.at_tick(tick, row)
        if order_of.sent(row):
            heapq.heappop(free)
        order.append(row)
        took.append(tick)
        heapq.heappush(ends, (ended_s[row], row))
    return order, took


def _conversations() -> list[int]:
    """Each conversation by its first row."""
    return [i for i, p in enumerate(PREVIOUS) if p < 0]


def _rows_of(first: int) -> list[int]:
    rows = [first]
    while (nxt := PREVIOUS.index(rows[-1]) if rows[-1] in PREVIOUS else -1) >= 0:
        rows.append(nxt)
    return rows


def test_a_later_turn_sends_the_turn_befores_prompt_where_the_prefix_hashes_say_so(
        fake: Fake, tmp_path: Path) -> None:  # noqa: F811
    # the conversation so far, as a GuideLLM or AIPerf recording gives it: each later turn's
    # prompt holds the one before, its hashes naming the turn before's whole 16-token blocks;
    # d's second turn (row 8) is shorter than its first, so its history is not said
    fake.state.token_s = 0.001
    prompt = [16 + 8 * i for i in range(len(PREVIOUS))]
    prompt[8] = 20
    conv = {r: c for c in _conversations() for r in _rows_of(c)}
    index = {r: _rows_of(conv[r]).index(r) for r in conv}
    shared = conversation_prefix([(str(conv[r]), index[r]) for r in range(len(PREVIOUS))],
                                 prompt)
    assert shared is not None and shared.hashes is not None
    w = from_columns([0.0] * len(PREVIOUS), prompt, list(OUTPUT), tiers=["batch"] * len(prompt))
    w = replace(w, prefix_hashes=shared.hashes[0], prefix_offsets=shared.hashes[1],
                prefix_block_tokens=16)
    loop = ClosedLoop(2, conversations=Conversations(PREVIOUS, DELAY_S))
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=loop)
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    out = replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=meta)
    assert out.complete
    sent = {len(b["prompt"]): b["prompt"] for b in fake.state.bodies}
    assert sorted(sent) == sorted(prompt)  # each row once, at its recorded length
    for row, before in enumerate(PREVIOUS):
        mine = sent[prompt[row]]
        # a block for each whole block its hashes name, then ids of its own
        assert mine == prompt_of(w, row, prompt[row], 0, config.token_ids)
        num_hashed = min(len(w.prefix_of(row)), prompt[row] // 16) * 16
        assert mine[num_hashed:] == prompt_token_ids(row, prompt[row] - num_hashed, 0,
                                                     config.token_ids)
        if before >= 0 and row != 8:  # the turn before's whole blocks first
            whole = prompt[before] // 16 * 16
            assert whole and mine[:whole] == sent[prompt[before]][:whole]
        elif before >= 0:  # d's shorter second turn: not the turn before's
            assert mine[:16] != sent[prompt[before]][:16]
    assert any("5 of them begin with the whole blocks of the prompt of the turn before" in a and
               "1 of them: each its recorded length in token ids of its own" in a
               for a in out.summary["assumed"])


def test_a_replay_of_conversations_is_not_resumed(fake: Fake, tmp_path: Path) -> None:  # noqa: F811
    fake.state.token_s = 0.001
    w = _workload()
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    plain = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH))
    out = replay(w.take([0, 1, 3]), make_policy("unlimited"), plain, tmp_path / "run",
                 meta=meta)
    assert out.complete
    loop = ClosedLoop(2, conversations=Conversations(PREVIOUS, DELAY_S))
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH),
                          closed_loop=loop)
    with pytest.raises(ValueError, match="a replay of conversations is not resumed"):
        replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=meta, resume=True)
    with pytest.raises(ValueError, match="11 rows for a workload of 3"):
        replay(w.take([0, 1, 3]), make_policy("unlimited"), config, tmp_path / "other",
               meta=meta)
