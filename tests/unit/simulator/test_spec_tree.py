"""Speculative draft trees (issue 39): vLLM's ``speculative_token_tree`` in the engine, the
shapes of a tree step (vLLM 0.11.0's ``propose_tree``, SGLang 0.4.4.post1's EAGLE worker),
known answers worked by hand, skip-ahead equal to stepping, and bad input at the command line."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.speculative import (
    DraftShape,
    SpeculativeConfig,
    chain_shape,
    draft_pass_model,
    mean_acceptance_length,
    parse_token_tree,
    rate_for_length,
    sglang_tree_shape,
    vllm_tree_shape,
)
from kvbudget.policies import make_policy
from kvbudget.simulator.engine import Engine
from kvbudget.simulator.run import RunResult, simulate
from tests.conftest import REPO, make_workload
from tests.unit.simulator.test_speculative import _config, _run, both_ways

TREE = "[(0,), (1,), (0, 0), (1, 0)]"  # two branches of two: 4 drafts, depth 2


def tree(rate: float, text: str = TREE, method: str = "eagle") -> SpeculativeConfig:
    return SpeculativeConfig(method, len(parse_token_tree(text, "t")), acceptance_rate=rate,
                             speculative_token_tree=text)


# --- the shapes ---------------------------------------------------------------------------
def test_a_vllm_tree_is_sorted_breadth_first_and_its_passes_cumulate_the_levels() -> None:
    # vLLM 0.11.0 sorts the nodes by (depth, path); propose_tree's pass for level l + 1 runs
    # every draft of levels 1..l (query_len = total_num_drafts): 2, then 2 + 4 = 6 tokens
    text = "[(1, 1), (0,), (0, 0), (1,), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (1, 0, 0)," \
           " (1, 0, 1), (0, 1, 0), (0, 1, 1), (1, 1, 0), (1, 1, 1)]"
    nodes = parse_token_tree(text, "t")
    assert nodes[:3] == ((0,), (1,), (0, 0)) and len(nodes) == 14
    assert vllm_tree_shape(nodes) == DraftShape(15, 3, (1, 2, 6))
    # a chain given as a tree runs its passes over the drafts so far too (the tree backend)
    assert vllm_tree_shape(parse_token_tree("[(0,), (0, 0), (0, 0, 0)]", "t")) == DraftShape(
        4, 3, (1, 1, 2))
    assert chain_shape(3) == DraftShape(4, 3, (1, 1, 1)) and chain_shape(3).is_chain


def test_sglang_s_tree_verifies_num_draft_tokens_and_drafts_topk_wide() -> None:
    # SGLang PR #4716's settings: 8 steps, top-8, 64 draft tokens verified (the root among
    # them): the draft's extend (one pass) then 7 passes of 8 tokens a request; 8 accepted
    # at most; with fewer draft tokens than steps, no more than the drafts verified
    assert sglang_tree_shape(8, 8, 64) == DraftShape(64, 8, (1,) + (8,) * 7)
    assert sglang_tree_shape(5, 1, 6).is_chain  # topk 1 and num_steps + 1 tokens: a chain
    assert sglang_tree_shape(8, 4, 4).max_accepted == 3


def test_the_acceptance_resolves_over_the_tree_s_depth() -> None:
    spec = SpeculativeConfig("eagle3", 4, acceptance_length=2.5, speculative_token_tree=TREE)
    assert spec.rate == rate_for_length(2.5, 2)
    assert mean_acceptance_length(spec.rate, 2) == pytest.approx(2.5)
    assert "tree of 4 drafts, depth 2" in spec.assumed()


# --- known answers worked by hand ---------------------------------------------------------
def test_a_tree_step_schedules_its_drafts_and_prices_its_passes() -> None:
    # TREE, every draft accepted (as deep as the tree goes: 2 a step), prompt 16, output 7.
    # Step 1 prefills 16 tokens (0.01 + 0.016 s): the first token; the drafter proposes the
    # tree's 4 nodes. Steps 2 and 3 schedule 1 + 4 = 5 tokens each (0.01 + 0.005 s) and emit
    # 2 + 1: outputs 1 -> 4 -> 7. Computed: 16 + 5 = 21, less the 2 rejected = 19; then 24.
    # Each step's draft: the first pass over one token, then the level-2 pass over the 2
    # level-1 drafts (2 decode rows), attending to the request's context after the step
    head = draft_pass_model("eagle", get_model("Llama-3.1-8B"), None, get_gpu("H100-80GB"), 1)
    assert head is not None
    gap = head.step_overhead_s

    def passes(context: float) -> float:
        return (float(head.step_time(0.0, 1.0, context, 0.0, 0.0)) - gap) + (
            float(head.step_time(0.0, 2.0, 2 * context, 0.0, 0.0)) - gap)

    scheduled: list[int] = []

    def observe(e: Engine) -> None:
        scheduled.append(int(e.num_tokens[0] - e.num_computed_tokens[0]))

    Engine.step_observer = observe
    try:
        res = _run(tree(1.0), [16], [7], skip=False)
    finally:
        Engine.step_observer = None
    assert scheduled == [16, 5, 5]
    r = res.records.iloc[0]
    assert r.output_tokens == 7
    draft = passes(21.0) + passes(24.0)
    assert r.e2e_s == pytest.approx(0.026 + 2 * 0.015 + draft)
    s = res.summary["engine"]["speculative"]
    assert (s["num_verify_steps"], s["num_draft_tokens"], s["num_accepted_tokens"]) == (2, 8, 4)
    assert s["draft_s"] == pytest.approx(draft)
    assert s["speculative_token_tree"] == TREE
    assert s["expected_acceptance_length"] == 3.0  # rate 1: the depth's 2 and the own token


def test_a_budget_cut_tree_accepts_no_deeper_than_the_drafts_it_reached() -> None:
    # budget 3 tokens a step: the prompt's 16 tokens take 6 steps (3 x 5 + 1); then each
    # verify step reaches 1 + 2 drafts, the tree's first two nodes, (0,) and (1,), both of
    # level 1: 1 accepted (a chain's 2 drafts would give 2): outputs 1 -> 3 -> 5 -> 7
    res = _run(tree(1.0), [16], [7], budget=3)
    s = res.summary["engine"]["speculative"]
    assert (s["num_verify_steps"], s["num_draft_tokens"], s["num_accepted_tokens"]) == (3, 6, 3)
    chain = _run(SpeculativeConfig("eagle", 4, acceptance_rate=1.0), [16], [7], budget=3)
    assert chain.summary["engine"]["speculative"]["num_accepted_tokens"] == 4  # 1 -> 4 -> 7


def test_tree_drafts_count_toward_the_token_budget() -> None:
    # budget 104: step 1 prefills both prompts (4 + 100); step 2 the first verifies 1 + 4
    # drafts (5 tokens), the second 1 + 4: 10 tokens; every draft accepted, as deep as 2
    w = make_workload([0.0, 0.0], [4, 100], [3, 3])
    seen: list[int] = []

    def observe(e: Engine) -> None:
        seen.append(int((e.num_tokens[:2] - e.num_computed_tokens[:2]).sum()))

    Engine.step_observer = observe
    try:
        rec = simulate(w, make_policy("unlimited"), _config(tree(1.0), skip=False,
                                                             budget=104)).records
    finally:
        Engine.step_observer = None
    assert seen == [104, 10]
    assert list(rec.output_tokens) == [3, 3]


# --- skip-ahead equals stepping; draws from the injected generator ------------------------
def _same(a: RunResult, b: RunResult) -> None:
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    assert a.summary["engine"] == b.summary["engine"]


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([TREE, "[(0,), (1,), (2,), (0, 0), (1, 0), (2, 0), (0, 0, 0), (1, 0, 0),"
                              " (2, 0, 0)]", "[(0,), (0, 0), (0, 1)]"]),
       st.floats(0.0, 1.0), st.sampled_from(["eagle", "eagle3", "mtp"]),
       st.lists(st.tuples(st.integers(1, 60), st.integers(1, 40)), min_size=1, max_size=8),
       st.integers(8, 40))
def test_tree_runs_complete_and_skip_ahead_equals_stepping(
        text: str, rate: float, method: str, reqs: list[tuple[int, int]], blocks: int) -> None:
    spec = tree(rate, text, method)
    s = both_ways(spec, reqs, blocks)
    depth = spec.shape.max_accepted
    assert s["num_accepted_tokens"] <= depth * s["num_verify_steps"]
    assert s["num_draft_tokens"] <= spec.num_speculative_tokens * s["num_verify_steps"]


def test_a_tree_accepts_what_a_chain_of_its_depth_accepts() -> None:
    # the same seed and rate: a tree of depth 2 draws the same uniforms as a chain of 2, so its
    # requests emit the same tokens at the same steps (only the step times differ)
    chain = _run(SpeculativeConfig("eagle", 2, acceptance_rate=0.6), [30, 40], [60, 45])
    two = _run(tree(0.6), [30, 40], [60, 45])
    a, b = chain.summary["engine"]["speculative"], two.summary["engine"]["speculative"]
    assert (a["num_verify_steps"], a["num_accepted_tokens"]) == (
        b["num_verify_steps"], b["num_accepted_tokens"])
    assert b["num_draft_tokens"] == 2 * a["num_draft_tokens"]  # 4 drafts a step, not 2


# --- the command line ---------------------------------------------------------------------
runner = CliRunner()
SCENARIO = """\
seed = 1
model = "Llama-3.1-8B"
[engine]
num_gpu_blocks = 2000
[engine.speculative_config]
method = "eagle3"
num_speculative_tokens = 4
speculative_token_tree = "[(0,), (1,), (0, 0), (1, 0)]"
acceptance_length = 2.5
[workload]
kind = "synthetic"
duration_s = 3
arrival = { kind = "poisson", rate_rps = 2.0 }
[[workload.tiers]]
name = "interactive"
share = 1.0
prompt = { kind = "fixed", tokens = 100 }
output = { kind = "fixed", tokens = 50 }
"""


@pytest.fixture
def scenario(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "tree.toml"
    path.write_text(SCENARIO)
    yield path


def test_a_tree_scenario_runs_and_says_so(scenario: Path) -> None:
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario)])
    assert res.exit_code == 0, res.stderr
    assert "eagle3, k=4, tree of 4 drafts, depth 2" in res.stdout


FIELD = "engine.speculative_config.speculative_token_tree"


@pytest.mark.parametrize(("expr", "field"), [
    (f'{FIELD}="[(0,), (1,)"', FIELD),  # not a Python literal
    (f'{FIELD}="[0, 1]"', FIELD),  # not tuples
    (f'{FIELD}="[(0,), (0, 0), (2, 0)]"', FIELD),  # (2, 0)'s parent is missing
    (f'{FIELD}="[(0,), (1,), (0, 0), (0, 0)]"', FIELD),  # a node twice
    (f'{FIELD}="[(0,), (1,), (0, 0), (1, 0), (0, 1)]"', FIELD),  # 3 children of 2 nodes
    ("engine.speculative_config.num_speculative_tokens=5", FIELD),  # 4 nodes, not 5
    ('engine.speculative_config.method="ngram"', FIELD),
    (f"{FIELD}=3", FIELD),
    ("engine.speculative_config.acceptance_length=3.5",
     "engine.speculative_config.acceptance_length"),  # beyond depth 2 + 1
])
def test_a_bad_tree_is_one_line_naming_the_field(scenario: Path, expr: str, field: str) -> None:
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario), "--set", expr])
    err = res.stderr.strip()
    assert res.exit_code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err
    # a bad value the --set gave names its field, not the file; a field of the file's that
    # the --set's value conflicts with names the file
    assert field in err and (str(scenario) in err) == (expr.partition("=")[0] != field), err


def test_the_docs_tree_example_is_what_the_shape_computes() -> None:
    # docs/speculative.md's TOML example and the sentence on its passes
    text = (REPO / "docs" / "speculative.md").read_text()
    flat = " ".join(text.split())
    example = re.search(r'speculative_token_tree = "(\[[^"]+\])"\nacceptance_length = ([\d.]+) '
                        r"+# mean tokens a step, 1\.\.depth\+1 \(here (\d+)\)", text)
    assert example, "the TOML example"
    nodes = parse_token_tree(example.group(1), "docs")
    shape = vllm_tree_shape(nodes)
    assert int(example.group(3)) == shape.max_accepted + 1
    assert float(example.group(2)) <= shape.max_accepted + 1
    levels = [sum(1 for n in nodes if len(n) == d) for d in range(1, shape.max_accepted + 1)]
    m = re.search(r"a tree with (\d+), (\d+) and (\d+) nodes on its levels runs passes of (\d+), "
                  r"(\d+) and (\d+) tokens a request", flat)
    assert m, "the passes sentence"
    assert [int(x) for x in m.groups()[:3]] == levels
    assert tuple(int(x) for x in m.groups()[3:]) == shape.pass_widths
