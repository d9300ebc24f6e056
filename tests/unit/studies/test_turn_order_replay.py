"""A multi-turn run replayed in conversation order, on the real tools' files
(``scripts/make_recording_fixtures.sh guidellm-turns aiperf-chat inference-perf-turns``):
GuideLLM 0.8.1 synthetic ``turns=3`` chat, ``--profile kind=concurrent,streams=2``, 12
requests (4 conversations); AIPerf 0.13.0 ``--conversation-num 4 --conversation-turn-mean 3
--conversation-turn-delay-mean 300 --concurrency 2``; inference-perf 0.7.0 ``shared_prefix``
data with ``enable_multi_turn_chat`` (2 user sessions of 8 rounds, 8 req/s: an open loop whose
rounds wait for the session's round before them, ``apis/user_session.py``
``LocalUserSession.get_context``), which links its rounds by ``info.extra_info.user_session``
and ``chat_round``; a multi-round QA summary (LMCache's users wait for their answer); and NVIDIA
Dynamo 1.6.1's request trace of agents' sessions (``agent_context.session_id``).

A tool sends a conversation's next turn only when the turn before it returned (GuideLLM 0.8.1
``scheduler/worker.py`` ``_get_next_ready_node``; AIPerf holds its user for the conversation).
The replay's users sent the next request listed instead, so on a simulated server slower than
the recorded one a turn went before the turn before it had ended, its history not yet there;
now a later turn waits for it (and its delay), and a free user takes a ready later turn before
a new conversation, as GuideLLM's worker does."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import make_policy
from kvbudget.results.recording import RecordedStage, Recording
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.recorded_replay import replay_mode, stage_plans
from kvbudget.studies.validate import simulate_recording
from kvbudget.workloads import Workload
from kvbudget.workloads.closed_loop import ClosedLoop, Conversations
from kvbudget.workloads.ticks import Ticks

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
GUIDELLM = FIXTURES / "guidellm-0.8.1" / "turns3_concurrent2.json"
AIPERF = FIXTURES / "aiperf-0.13.0" / "multiturn3_delay300_concurrency2.jsonl"
INFERENCE_PERF = (FIXTURES / "inference-perf-0.7.0" / "multi_turn_chat"
                  / "per_request_lifecycle_metrics.json")
# NVIDIA Dynamo 1.6.1's request trace of four agents' sessions (x-dynamo-session-id), each turn
# sent when the one before it answered and its "tool" ran 0.1-0.3 s
DYNAMO = FIXTURES / "dynamo-1.6.1" / "trace_agent_sessions.jsonl"
CONFIG = SimConfig(engine=EngineConfig(num_gpu_blocks=200, block_size=16, max_num_seqs=8,
                                       max_num_batched_tokens=2048))
SLOW = LinearCostModel(intercept_s=0.05, per_prefill_token_s=0.0, per_decode_seq_s=0.0,
                       per_context_token_s=0.0)  # 16 steps of 50 ms: 0.8 s a request


def _late_turns(rec_previous: tuple[int, ...], delay_s: tuple[float, ...],
                records: pd.DataFrame) -> list[int]:
    """The rows sent before the turn before them ended (plus its delay)."""
    arrival = records["arrival_s"].to_numpy()
    finished = records["finished_s"].to_numpy()
    return [i for i, p in enumerate(rec_previous)
            if p >= 0 and arrival[i] < finished[p] + delay_s[i] - 1e-9]


def _by_row(rec: Recording, records: pd.DataFrame) -> pd.DataFrame:
    """The records in the recording's workload order (a record's ``request_id`` is its
    workload row's)."""
    return records.set_index("request_id").loc[rec.workload.request_id].reset_index()


@pytest.mark.parametrize(("path", "later"),
                         [(GUIDELLM, 8), (AIPERF, 8), (INFERENCE_PERF, 14), (DYNAMO, 13)])
def test_a_later_turn_is_sent_only_after_the_turn_before_it_ended(path: Path,
                                                                  later: int) -> None:
    rec = read_recording(path)
    conv = rec.conversations
    assert conv is not None and conv.num_later_turns == later
    plans = stage_plans(rec)
    assert plans is not None and len(plans) == 1 and plans[0].loop is not None
    assert plans[0].loop.conversations is not None
    records = _by_row(rec, simulate_recording(rec, CONFIG, cost_model=SLOW,
                                              frontend_overhead_s=0.0).records)
    assert (records["status"] == "completed").all()
    assert _late_turns(conv.previous, conv.delay_s, records) == []
    # the recorded server was faster: the replay waited for the slow turns, as the tool would
    start = records["arrival_s"].to_numpy()
    assert start.max() > rec.measured["arrival_s"].max() + 1.0


def test_guidellm_turns_of_a_stream_go_back_to_back() -> None:
    # a free stream takes its conversation's next turn before a new conversation: each of
    # the 2 users runs a conversation's 3 turns, then the next conversation
    rec = read_recording(GUIDELLM)
    assert rec.conversations is not None
    assert all(d == 0.0 for d in rec.conversations.delay_s)  # no requeue_delay in the data
    records = _by_row(rec, simulate_recording(rec, CONFIG, cost_model=SLOW,
                                              frontend_overhead_s=0.0).records)
    previous = rec.conversations.previous
    finished = records["finished_s"].to_numpy()
    arrival = records["arrival_s"].to_numpy()
    for i, p in enumerate(previous):
        if p >= 0:  # sent the instant the turn before it ended (no think time)
            assert arrival[i] == pytest.approx(finished[p], abs=1e-9)
    assert any("only when the turn before it ended" in n for n in rec.notes)


def _workload(arrival: list[float]) -> Workload:
    n = len(arrival)
    return Workload(arrival_s=np.array(arrival), prompt_tokens=np.full(n, 32),
                    output_tokens=np.full(n, 16), max_output_tokens=np.full(n, 16),
                    tier=np.zeros(n, dtype=np.int16), tier_names=("interactive",),
                    deadline_s=np.full(n, np.nan), request_id=np.arange(n))


def test_a_free_user_waits_for_a_turn_not_ready_and_takes_a_new_conversation_first() -> None:
    # rows 0 and 1 first turns of A and B, row 2 A's second turn (0.5 s after A's first),
    # row 3 a new conversation C: 2 users. Without conversations row 2 went when the first
    # user freed; with them it goes 0.5 s after row 0 ended, and C goes before it
    w = _workload([0.0, 0.0, 0.1, 0.2])
    conv = Conversations(previous=(-1, -1, 0, -1), delay_s=(0.0, 0.0, 0.5, 0.0))
    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=200, block_size=16, max_num_seqs=8,
                                        max_num_batched_tokens=2048), cost_model=SLOW)
    runs = {c is not None: simulate(w, make_policy("unlimited", {}), replace(
        cfg, closed_loop=ClosedLoop(num_users=2, conversations=c)))
            .records.sort_values("request_id").reset_index(drop=True) for c in (None, conv)}
    plain, turns = runs[False], runs[True]
    assert plain["arrival_s"].tolist()[2] == pytest.approx(plain["finished_s"].tolist()[0])
    assert turns["arrival_s"].tolist()[3] == pytest.approx(turns["finished_s"].tolist()[0])
    assert turns["arrival_s"].tolist()[2] == pytest.approx(turns["finished_s"].tolist()[0]
                                                           + 0.5)


def test_conversations_refuse_a_turn_before_the_one_before_it() -> None:
    with pytest.raises(ValueError, match="previous turn must be an earlier request"):
        Conversations(previous=(1, -1), delay_s=(0.0, 0.0))
    with pytest.raises(ValueError, match="previous turn must be an earlier request"):
        Conversations(previous=(-1, 0, 0), delay_s=(0.0, 0.0, 0.0))


def test_the_guidellm_turns_fixture_reads_to_its_own_summary() -> None:
    doc = json.loads(GUIDELLM.read_text())
    (bench,) = doc["benchmarks"]
    metrics = bench["metrics"]
    rec = read_recording(GUIDELLM)
    usable = rec.measured[rec.measured["usable"]]
    assert len(usable) == metrics["request_totals"]["successful"] == 12
    for name in ("output", "prompt"):  # GuideLLM sums floats: 1421.9999999999995
        assert int(usable[f"{name}_tokens"].sum()) == pytest.approx(
            metrics[f"{name}_token_count"]["successful"]["total_sum"])
    (stage,) = rec.stages
    assert stage.load == "closed" and stage.max_concurrency == 2


def test_a_multi_round_users_next_question_waits_for_its_answer(tmp_path: Path) -> None:
    # LMCache's multi-round QA: a user sends its next question only after its last answer
    # came (UserSession.step). Replayed at the recorded sends, a slower simulated server's
    # answer came after the next question had gone; now that question waits for it and the
    # gap recorded after it (1.9 s here)
    rows = ["prompt_tokens,generation_tokens,ttft,generation_time,user_id,question_id,"
            "launch_time,finish_time"]
    for user, t0 in ((1, 100.0), (2, 100.5)):
        for q, prompt in enumerate((100, 300, 500), start=1):
            t = t0 + 3 * (q - 1)
            rows.append(f"{prompt},100,0.1,1.0,{user},{q},{t},{t + 1.1}")
    path = tmp_path / "summary.csv"
    path.write_text("\n".join(rows) + "\n")
    rec = read_recording(path)
    conv = rec.conversations
    assert conv is not None and conv.num_later_turns == 4
    assert sorted(d for d in conv.delay_s if d) == pytest.approx([1.9] * 4)
    plans = stage_plans(rec)
    assert plans is not None and plans[0].loop is not None  # the stage's load is unknown
    assert "no sooner than the turn before it ended" in plans[0].describe()["replayed_as"]
    records = _by_row(rec, simulate_recording(rec, CONFIG, cost_model=SLOW,
                                              frontend_overhead_s=0.0).records)
    assert _late_turns(conv.previous, conv.delay_s, records) == []
    later = np.array([p >= 0 for p in conv.previous])
    sent = records["arrival_s"].to_numpy()
    recorded = rec.measured["arrival_s"].to_numpy()
    assert (sent[~later] == pytest.approx(recorded[~later]))  # first questions: as recorded
    assert (sent[later] > recorded[later] + 1.0).all()  # the slow answers held the others


def test_inference_perf_rounds_share_their_sessions_history() -> None:
    rec = read_recording(INFERENCE_PERF)
    (stage,) = rec.stages
    assert stage.load == "open" and rec.counts["num_measured"] == 16
    assert any("14 requests are later turns of 2 multi-turn conversations "
               "(info.extra_info.user_session, chat_round)" in n for n in rec.notes)
    assert any("not simulated as shared across the user sessions" in n for n in rec.notes)
    w = rec.workload
    assert w.prefix_hashes is not None and w.prefix_offsets is not None


def test_a_held_conversation_keeps_its_user_until_its_last_turn() -> None:
    # one user; rows 0 and 2 are A's turns (row 2 0.5 s after row 0 ended), row 1 is B. Not
    # held (GuideLLM), the free user sends B while A's turn waits for its delay; held (AIPerf's
    # session slot), the user keeps A: its second turn goes at its delay, B after it ended
    w = _workload([0.0, 0.0, 0.1])
    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=200, block_size=16, max_num_seqs=8,
                                        max_num_batched_tokens=2048), cost_model=SLOW)
    runs = {held: simulate(w, make_policy("unlimited", {}), replace(
        cfg, closed_loop=ClosedLoop(num_users=1, conversations=Conversations(
            previous=(-1, -1, 0), delay_s=(0.0, 0.0, 0.5), held=held))))
            .records.sort_values("request_id").reset_index(drop=True) for held in (False, True)}
    free, held = runs[False], runs[True]
    assert free["arrival_s"][1] == pytest.approx(free["finished_s"][0])
    assert free["arrival_s"][2] == pytest.approx(free["finished_s"][1])
    assert held["arrival_s"][2] == pytest.approx(held["finished_s"][0] + 0.5)
    assert held["arrival_s"][1] == pytest.approx(held["finished_s"][2])
    assert ClosedLoop(num_users=1, conversations=Conversations(
        previous=(-1, 0), delay_s=(0.0, 0.0), held=True)).describe()["conversations_held"]


def test_aiperf_users_hold_their_conversations_as_aiperf_did() -> None:
    # AIPerf's --concurrency 2 is two session slots, each held from a conversation's first turn
    # to its last: the replay capped requests in flight at 2, so on a slower server a third
    # and fourth conversation opened while the first two waited out their turn delays, and a
    # faster one could send no sooner than recorded. Now: a closed loop of 2 users, each
    # holding its conversation, its later turns at the recorded gap after the turn before
    rec = read_recording(AIPERF)
    conv = rec.conversations
    assert conv is not None and conv.held
    (plan,) = stage_plans(rec) or []
    assert plan.stage.load == "closed" and plan.loop is not None
    assert plan.loop.num_users == 2 and not plan.loop.not_before_arrival
    records = _by_row(rec, simulate_recording(rec, CONFIG, cost_model=SLOW,
                                              frontend_overhead_s=0.0).records)
    arrival, finished = records["arrival_s"].to_numpy(), records["finished_s"].to_numpy()
    first = list(range(len(conv.previous)))
    for i, p in enumerate(conv.previous):
        if p >= 0:  # its user sent it the instant its delay passed
            assert arrival[i] == pytest.approx(finished[p] + conv.delay_s[i], abs=1e-9)
            first[i] = first[p]
    opened = {c: arrival[c] for c in set(first)}
    closed = {c: max(finished[i] for i in range(len(first)) if first[i] == c) for c in opened}
    for t in sorted(opened.values()):
        assert sum(opened[c] <= t < closed[c] for c in opened) <= 2


def test_turns_under_a_tick_schedule_are_said_not_held_back() -> None:
    # AIPerf --request-rate R --concurrency C: its ticks pace the sends, and the replay sends
    # a conversation's later turns at ticks in their recorded order; the table said nothing
    ticked = RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2, tick_pattern="constant")
    assert "not held back until the turn before it ended" in replay_mode(ticked, turns=True)
    closed = RecordedStage("concurrency 2", "closed", None, 2)
    assert "each user holds its conversation" in replay_mode(closed, turns=True, held=True)
    assert "no sooner than the turn before it ended" in replay_mode(closed, turns=True)
    assert replay_mode(ticked) == replay_mode(ticked, turns=False)


@pytest.mark.parametrize("pattern", ["constant", "poisson"])
def test_held_turns_under_a_tick_schedule_go_at_the_first_tick_after_their_delay(
        pattern: str) -> None:
    # AIPerf --request-rate 10 --concurrency 1 with conversations: its one session slot holds A
    # (rows 0 and 2, row 2 0.5 s after row 0 ended) before B (row 1) may open; every send takes
    # a tick, a held turn before a new conversation. The replay dropped the turns' links here
    w = _workload([0.0, 0.1, 0.2])
    loop = ClosedLoop(num_users=1, not_before_arrival=True, tick_rate_per_s=10.0,
                      tick_pattern=pattern,  # type: ignore[arg-type]
                      conversations=Conversations(previous=(-1, -1, 0),
                                                  delay_s=(0.0, 0.0, 0.5), held=True))
    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=200, block_size=16, max_num_seqs=8,
                                        max_num_batched_tokens=2048), cost_model=SLOW)
    run = simulate(w, make_policy("unlimited", {}), replace(cfg, closed_loop=loop))
    r = run.records.sort_values("request_id").reset_index(drop=True)
    arrival, finished = r["arrival_s"].tolist(), r["finished_s"].tolist()
    assert arrival[0] == 0.0
    assert finished[0] + 0.5 <= arrival[2] < finished[0] + 0.5 + (0.1 + 1e-9 if pattern ==
                                                                  "constant" else 5.0)
    assert finished[2] <= arrival[1]  # B opened only when A's last turn ended
    if pattern == "constant":  # on the schedule's grid
        for t in arrival:
            assert abs(t / 0.1 - round(t / 0.1)) < 1e-6
    with pytest.raises(ValueError, match="must be held"):
        ClosedLoop(num_users=1, not_before_arrival=True, tick_rate_per_s=10.0,
                   conversations=Conversations(previous=(-1, 0), delay_s=(0.0, 0.0)))


@pytest.mark.parametrize("pattern", ["constant", "poisson"])
def test_a_query_before_a_drawn_tick_draws_the_ticks_of_the_gap(pattern: str) -> None:
    # a user free (or a held turn ready) sooner than the send the loop waited for: the tick
    # drawn for the later query was taken, skipping the schedule's ticks in between
    loop = ClosedLoop(num_users=1, not_before_arrival=True, tick_rate_per_s=10.0,
                      tick_pattern=pattern)  # type: ignore[arg-type]
    ticks = Ticks([0.0, 0.1], loop, seed=0)
    ticks.take(0.0)
    ticks.take(0.0)
    late = ticks.first_at_or_after(5.0)
    early = ticks.first_at_or_after(2.0)
    assert 2.0 <= early < late  # poisson: 2 + Exp(0.1) < 5 for this seed, as the grid's 2.0
    if pattern == "constant":
        assert early == pytest.approx(2.0) and late == pytest.approx(5.0)
        assert ticks.first_at_or_after(0.15) == pytest.approx(0.2)
    assert ticks.first_at_or_after(early) == early  # asked again: the same tick
    ticks.take(early)
    after = ticks.first_at_or_after(early)
    assert early < after <= late
    if pattern == "constant":  # the grid's next point, not the tick drawn for 5.0
        assert after == pytest.approx(2.1)


def test_aiperf_turns_at_a_rate_take_ticks_and_wait_for_the_turn_before() -> None:
    # AIPerf 0.13.0 --request-rate 4 --request-rate-mode constant --concurrency 2 with 4
    # conversations of 3 turns (make_recording_fixtures.sh aiperf-chat): its ticks pace every
    # send, a queued later turn taking a tick before a new conversation. The replay dropped the
    # turns' links under ticks, so on a slower server a turn went before the one before it ended
    rec = read_recording(AIPERF.with_name("multiturn3_delay300_rate4c2.jsonl"))
    conv = rec.conversations
    assert conv is not None and conv.held and conv.num_later_turns == 8
    (plan,) = stage_plans(rec) or []
    assert plan.loop is not None and plan.loop.tick_rate_per_s == 4.0
    assert plan.loop.conversations is not None
    records = _by_row(rec, simulate_recording(rec, CONFIG, cost_model=SLOW,
                                              frontend_overhead_s=0.0).records)
    assert (records["status"] == "completed").all()
    assert _late_turns(conv.previous, conv.delay_s, records) == []
    arrival, finished = records["arrival_s"].to_numpy(), records["finished_s"].to_numpy()
    assert len(set(arrival.tolist())) == len(arrival)  # each send its own tick
    first = list(range(len(conv.previous)))
    for i, p in enumerate(conv.previous):
        if p >= 0:
            first[i] = first[p]
    opened = {c: arrival[c] for c in set(first)}
    closed = {c: max(finished[i] for i in range(len(first)) if first[i] == c) for c in opened}
    for t in sorted(opened.values()):
        assert sum(opened[c] <= t < closed[c] for c in opened) <= 2
