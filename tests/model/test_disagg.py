"""Disaggregated prefill/decode (issue 38 item 1): a known answer worked by hand, stepping and
skip-ahead byte-identical, properties over random deployments, bad input through the CLI."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.policies import make_policy
from kvbudget.simulator.disagg_config import FIRST_TOKENS, DisaggConfig, KVLink, PoolConfig
from kvbudget.simulator.engine import Engine, EngineHooks, RequestColumns
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.engine_variants import make_engine
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.simulator.sim_config import ROUTERS, ReplicaSetup
from kvbudget.workloads import Workload, from_columns
from tests.conftest import assert_skip_ahead_matches_stepping
from tests.model.test_properties import SETTINGS, scenarios

DISAGG_SETTINGS = settings(SETTINGS, max_examples=25)

LLAMA_8B_KV_BYTES = 32 * 8 * 128 * 2 * 2  # layers x KV heads x head dim x (K, V) x bf16
STEP_S = 0.01


def _disagg(num_prefill: int = 1, num_decode: int = 1, seconds_per_block: float = 0.025,
            **link: float) -> DisaggConfig:
    """Pools of one vLLM replica each (the run's knobs); a link that moves one 16-token block
    of Llama-3.1-8B's KV in ``seconds_per_block`` (no fixed cost a transfer unless given)."""
    bandwidth = 16 * LLAMA_8B_KV_BYTES / seconds_per_block
    link.setdefault("latency_s", 0.0)
    return DisaggConfig(PoolConfig(num_prefill), PoolConfig(num_decode),
                        KVLink("infiniband-ndr", bandwidth_bytes_s=bandwidth, **link))


def _config(disagg: DisaggConfig | None, *, skip_ahead: bool = True, blocks: int = 8) -> SimConfig:
    return SimConfig(engine=EngineConfig(num_gpu_blocks=blocks, block_size=16,
                                         skip_ahead=skip_ahead),
                     cost_model=LinearCostModel(STEP_S, 0.0, 0.0, 0.0), disaggregation=disagg)


@pytest.mark.parametrize("skip_ahead", [False, True])
def test_two_requests_worked_by_hand(skip_ahead: bool) -> None:
    """Every step takes 10 ms; a block of KV takes 25 ms over the link.

    A (16-token prompt, 3 tokens) arrives at 0, B (32 tokens, 2 tokens) at 0.002. Prefill:
    A's step [0, 0.01] (its one token: it leaves for the decode replica at 0.01), B's
    [0.01, 0.02]. Decode: A admitted at 0.01, its one block read [0.01, 0.035]
    (WAITING_FOR_REMOTE_KVS, nothing else to run: the replica runs no model and polls the
    read every 1 ms from 0.01, remote_kv.LoadNotices); B admitted at 0.02, two blocks
    [0.02, 0.07]. The poll at 0.035 sees A's read and, under async scheduling (the default),
    the schedule two iterations later, at 0.037, takes A: its last prompt token
    [0.037, 0.047] gives its first token, then 0.057 and 0.067 (finished). The idle replica's
    poll at 0.07 sees B's: its step [0.072, 0.082] gives its first token, 0.092 its second.
    """
    w = from_columns([0.0, 0.002], [16, 32], [3, 2])
    res = simulate(w, make_policy("conservative"), _config(_disagg(), skip_ahead=skip_ahead))
    rec = res.records
    assert list(rec.status) == ["completed", "completed"]
    assert list(rec.prefill_replica) == [0, 0] and list(rec.decode_replica) == [0, 0]
    assert rec.transfer_start_s.tolist() == pytest.approx([0.01, 0.02])
    assert rec.transfer_end_s.tolist() == pytest.approx([0.035, 0.07])
    assert rec.first_token_s.tolist() == pytest.approx([0.047, 0.082])
    assert rec.finished_s.tolist() == pytest.approx([0.067, 0.092])
    assert rec.ttft_s.tolist() == pytest.approx([0.047, 0.080])
    block = res.summary["engine"]["disaggregation"]
    assert block["num_transfers"] == 2
    assert block["kv_bytes_per_token_per_gpu"] == LLAMA_8B_KV_BYTES
    assert block["prefill"]["num_steps"] == 2 and block["decode"]["num_steps"] == 5


@pytest.mark.parametrize("skip_ahead", [False, True])
def test_first_token_from_the_prefill_replica_worked_by_hand(skip_ahead: bool) -> None:
    """DistServe's first token (``first_token = "prefill"``): the prefill replica's token is
    the client's; the decode replica decodes from it. Every step takes 10 ms; a block of KV
    takes 25 ms over the link.

    A (16-token prompt, 3 tokens) arrives at 0, B (32, 2) at 0.002, C (16, 1) at 0.003.
    Prefill: A's step [0, 0.01] gives A's first token (0.01); B's and C's [0.01, 0.02] give
    theirs (0.02), and C, whose output is that token, finishes there (no transfer). Decode:
    A joins at 0.01 as a 17-token prompt (its token) with 16 computed, its one prompt block
    read [0.01, 0.035], seen by the idle replica's poll at 0.035 and scheduled two polls later
    (as above); its first step [0.037, 0.047] computes the token's KV and gives the second
    token, then 0.057 the third (finished). B joins at 0.02, two blocks [0.02, 0.07], its
    second token at 0.082 (finished). Three decode steps, not five: no step recomputes a
    last prompt token.
    """
    w = from_columns([0.0, 0.002, 0.003], [16, 32, 16], [3, 2, 1])
    disagg = replace(_disagg(), first_token="prefill")
    res = simulate(w, make_policy("conservative"), _config(disagg, skip_ahead=skip_ahead))
    rec = res.records
    assert list(rec.status) == ["completed"] * 3
    assert list(rec.decode_replica) == [0, 0, -1]
    assert rec.transfer_start_s.tolist()[:2] == pytest.approx([0.01, 0.02])
    assert rec.transfer_end_s.tolist()[:2] == pytest.approx([0.035, 0.07])
    assert np.isnan(rec.transfer_end_s.iloc[2])
    assert rec.first_token_s.tolist() == pytest.approx([0.01, 0.02, 0.02])
    assert rec.finished_s.tolist() == pytest.approx([0.057, 0.082, 0.02])
    assert rec.ttft_s.tolist() == pytest.approx([0.01, 0.018, 0.017])
    assert rec.tpot_s.tolist()[:2] == pytest.approx([0.0235, 0.062])
    assert list(rec.output_tokens) == [3, 2, 1]
    block = res.summary["engine"]["disaggregation"]
    assert block["num_transfers"] == 2
    assert block["prefill"]["num_steps"] == 2 and block["decode"]["num_steps"] == 3
    # the gaps: A's 0.037 (its token to the decode's first) and 0.01, B's 0.062
    assert res.token_gaps.gap_s.tolist() == pytest.approx([0.01, 0.037, 0.062])
    assert res.token_gaps.num_gaps.tolist() == [1, 1, 1]


def test_first_token_must_be_decode_or_prefill() -> None:
    with pytest.raises(ValueError, match=r"disaggregation\.first_token must be"):
        replace(_disagg(), first_token="proxy")


def test_the_link_latency_adds_to_each_transfer() -> None:
    w = from_columns([0.0], [16], [2])
    res = simulate(w, make_policy("conservative"), _config(_disagg(latency_s=0.005)))
    assert res.records.transfer_end_s.tolist() == pytest.approx([0.01 + 0.025 + 0.005])
    # seen by the idle replica's poll at 0.04, scheduled two polls later (async scheduling)
    assert res.records.first_token_s.tolist() == pytest.approx([0.04 + 0.002 + 0.01])


def test_a_decode_replica_holds_the_blocks_of_a_request_whose_kv_is_loading() -> None:
    """A decode replica of 2 blocks (32 tokens). Both prompts prefill in one step [0, 0.01].
    The decode replica admits A (31 tokens: 2 blocks) and reads its KV [0.01, 0.06]: B's
    block does not fit beside A's, so B waits in the queue with its KV still on the prefill
    side. The idle replica's poll at 0.06 sees A's read; two polls later A's last prompt token
    [0.062, 0.072] is its one output token: it finishes, its blocks free; B's block is read
    [0.072, 0.097], seen at 0.097, its token [0.099, 0.109]."""
    w = from_columns([0.0, 0.0], [31, 16], [1, 1])
    cfg = _config(None)
    cfg = replace(cfg, disaggregation=replace(
        _disagg(), decode=PoolConfig(1, engine=replace(cfg.engine, num_gpu_blocks=2))))
    rec = simulate(w, make_policy("unlimited"), cfg).records
    assert rec.transfer_start_s.tolist() == pytest.approx([0.01, 0.072])
    assert rec.transfer_end_s.tolist() == pytest.approx([0.06, 0.097])
    assert rec.finished_s.tolist() == pytest.approx([0.072, 0.109])


def test_fits_rows_is_fits_of_every_row() -> None:
    """A replica of 16 blocks of 16 tokens keeping 8 free (watermark 0.5), max_model_len 200:
    16 + 10 tokens fit; 128 + 72 = 200 fit, the prompt in the 8 blocks the watermark leaves;
    a prompt of 129 tokens needs 9; 100 + 101 = 201 is over max_model_len."""
    engine = EngineConfig(num_gpu_blocks=16, block_size=16, max_model_len=200, watermark=0.5)
    setup = ReplicaSetup(gpu=get_gpu("H100-SXM"), model=get_model("Llama-3.1-8B"),
                         engine=engine, num_gpu_blocks=16,
                         cost_model=LinearCostModel(STEP_S, 0.0, 0.0, 0.0))
    prompt = np.array([16, 128, 129, 100], np.int64)
    output = np.array([10, 72, 1, 101], np.int64)
    columns = RequestColumns(prompt, output, np.zeros(4, np.int64), np.zeros(4))
    hooks = EngineHooks(on_finish=lambda i, t: None, on_preempt=lambda i, t: None,
                        next_external_s=lambda: math.inf, gateway_state=lambda: (0, 0))
    e = make_engine(simpy.Environment(), setup, columns, hooks)
    assert e.fits_rows().tolist() == [True, True, False, False]
    assert [e.fits(i) for i in range(4)] == [True, True, False, False]


def test_a_colocated_run_has_no_disaggregation_columns() -> None:
    w = from_columns([0.0], [16], [2])
    rec = simulate(w, make_policy("conservative"), _config(None)).records
    assert "transfer_end_s" not in rec.columns and "prefill_replica" not in rec.columns


@st.composite
def deployments(draw: st.DrawFn) -> tuple[Workload, SimConfig, str, dict[str, object]]:
    w, cfg, policy, params = draw(scenarios())
    routers = st.sampled_from(ROUTERS)
    link = KVLink("roce-200",
                  bandwidth_bytes_s=draw(st.sampled_from([1e7, 1e8, 1e9, 5e10])),
                  latency_s=draw(st.sampled_from([0.0, 0.003])))
    # (a decode replica is fcfs: DisaggConfig.check)
    decode_engine = replace(cfg.engine, scheduling_policy="fcfs")
    disagg = DisaggConfig(PoolConfig(draw(st.integers(1, 3)), router=draw(routers)),
                          PoolConfig(draw(st.integers(1, 3)), engine=decode_engine,
                                     router=draw(routers)), link,
                          first_token=draw(st.sampled_from(FIRST_TOKENS)))
    return w, replace(cfg, disaggregation=disagg), policy, params


@DISAGG_SETTINGS
@given(deployments())
def test_skip_ahead_matches_stepping_disaggregated(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
) -> None:
    w, cfg, policy, params = case
    assert_skip_ahead_matches_stepping(w, cfg, policy, params)


@DISAGG_SETTINGS
@given(deployments())
def test_kv_never_above_capacity_on_either_pool_and_no_decode_before_its_transfer(
    case: tuple[Workload, SimConfig, str, dict[str, object]],
) -> None:
    w, cfg, policy, params = case
    seen: list[Engine] = []

    def check(engine: Engine) -> None:
        kv = engine.kv
        assert 0 <= kv.num_used_blocks <= engine.num_gpu_blocks
        assert kv.num_free_blocks >= 0
        seen.append(engine)

    Engine.step_observer = check
    try:
        res = simulate(w, make_policy(policy, params), replace(
            cfg, engine=replace(cfg.engine, skip_ahead=False)))
    finally:
        Engine.step_observer = None
    rec = res.records
    done = (rec.status == "completed").to_numpy()
    assert cfg.disaggregation is not None
    if cfg.disaggregation.first_token == "prefill":  # a one-token output ends on its prefill
        one = rec.output_tokens.to_numpy() == 1
        assert (rec.decode_replica.to_numpy()[done & one] == -1).all()
        done = done & ~one
    start, end = rec.transfer_start_s.to_numpy(), rec.transfer_end_s.to_numpy()
    assert np.isfinite(end[done]).all()
    # a step follows the load's end: the decode replica's first token comes one step (at
    # least) after it (the records keep the first token a caller saw: a revoked request's may
    # be an earlier try's); the prefill's token, when it is the client's, comes before it
    once = done & (rec.num_preemptions.to_numpy() == 0)
    if cfg.disaggregation.first_token == "prefill":
        assert (rec.first_token_s.to_numpy()[once] <= start[once]).all()
        assert (rec.finished_s.to_numpy()[once] > end[once]).all()
    else:
        assert (rec.first_token_s.to_numpy()[once] > end[once]).all()
    assert (start[done] >= rec.admitted_s.to_numpy()[done]).all()
    assert (end[done] >= start[done]).all()
    assert (rec.decode_replica.to_numpy()[done] >= 0).all()
    tl = res.timeline
    assert (tl.kv_used_tokens <= tl.kv_capacity_tokens).all()


runner = CliRunner()
SCENARIO = """
[engine]
num_gpu_blocks = 1024
[disaggregation]
{link}
[disaggregation.prefill]
num_replicas = 1
{decode}
[workload]
kind = "synthetic"
duration_s = 2
arrival = {{ kind = "poisson", rate_rps = 2.0 }}
[[workload.tiers]]
name = "interactive"
share = 1.0
prompt = {{ kind = "lognormal", mean = 200, sigma = 0.5, max_tokens = 512 }}
output = {{ kind = "lognormal", mean = 20, sigma = 0.5 }}
"""


@pytest.mark.parametrize(("link", "decode", "field"), [
    ('link = "infiniband-ndr"', "", "disaggregation.decode"),
    ("link_bandwidth_gb_s = 0", "[disaggregation.decode]\nnum_replicas = 1",
     "disaggregation.link_bandwidth_gb_s"),
    ('link = "carrier-pigeon"', "[disaggregation.decode]\nnum_replicas = 1",
     "disaggregation.link"),
    ("", "[disaggregation.decode]\nnum_replicas = 1\nengine = { max_num_seqz = 4 }",
     "disaggregation.decode.engine.max_num_seqz"),
])
def test_bad_disaggregation_is_one_line_naming_the_field(
    tmp_path: Path, link: str, decode: str, field: str,
) -> None:
    path = tmp_path / "d.toml"
    path.write_text(SCENARIO.format(link=link, decode=decode))
    res = runner.invoke(app, ["simulate", "--scenario", str(path)])
    err = res.stderr.strip()
    assert res.exit_code == 2, res.output
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert str(path) in err and field in err, err


def test_a_disaggregated_scenario_runs_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    path.write_text(SCENARIO.format(link='link = "nvlink"',
                                    decode="[disaggregation.decode]\nnum_replicas = 2"))
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--scenario", str(path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    import pandas as pd

    rec = pd.read_parquet(out / "requests.parquet")
    done = rec.status == "completed"
    assert done.any()
    assert set(rec.decode_replica[done]) <= {0, 1}
    assert (rec.first_token_s[done] > rec.transfer_end_s[done]).all()


def test_a_lease_holds_the_prefill_pool_until_the_transfer_ends() -> None:
    """The prefill pool has 3 blocks (48 tokens); steps take 10 ms plus 0.1 ms a prefill
    token. The conservative policy's parts: A (prompt 16, 2 tokens) 32 tokens on the decode
    pool and 17 -> 32 on the prefill pool (its reservation with max_tokens = 1); B (prompt 32)
    48 and 33 -> 48. Both fit the decode pool, but B's prefill part does not fit beside A's:
    B waits at the gateway until A's KV has moved.

    A: prefill [0, 0.0116], KV [0.0116, 0.0366]. Then B is admitted (0.0366) and prefills
    [0.0366, 0.0498]; the idle decode replica's poll at 0.0366 sees A's KV and two polls later
    A's last prompt token [0.0386, 0.0487] is its first token, its second at 0.0587
    (finished). B, handed off during that step, is taken as it ends (nothing else runs): its
    two blocks [0.0587, 0.1087], seen at 0.1087, its tokens at 0.1208 and 0.1308.
    Without the prefill part both would prefill in one step at 0."""
    w = from_columns([0.0, 0.0], [16, 32], [2, 2])
    engine = EngineConfig(num_gpu_blocks=8, block_size=16)
    disagg = replace(_disagg(), prefill=PoolConfig(1, engine=replace(engine, num_gpu_blocks=3)))
    for skip_ahead in (False, True):
        cfg = SimConfig(engine=replace(engine, skip_ahead=skip_ahead),
                        cost_model=LinearCostModel(STEP_S, 1e-4, 0.0, 0.0),
                        disaggregation=disagg)
        rec = simulate(w, make_policy("conservative"), cfg).records
        assert rec.admitted_s.tolist() == pytest.approx([0.0, 0.0366])
        assert rec.transfer_start_s.tolist() == pytest.approx([0.0116, 0.0587])
        assert rec.transfer_end_s.tolist() == pytest.approx([0.0366, 0.1087])
        assert rec.first_token_s.tolist() == pytest.approx([0.0487, 0.1208])
        assert rec.finished_s.tolist() == pytest.approx([0.0587, 0.1308])


@pytest.mark.parametrize("skip_ahead", [False, True])
@pytest.mark.parametrize(("async_scheduling", "expected"), [
    (False, ([0.051, 0.191], [0.641, 0.211])), (True, ([0.052, 0.222], [0.642, 0.242]))])
def test_a_read_that_ends_during_a_decode_run_is_noticed_at_the_steps_vllm_takes(
        skip_ahead: bool, async_scheduling: bool,
        expected: tuple[list[float], list[float]]) -> None:
    """A (16 tokens, 60 outputs) and B (32 tokens, 3 outputs, at 0.1); steps of 10 ms, a
    block read in 25 ms plus 4.5 ms. Prefill: A [0, 0.01], B [0.1, 0.11]. Decode: A's block is
    read [0.01, 0.0395] while the replica runs no model; its poll at 0.04 sees it and A is
    scheduled one poll later (0.041) without async scheduling, two with it (0.042). A then
    decodes a step every 10 ms. B, handed off at 0.11, is admitted at the next boundary
    (0.111) without async scheduling, the one after with it (0.122); its two blocks take
    0.0545 s. Without async scheduling the read ends at 0.1655, the step starting at 0.171
    polls it and B's last prompt token runs in the next, [0.181, 0.191]; with it the read ends
    at 0.1765, is polled at 0.182 and B is scheduled three boundaries later, [0.212, 0.222].
    Stepping and skip-ahead alike: a decode run ends where B becomes schedulable."""
    w = from_columns([0.0, 0.1], [16, 32], [60, 3])
    cfg = _config(_disagg(latency_s=0.0045), blocks=64, skip_ahead=skip_ahead)
    cfg = replace(cfg, engine=replace(cfg.engine, async_scheduling=async_scheduling))
    rec = simulate(w, make_policy("conservative"), cfg).records
    assert list(rec.status) == ["completed", "completed"]
    assert rec.transfer_end_s.tolist() == pytest.approx(
        [0.0395, rec.transfer_start_s[1] + 0.0545])
    first, finished = expected
    assert rec.first_token_s.tolist() == pytest.approx(first)
    assert rec.finished_s.tolist() == pytest.approx(finished)


def test_a_hand_off_during_a_decode_run_is_admitted_within_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The case above with async scheduling: B, handed off at 0.11 while A decodes, is
    admitted at the boundary 0.122 (its read started there) and A's decode run goes on to
    where B becomes schedulable, 0.212: the decode replica's loop schedules no step at 0.122
    with the speed-up, where stepping's does (the same records either way, above)."""
    w = from_columns([0.0, 0.1], [16, 32], [60, 3])
    cfg = _config(_disagg(latency_s=0.0045), blocks=64)
    cfg = replace(cfg, engine=replace(cfg.engine, async_scheduling=True))
    seen: dict[bool, list[float]] = {}
    for skip_ahead in (False, True):
        times: list[float] = []
        monkeypatch.setattr(Engine, "step_observer", staticmethod(
            lambda e, times=times: times.append(round(e.t, 6)) if e.remote is not None else None))
        run = replace(cfg, engine=replace(cfg.engine, skip_ahead=skip_ahead))
        rec = simulate(w, make_policy("conservative"), run).records
        assert rec.transfer_start_s[1] == pytest.approx(0.122)
        seen[skip_ahead] = times
    assert 0.122 in seen[False] and 0.122 not in seen[True]
    assert [t for t in seen[True] if 0.052 < t < 0.242] == [0.212, 0.222]


def test_the_kv_figures_are_the_decode_pools_and_the_prefill_pools_beside() -> None:
    """The summary's KV capacity is the decode pool's (the gateway's budget), so its KV used
    is the decode pool's too, and the timeline's KV columns with it; the prefill pool's use is
    its own (``engine.disaggregation.prefill``, the timeline's ``prefill_kv_*``). Before, the
    used figures summed both pools over the decode pool's capacity (and the timeline's
    capacity was both pools'), so a prefill-heavy deployment's decode pool looked fuller.

    The case of the test above: both prompts (31 and 16 tokens: 2 + 1 blocks of 16) prefill in
    one step [0, 0.01] on a prefill replica of 8 blocks, 48 tokens for 0.01 s over the run's
    0.109 s; the decode replica has 2 blocks (32 tokens)."""
    w = from_columns([0.0, 0.0], [31, 16], [1, 1])
    cfg = _config(None)
    cfg = replace(cfg, disaggregation=replace(
        _disagg(), decode=PoolConfig(1, engine=replace(cfg.engine, num_gpu_blocks=2))))
    res = simulate(w, make_policy("unlimited"), cfg)
    s, tl = res.summary, res.timeline
    pools = s["engine"]["disaggregation"]
    prefill, decode = pools["prefill"], pools["decode"]
    assert prefill["kv_capacity_tokens"] == 128 and decode["kv_capacity_tokens"] == 32
    assert prefill["kv_used_mean"] == pytest.approx(48 * 0.01 / 0.109)
    assert prefill["kv_used_mean_fraction"] == pytest.approx(48 * 0.01 / 0.109 / 128)
    assert s["kv_capacity_tokens"] == 32 and (tl["kv_capacity_tokens"] == 32).all()
    assert s["kv"]["used_mean"] == pytest.approx(decode["kv_used_mean"])
    assert s["kv"]["used_mean_fraction"] == pytest.approx(decode["kv_used_mean_fraction"])
    assert tl["prefill_kv_used_tokens"].tolist() == [48]  # sampled at 0, in the prefill step
    assert tl["kv_used_tokens"].tolist() == [0]
    assert (tl["prefill_kv_capacity_tokens"] == 128).all()


@pytest.mark.parametrize("skip_ahead", [False, True])
def test_the_decode_pools_kv_used_counts_the_blocks_held_while_their_kv_is_read(
        skip_ahead: bool) -> None:
    """The case above, the decode replica's KV token-seconds worked by hand: it holds A's two
    blocks (32 tokens) from A's admission at 0.01, through its read and the idle polls, to the
    end of A's step at 0.072 (0.062 s, no step but the last running), then B's one block (16
    tokens) from its admission at 0.072 to the end of its step at 0.109 (0.037 s): 32 x 0.062
    + 16 x 0.037 = 2.576 token-seconds over the run's 0.109 s. Before, the integral counted
    the blocks only during the two steps (0.01 s each: 32 x 0.01 + 16 x 0.01 = 0.48)."""
    w = from_columns([0.0, 0.0], [31, 16], [1, 1])
    cfg = _config(None, skip_ahead=skip_ahead)
    cfg = replace(cfg, disaggregation=replace(
        _disagg(), decode=PoolConfig(1, engine=replace(cfg.engine, num_gpu_blocks=2))))
    s = simulate(w, make_policy("unlimited"), cfg).summary
    decode = s["engine"]["disaggregation"]["decode"]
    assert decode["kv_used_mean"] == pytest.approx((32 * 0.062 + 16 * 0.037) / 0.109, rel=1e-12)
    assert decode["kv_used_mean_fraction"] == pytest.approx(
        (32 * 0.062 + 16 * 0.037) / 0.109 / 32, rel=1e-12)
    assert s["kv"]["used_mean"] == decode["kv_used_mean"]


@pytest.mark.parametrize("skip_ahead", [False, True])
def test_blocks_freed_by_an_abort_while_the_replica_is_idle_count_until_the_abort(
        skip_ahead: bool) -> None:
    """A (31 tokens: 2 blocks, one output token) alone with a 30 ms lease: prefilled [0, 0.01],
    admitted by the decode replica at 0.01, whose read would end at 0.06; the lease expires at
    0.03 while the replica runs no model, and the abort frees A's blocks then. The decode
    replica held 32 tokens for 0.02 s over the run's 0.03 s (the prefill replica 32 tokens for
    its 0.01 s step). Counting the blocks when the replica next woke (after the abort) would
    give nothing."""
    w = from_columns([0.0], [31], [1])
    cfg = _config(None, skip_ahead=skip_ahead)
    cfg = replace(cfg, lease_ttl_s=0.03, disaggregation=replace(
        _disagg(), decode=PoolConfig(1, engine=replace(cfg.engine, num_gpu_blocks=2))))
    res = simulate(w, make_policy("unlimited"), cfg)
    assert list(res.records.status) == ["preempted_dropped"]
    assert res.records.transfer_start_s.tolist() == pytest.approx([0.01])
    pools = res.summary["engine"]["disaggregation"]
    assert pools["decode"]["kv_used_mean"] == pytest.approx(32 * 0.02 / 0.03, rel=1e-12)
    assert pools["prefill"]["kv_used_mean"] == pytest.approx(32 * 0.01 / 0.03, rel=1e-12)


@pytest.mark.parametrize("skip_ahead", [False, True])
def test_the_timeline_samples_the_blocks_held_while_no_step_runs(skip_ahead: bool) -> None:
    """The case above sampled every 5 ms: the decode replica holds A's 32 tokens from its
    admission at 0.01 to the abort at 0.03 and never steps, so its samples at 0.01, 0.015,
    0.02 and 0.025 show 32 tokens in use, none running. Before, an engine that ran no step
    after the hold took no sample of it: the timeline stopped at 0.005, where the summary's
    KV used counted the hold."""
    w = from_columns([0.0], [31], [1])
    cfg = _config(None, skip_ahead=skip_ahead)
    cfg = replace(cfg, lease_ttl_s=0.03, timeline_period_s=0.005, disaggregation=replace(
        _disagg(), decode=PoolConfig(1, engine=replace(cfg.engine, num_gpu_blocks=2))))
    tl = simulate(w, make_policy("unlimited"), cfg).timeline
    assert tl.time_s.tolist() == pytest.approx([0.0, 0.005, 0.01, 0.015, 0.02, 0.025])
    assert tl.kv_used_tokens.tolist() == [0, 0, 32, 32, 32, 32]
    assert tl.num_running.tolist() == [1, 1, 0, 0, 0, 0]


def test_a_fleets_timeline_has_no_prefill_columns() -> None:
    w = from_columns([0.0], [16], [2])
    tl = simulate(w, make_policy("conservative"), _config(None)).timeline
    assert "prefill_kv_used_tokens" not in tl.columns
