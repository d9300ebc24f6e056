"""Speculative decoding (issue 39 item 2): known answers worked by hand from vLLM v1's rules
(docs/speculative.md), the geometric acceptance, properties, and bad input at the command line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.speculative import (
    SpeculativeConfig,
    draft_pass_model,
    expected_accepted_tokens,
    mean_acceptance_length,
    rate_for_length,
)
from kvbudget.policies import TierConfig, make_policy
from kvbudget.simulator.engine import Engine
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import RunResult, SimConfig, simulate
from kvbudget.simulator.scenario import make_scenario
from tests.conftest import REPO, make_workload

TIERS = (TierConfig("interactive", queue_timeout_s=None),
         TierConfig("batch", priority=1, queue_timeout_s=None))
LINEAR = LinearCostModel(0.01, 0.001, 0.0, 0.0)  # 10 ms a step + 1 ms a prefill/verify token


def _config(spec: SpeculativeConfig | None, *, skip: bool = True, blocks: int = 10_000,
            cost: LinearCostModel | None = LINEAR, budget: int = 8192) -> SimConfig:
    return SimConfig(engine=EngineConfig(num_gpu_blocks=blocks, max_num_batched_tokens=budget,
                                         max_num_seqs=256, skip_ahead=skip,
                                         speculative_config=spec),
                     tiers=TIERS, cost_model=cost)


def _run(spec: SpeculativeConfig | None, prompts: list[int], outputs: list[int],
         **kw: object) -> RunResult:
    w = make_workload([0.0] * len(prompts), prompts, outputs)
    return simulate(w, make_policy("unlimited"), _config(spec, **kw))  # type: ignore[arg-type]


def ngram(rate: float, k: int = 3) -> SpeculativeConfig:
    return SpeculativeConfig("ngram", k, acceptance_rate=rate)


# --- known answers --------------------------------------------------------------------------
def test_every_draft_accepted_emits_k_plus_one_tokens_a_step() -> None:
    # step 1: prefill 100 tokens (0.01 + 0.100 s), first token; then each step verifies the
    # last token and 3 drafts (a chunk of 4 query tokens: 0.01 + 0.004 s) and emits 3 + 1:
    # outputs 1 -> 5 -> 9, the request's 9 tokens in 3 steps
    r = _run(ngram(1.0), [100], [9]).records.iloc[0]
    assert r.output_tokens == 9
    assert r.ttft_s == pytest.approx(0.11)
    assert r.e2e_s == pytest.approx(0.11 + 2 * 0.014)


def test_acceptance_never_passes_the_target_output() -> None:
    # 1 -> 5 -> 8: the last step may accept 2 of its 3 drafts (its own token is the 8th)
    res = _run(ngram(1.0), [100], [8])
    assert res.records.iloc[0].output_tokens == 8
    assert res.records.iloc[0].e2e_s == pytest.approx(0.11 + 2 * 0.014)
    spec = res.summary["engine"]["speculative"]
    assert (spec["num_verify_steps"], spec["num_draft_tokens"], spec["num_accepted_tokens"]) == (
        2, 6, 5)
    assert spec["mean_acceptance_length"] == pytest.approx(1 + 5 / 2)


def test_no_draft_accepted_emits_one_token_a_step_at_the_verify_cost() -> None:
    # rate 0: 8 verify steps of 4 query tokens after the prefill, one token each
    r = _run(ngram(0.0), [100], [9]).records.iloc[0]
    assert r.output_tokens == 9
    assert r.e2e_s == pytest.approx(0.11 + 8 * 0.014)


def test_drafts_count_toward_the_token_budget() -> None:
    # budget 5 a step: a second request's 100-token prompt is chunked behind the first one's
    # 4 verify tokens; the chunk gets 1 token while the first verifies (5 - 4)
    w = make_workload([0.0, 0.0], [4, 100], [3, 2])
    cfg = _config(ngram(1.0))
    cfg = replace(cfg, engine=replace(cfg.engine, max_num_batched_tokens=104))
    rec = simulate(w, make_policy("unlimited"), cfg).records
    # step 1: both prompts (4 + 100 = 104 tokens, 0.114 s): first tokens; step 2: each verifies
    # 1 + 2 drafts (the first needs 2 more tokens, the second 1: drafts stay 3 each) = 8 tokens
    assert list(rec.output_tokens) == [3, 2]
    assert rec.finished_s.iloc[0] == pytest.approx(0.114 + 0.01 + 0.008)


def test_the_eagle_step_adds_k_draft_passes_and_allocates_lookahead_slots() -> None:
    k = 3
    spec = SpeculativeConfig("eagle", k, acceptance_rate=1.0)
    blocks: list[int] = []

    def observe(e: Engine) -> None:
        blocks.append(int(e.kv.num_blocks[0]))

    Engine.step_observer = observe
    try:
        res = _run(spec, [16], [5], skip=False)
    finally:
        Engine.step_observer = None
    # step 1 allocates the prompt's 16 tokens plus 3 lookahead slots (vllm/config/vllm.py:
    # num_lookahead_tokens = k for EAGLE): 2 blocks of 16; step 2 verifies tokens 17..20
    # (16 computed + 4) plus 3 lookahead: 23 tokens, still 2 blocks
    assert blocks == [0, 2]
    head = draft_pass_model("eagle", get_model("Llama-3.1-8B"), None, get_gpu("H100-80GB"), 1)
    assert head is not None
    # the verify step: 0.01 + 4 tokens at 1 ms, plus 3 passes of the head over 1 request
    # attending to its 20 tokens, each less the host's gap between steps
    one = float(head.step_time(0.0, 1.0, 20.0, 0.0, 0.0)) - head.step_overhead_s
    r = res.records.iloc[0]
    assert r.output_tokens == 5
    assert r.e2e_s == pytest.approx(0.01 + 0.016 + 0.014 + k * one)
    assert res.summary["engine"]["speculative"]["draft_s"] == pytest.approx(k * one)


def test_mean_acceptance_length_follows_the_geometric_expectation() -> None:
    # 200 requests of 400 tokens at rate 0.6, k = 4: E[A + 1] = (1 - 0.6**5) / 0.4 = 2.3056
    rate, k = 0.6, 4
    res = _run(SpeculativeConfig("eagle3", k, acceptance_rate=rate), [64] * 200, [400] * 200)
    spec = res.summary["engine"]["speculative"]
    assert spec["expected_acceptance_length"] == pytest.approx((1 - rate ** (k + 1)) / (1 - rate))
    # ~35,000 verify steps: the mean within 2 % (its standard error is ~0.3 %, and the last
    # step of each request, cut at its target output, lowers it by ~0.3 %)
    assert spec["mean_acceptance_length"] == pytest.approx(spec["expected_acceptance_length"],
                                                           rel=0.02)
    assert all(res.records.output_tokens == 400)


def test_acceptance_length_given_resolves_to_the_rate() -> None:
    spec = SpeculativeConfig("mtp", 3, acceptance_length=2.5)
    assert mean_acceptance_length(spec.rate, 3) == pytest.approx(2.5, abs=1e-9)
    assert "acceptance_length 2.5 given" in spec.assumed()


def test_acceptance_by_tier() -> None:
    # interactive accepts nothing (rate 0), batch every draft (its tier's rate 1). Step 1: both
    # prompts (200 tokens, 0.21 s); steps 2-3 verify 4 tokens each (0.01 + 0.008 s): batch
    # 1 -> 5 -> 9 (done at 0.246 s), interactive 1 -> 2 -> 3; then interactive alone, 6 steps
    # of 0.014 s: 3 -> 9 at 0.33 s
    spec = SpeculativeConfig("ngram", 3, acceptance_rate=0.0, acceptance_by_tier=(("batch", 1.0),))
    w = make_workload([0.0, 0.0], [100, 100], [9, 9], tiers=["interactive", "batch"])
    rec = simulate(w, make_policy("unlimited"), _config(spec)).records
    assert list(rec.output_tokens) == [9, 9]
    assert rec.finished_s.iloc[1] == pytest.approx(0.246)
    assert rec.finished_s.iloc[0] == pytest.approx(0.33)


def test_acceptance_by_tier_refuses_an_unknown_tier_and_tiers_sharing_a_priority() -> None:
    spec = SpeculativeConfig("ngram", 3, acceptance_rate=0.5, acceptance_by_tier=(("chat", 1.0),))
    with pytest.raises(ValueError, match=r"acceptance_by_tier\.chat: no such tier"):
        spec.resolved(0, {"interactive": 0, "batch": 1})
    spec = SpeculativeConfig("ngram", 3, acceptance_rate=0.5, acceptance_by_tier=(("batch", 1.0),))
    with pytest.raises(ValueError, match="tiers of priority 0 have different acceptance"):
        spec.resolved(0, {"interactive": 0, "batch": 0})
    assert spec.resolved(7, {"interactive": 0, "batch": 1}).rate_by_priority == ((0, 0.5), (1, 1.0))


# --- properties -----------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(1, 8))
def test_rate_for_length_inverts_the_expectation(rate: float, k: int) -> None:
    length = mean_acceptance_length(rate, k)
    assert length == pytest.approx(1 + expected_accepted_tokens(rate, k))
    assert mean_acceptance_length(rate_for_length(length, k), k) == pytest.approx(length,
                                                                                 abs=1e-9)


def _same(a: RunResult, b: RunResult) -> None:
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    assert a.summary["engine"] == b.summary["engine"]


def both_ways(spec: SpeculativeConfig, reqs: list[tuple[int, int]], blocks: int) -> dict[str, Any]:
    """Requests (prompt, output) arriving 0.1 s apart on ``blocks`` blocks of 4 tokens (few:
    preemptions drop drafts and recompute; the scheduler asserts its invariants every step),
    stepped and with skip-ahead: the same results, every completed request its whole output;
    the speculative summary."""
    prompts, outputs = [p for p, _ in reqs], [o for _, o in reqs]
    w = make_workload([0.1 * j for j in range(len(reqs))], prompts, outputs)
    runs = []
    for skip in (False, True):
        cfg = _config(spec, skip=skip, blocks=blocks)
        cfg = replace(cfg, engine=replace(cfg.engine, block_size=4, max_model_len=None))
        runs.append(simulate(w, make_policy("unlimited"), cfg))
    _same(*runs)
    rec = runs[0].records
    done = rec[rec.status == "completed"]
    assert (done.output_tokens.to_numpy() == np.asarray(outputs)[done.index]).all()
    spec_summary: dict[str, Any] = runs[0].summary["engine"]["speculative"]
    return spec_summary


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 5), st.floats(0.0, 1.0), st.sampled_from(["ngram", "eagle", "mtp"]),
       st.lists(st.tuples(st.integers(1, 60), st.integers(1, 40)), min_size=1, max_size=8),
       st.integers(6, 40))
def test_speculation_completes_every_request_and_skip_ahead_equals_stepping(
        k: int, rate: float, method: str, reqs: list[tuple[int, int]], blocks: int) -> None:
    s = both_ways(SpeculativeConfig(method, k, acceptance_rate=rate), reqs, blocks)
    assert s["num_accepted_tokens"] <= s["num_draft_tokens"] <= k * s["num_verify_steps"]


def test_draws_are_keyed_per_request_and_step_not_by_call_order() -> None:
    # the same request served alone and beside others accepts the same drafts at each of its
    # steps (its rows and arrival are the same; the other requests change the batch only)
    spec = SpeculativeConfig("eagle", 4, acceptance_rate=0.5)
    alone = _run(spec, [50], [300]).records.iloc[0]
    w = make_workload([0.0, 0.0, 0.0], [50, 70, 90], [300, 120, 200])
    beside = simulate(w, make_policy("unlimited"), _config(spec)).records.iloc[0]
    # equal draws give equal counts of steps with output: one gap fewer than those steps
    assert alone.output_tokens == beside.output_tokens == 300
    assert _steps_with_output(spec, [50], [300]) == _steps_with_output(
        spec, [50, 70, 90], [300, 120, 200])


def _steps_with_output(spec: SpeculativeConfig, prompts: list[int],
                       outputs: list[int]) -> int:
    seen: list[int] = []

    def observe(e: Engine) -> None:
        assert e.spec is not None
        seen.append(int(e.spec.num_output_steps[0]))

    Engine.step_observer = observe
    try:
        _run(spec, prompts, outputs, skip=False)
    finally:
        Engine.step_observer = None
    return max(seen)


def test_off_means_no_speculative_block_in_the_summary() -> None:
    assert "speculative" not in _run(None, [10], [5]).summary["engine"]


# --- the command line ---------------------------------------------------------------------
runner = CliRunner()
SCENARIO = """\
seed = 1
model = "Llama-3.1-8B"
[engine]
num_gpu_blocks = 2000
[engine.speculative_config]
method = "eagle"
num_speculative_tokens = 3
acceptance_rate = 0.7
[workload]
kind = "synthetic"
duration_s = 3
arrival = {{ kind = "poisson", rate_rps = 2.0 }}
[[workload.tiers]]
name = "interactive"
share = 1.0
prompt = {{ kind = "fixed", tokens = 100 }}
output = {{ kind = "fixed", tokens = 50 }}
{extra}"""


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "spec.toml"
    path.write_text(SCENARIO.format(extra=""))
    yield path


@pytest.mark.parametrize(("expr", "field"), [
    ("engine.speculative_config.acceptance_rate=1.5", "engine.speculative_config.acceptance_rate"),
    ("engine.speculative_config.acceptance_rate=-0.1", "engine.speculative_config.acceptance_rate"),
    ("engine.speculative_config.num_speculative_tokens=0",
     "engine.speculative_config.num_speculative_tokens"),
    ('engine.speculative_config.method="medusa2"', "engine.speculative_config.method"),
    ("engine.speculative_config.acceptance_by_tier.chat=0.5",
     "engine.speculative_config.acceptance_by_tier.chat"),
    ("engine.speculative_config.acceptance_by_tier.interactive=1.2",
     "engine.speculative_config.acceptance_by_tier.interactive"),
    ("engine.speculative_config.acceptance_length=2", "engine.speculative_config"),
    ("engine.speculative_config.draft_vocab_size=32000",  # the scenario's method is eagle
     "engine.speculative_config.draft_vocab_size"),
    ("engine.speculative_config.draft_vocab_size=0", "engine.speculative_config.draft_vocab_size"),
])
def test_bad_speculative_config_is_one_line_naming_the_field(
        scenario: Path, expr: str, field: str) -> None:
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--set", expr])
    err = res.stderr.strip()
    assert res.exit_code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    # a bad value the --set gave names its field, not the file; a field of the file's that
    # the --set's value conflicts with names the file
    assert field in err and (str(scenario) in err) == (expr.partition("=")[0] != field), err


def test_a_draft_vocabulary_beyond_the_targets_is_one_line_naming_the_field(
        scenario: Path) -> None:
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--set",
                              'engine.speculative_config.method="eagle3"', "--set",
                              "engine.speculative_config.draft_vocab_size=128257"])
    err = res.stderr.strip()
    assert res.exit_code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert str(scenario) not in err and "engine.speculative_config.draft_vocab_size" in err, err
    assert "128256" in err  # Llama-3.1-8B's vocabulary, the bound


def test_an_eagle3_heads_draft_vocabulary_prices_its_passes_by_hand() -> None:
    # as the eagle test above, with EAGLE-3's own LM head of 32,000 rows (vLLM's
    # Eagle3LlamaForCausalLM): each of the 3 passes is the 32,000-row head's decode step over 1
    # request attending to its 20 tokens, less the host's gap; without it the target's 128,256
    k = 3
    gpu, model = get_gpu("H100-80GB"), get_model("Llama-3.1-8B")
    got = {}
    for vocab in (None, 32_000):
        spec = SpeculativeConfig("eagle3", k, acceptance_rate=1.0, draft_vocab_size=vocab)
        res = _run(spec, [16], [5])
        head = draft_pass_model("eagle3", model, None, gpu, 1, vocab)
        assert head is not None and head.model.vocab_size == (vocab or 128_256)
        one = float(head.step_time(0.0, 1.0, 20.0, 0.0, 0.0)) - head.step_overhead_s
        r = res.records.iloc[0]
        assert r.output_tokens == 5
        assert r.e2e_s == pytest.approx(0.01 + 0.016 + 0.014 + k * one)
        got[vocab] = res.summary["engine"]["speculative"]["draft_s"]
        assert got[vocab] == pytest.approx(k * one)
    # 96,256 fewer rows of 4,096 bf16 weights a pass, read at 3.35 TB/s x 0.90: 0.26 ms
    assert got[None] - got[32_000] == pytest.approx(k * 96_256 * 4_096 * 2 / (3.35e12 * 0.9),
                                                    rel=0.01)
    assert "draft vocabulary 32000" in SpeculativeConfig(
        "eagle3", k, acceptance_rate=0.5, draft_vocab_size=32_000).assumed()
    # with the smaller head, skip-ahead gives the stepping results, bit for bit
    both_ways(SpeculativeConfig("eagle3", k, acceptance_rate=0.6, draft_vocab_size=32_000),
              [(30, 20), (12, 33), (50, 7)], 40)


def test_a_draft_model_larger_than_the_target_is_a_warning(scenario: Path) -> None:
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario),
                              "--set", 'engine.speculative_config.method="draft_model"',
                              "--set", 'engine.speculative_config.model="Llama-3.1-70B"'])
    assert res.exit_code == 0, res.stderr
    warnings = [line for line in res.stdout.replace("\n  ", " ").splitlines()
                if line.startswith("warning: ")]
    assert len(warnings) == 1 and "engine.speculative_config.model" in warnings[0]
    assert "larger than the target" in warnings[0]
    assert "speculative decoding: " in res.stdout and "draft_model, k=3" in res.stdout
    # kept on the run: --json, a saved run and a notebook's RunResult carry it (it was
    # printed to the terminal only)
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--json",
                              "--set", 'engine.speculative_config.method="draft_model"',
                              "--set", 'engine.speculative_config.model="Llama-3.1-70B"'])
    summary = json.loads(res.stdout)
    assert len(summary["warnings"]) == 1 and "larger than the target" in summary["warnings"][0]
    assert "larger than the target" in res.stderr


def test_a_fleet_with_speculation_sums_its_replicas_and_skip_ahead_equals_stepping() -> None:
    sets = ["fleet.num_replicas=3", "workload.duration_s=20",
            'engine.speculative_config.method="eagle3"',
            "engine.speculative_config.num_speculative_tokens=3",
            "engine.speculative_config.acceptance_length=2.5"]
    runs = []
    for skip in ("true", "false"):
        scn = make_scenario(REPO / "scenarios" / "synth_conservative.toml",
                            [*sets, f"engine.skip_ahead={skip}"])
        runs.append(simulate(scn.workload(), scn.make_policy(None), scn.sim_config()))
    _same(*runs)
    engine = runs[0].summary["engine"]
    per = [r["speculative"] for r in engine["fleet"]["replicas"]]
    fleet = engine["speculative"]
    for key in ("num_verify_steps", "num_draft_tokens", "num_accepted_tokens"):
        assert fleet[key] == sum(p[key] for p in per) > 0
    assert fleet["mean_acceptance_length"] == pytest.approx(
        1 + fleet["num_accepted_tokens"] / fleet["num_verify_steps"])
