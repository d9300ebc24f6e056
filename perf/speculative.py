"""Speculative decoding's knobs under vLLM's ``speculative_config`` names, the acceptance
arithmetic, and what a draft costs a step (SimPy-free: the engine's part is
:mod:`kvbudget.simulator.spec_decode`).

A decoding request verifies ``k`` draft tokens a step (``num_speculative_tokens``, clipped to
the model's length). Its drafts are accepted left to right, each with probability ``rate``
given the previous ones were, so the accepted count ``A`` is a truncated geometric variable:
``P(A >= j) = rate**j`` (Leviathan et al. 2023, "Fast Inference from Transformers via
Speculative Decoding", ICML, section 3.1 and eq. 1; Chen et al. 2023, "Accelerating Large
Language Model Decoding with Speculative Sampling", arXiv:2302.01318). A step then emits
``A + 1`` tokens (the accepted drafts and the target's own token), whose mean is the *mean
acceptance length* ``(1 - rate**(k+1)) / (1 - rate)`` (Leviathan et al.'s eq. 1), the figure
vLLM reports (``vllm/v1/spec_decode/metrics.py``: "Mean acceptance length") and that
``synthetic_acceptance_length`` targets (``vllm/config/speculative.py``, 0.32.0).

The acceptance is given one way or the other, said which: ``acceptance_rate`` (per token,
``0..1``) or ``acceptance_length`` (mean tokens a step, ``1..k+1``), resolved to the rate that
gives it under the geometric model (:func:`rate_for_length`).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, replace
from itertools import pairwise

from kvbudget.perf.hardware import GPUSpec
from kvbudget.perf.models import ModelSpec
from kvbudget.perf.step_time import VllmStepModel

__all__ = ["SPEC_METHODS", "DraftShape", "SpeculativeConfig", "chain_shape",
           "check_draft_vocab_size", "draft_pass_model",
           "expected_accepted_tokens", "mean_acceptance_length", "parse_token_tree",
           "rate_for_length", "sglang_tree_shape", "vllm_tree_shape"]

SPEC_METHODS: dict[str, str] = {
    "ngram": "a prompt-lookup proposer on the host CPU (no GPU pass: assumed to overlap the "
             "GPU step, as vLLM's NgramProposer runs between steps in numba)",
    "draft_model": "k forward passes of the draft model (its model config) a step",
    "eagle": "k forward passes of a one-layer head on the target's hidden states (EAGLE)",
    "eagle3": "k forward passes of a one-layer head on the target's hidden states (EAGLE-3)",
    "mtp": "k forward passes of the model's multi-token-prediction module (one layer)",
}
"""The methods modelled (vLLM's ``SpeculativeMethod`` names, ``vllm/config/speculative.py:73``
of 0.32.0) and what each costs a step."""
MAX_SPECULATIVE_TOKENS = 64
"""Beyond any published chain (vLLM's docs use 3-5) and as many drafts as the largest published
tree verifies (SGLang PR #4716's ``--speculative-num-draft-tokens 64``, the root included)."""
TREE_METHODS = ("eagle", "eagle3", "mtp")
"""The methods vLLM drafts a ``speculative_token_tree`` for: those of its ``EagleProposer``
(``SpeculativeConfig.use_eagle``, ``vllm/config/speculative.py:561-562`` of 0.11.0), whose
``propose_tree`` drafts the tree (``vllm/v1/spec_decode/eagle.py:539-701``)."""


class DraftShape:
    """What one step of speculative decoding schedules and runs for each decoding request:
    ``num_verify_tokens`` query tokens in the verify step (the drafts and the request's own
    last token, the tree's root), at most ``max_accepted`` drafts accepted (the depth of the
    tree: one path of it is accepted), and the draft's forward passes, ``pass_widths``
    tokens a request each (the first over the request's newest token). Immutable by
    convention, compared by value. (A plain class, not a dataclass: its creation would cost
    every ``kvbudget simulate`` process's import ~0.5 M instructions, ``bench_instructions``
    (a).)"""

    __slots__ = ("max_accepted", "num_verify_tokens", "pass_widths")

    def __init__(self, num_verify_tokens: int, max_accepted: int,
                 pass_widths: tuple[int, ...]) -> None:
        self.num_verify_tokens = num_verify_tokens
        self.max_accepted = max_accepted
        self.pass_widths = pass_widths

    def _key(self) -> tuple[int, int, tuple[int, ...]]:
        return self.num_verify_tokens, self.max_accepted, self.pass_widths

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DraftShape) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"DraftShape(num_verify_tokens={self.num_verify_tokens}, max_accepted="
                f"{self.max_accepted}, pass_widths={self.pass_widths})")

    @property
    def is_chain(self) -> bool:
        """One draft a pass, verified as one path (vLLM's default)."""
        return self.num_verify_tokens == self.max_accepted + 1 and all(
            w == 1 for w in self.pass_widths)


def chain_shape(k: int) -> DraftShape:
    """A chain of ``k`` drafts: ``k + 1`` tokens verified, ``k`` passes of one token a request
    (vLLM's ``EagleProposer.propose`` without a tree)."""
    return DraftShape(k + 1, k, (1,) * k)


def parse_token_tree(text: str, where: str) -> tuple[tuple[int, ...], ...]:
    """vLLM's ``speculative_token_tree`` (``vllm/config/speculative.py:104`` of 0.11.0): a
    Python literal list of node paths, ``(i,)`` the ``i``-th child of the root and ``(i, j)``
    the ``j``-th child of ``(i,)``, parsed as vLLM parses it (``ast.literal_eval``) and sorted
    breadth-first as its config sorts it (``speculative.py:402-407``). Refused, naming
    ``where``: not such a list, a repeated node, a node whose parent is not in the tree, or a
    level whose drafts are not a whole number of children of each node above it (vLLM's
    ``EagleProposer`` draws the same top-k for every node of a level: ``eagle.py:137-146``)."""
    try:
        nodes = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ValueError(f"{where}: not a list of node tuples such as "
                         f"\"[(0,), (1,), (0, 0)]\", got {text!r}") from None
    if (not isinstance(nodes, (list, tuple)) or not nodes
            or not all(isinstance(n, tuple) and n and all(
                type(i) is int and i >= 0 for i in n) for n in nodes)):
        raise ValueError(f"{where}: not a non-empty list of tuples of child indices (ints >= 0) "
                         f"such as \"[(0,), (1,), (0, 0)]\", got {text!r}")
    tree = tuple(sorted(nodes, key=lambda t: (len(t), t)))
    if len(set(tree)) != len(tree):
        raise ValueError(f"{where}: a node is given twice in {text!r}")
    known = set(tree)
    for node in tree:
        if len(node) > 1 and node[:-1] not in known:
            raise ValueError(f"{where}: node {node} has no parent {node[:-1]} in the tree")
    per_level = [sum(1 for n in tree if len(n) == d) for d in range(1, len(tree[-1]) + 1)]
    for depth, (above, level) in enumerate(pairwise(per_level), 2):
        if level % above:
            raise ValueError(f"{where}: level {depth} has {level} nodes, not a multiple of "
                             f"level {depth - 1}'s {above}: vLLM gives each node of a level "
                             "the same number of children")
    return tree


def vllm_tree_shape(tree: tuple[tuple[int, ...], ...]) -> DraftShape:
    """The step of a parsed ``speculative_token_tree`` (:func:`parse_token_tree`) in vLLM
    0.11.0: every node is a draft (``num_speculative_tokens`` of them, so ``len(tree) + 1``
    tokens verified: ``scheduler.py:162``); at most the tree's depth is accepted; the drafter's
    first pass is the chain's, then ``EagleProposer.propose_tree`` runs one pass a level but
    the last over every draft drafted so far (``query_len = total_num_drafts``,
    ``eagle.py:582-615``): the tokens of the levels above, cumulated."""
    depth = len(tree[-1])
    widths = [1]
    drafted = 0
    for level in range(1, depth):
        drafted += sum(1 for n in tree if len(n) == level)
        widths.append(drafted)
    return DraftShape(len(tree) + 1, depth, tuple(widths))


def sglang_tree_shape(num_steps: int, topk: int, num_draft_tokens: int) -> DraftShape:
    """SGLang's EAGLE step (``python/sglang/srt/speculative/eagle_worker.py`` of 0.4.4.post1)
    under its names ``speculative_num_steps``, ``speculative_eagle_topk`` and
    ``speculative_num_draft_tokens``: the draft's extend over the accepted tokens (the first
    pass, ``forward_draft_extend_after_decode``, :458-479), then ``num_steps - 1`` passes of
    ``topk`` tokens a request (``draft_forward``, :302-331: the last step's forward is not run;
    ``select_top_k_tokens``, ``eagle_utils.py:690-735``), and the verify step over
    ``num_draft_tokens`` tokens a request: the root and the ``num_draft_tokens - 1`` best drafts
    (``build_eagle_tree.py:23-28``; ``prepare_for_verify``, ``eagle_utils.py:265-277``); at
    most ``num_steps`` accepted, and no more than the drafts verified."""
    return DraftShape(num_draft_tokens, min(num_steps, num_draft_tokens - 1),
                      (1,) + (topk,) * (num_steps - 1))


@dataclass(frozen=True, slots=True)
class SpeculativeConfig:
    """vLLM's ``--speculative-config`` (``vllm/config/speculative.py:387``, 0.32.0), the knobs
    that change a step: ``method``, ``num_speculative_tokens`` and, for ``draft_model``, the
    draft's ``model`` (a bundled preset or a ``config.json``); the acceptance, one of
    ``acceptance_rate`` (per draft token) and ``acceptance_length`` (mean tokens a step), and
    ``acceptance_by_tier``: (tier, value) pairs of the same kind for the tiers whose acceptance
    differs. ``seed`` (the run's) and ``rate_by_priority`` (each tier's rate by its priority,
    the engine's view of a request's tier) are filled in by :meth:`resolved`."""

    method: str
    num_speculative_tokens: int
    model: str | None = None
    acceptance_rate: float | None = None
    acceptance_length: float | None = None
    acceptance_by_tier: tuple[tuple[str, float], ...] = ()
    speculative_token_tree: str | None = None
    draft_vocab_size: int | None = None
    seed: int = 0
    rate_by_priority: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        where = "engine.speculative_config"
        if self.method not in SPEC_METHODS:
            raise ValueError(f"{where}.method: unknown method {self.method!r}; modelled: "
                             f"{', '.join(SPEC_METHODS)}")
        k = self.num_speculative_tokens
        if not (isinstance(k, int) and 1 <= k <= MAX_SPECULATIVE_TOKENS):
            raise ValueError(f"{where}.num_speculative_tokens: must be in [1, "
                             f"{MAX_SPECULATIVE_TOKENS}], got {k!r}")
        if self.speculative_token_tree is not None:
            self._check_tree(where)
        if (self.acceptance_rate is None) == (self.acceptance_length is None):
            raise ValueError(f"{where}: give exactly one of acceptance_rate (per draft token, "
                             "0..1) and acceptance_length (mean tokens a step, 1..k+1)")
        rate, length = self.acceptance_rate, self.acceptance_length
        if rate is not None and not 0.0 <= rate <= 1.0:
            raise ValueError(f"{where}.acceptance_rate: must be in [0, 1], got {rate!r}")
        depth = self.shape.max_accepted
        if length is not None and not 1.0 <= length <= depth + 1:
            bound = ("num_speculative_tokens" if self.speculative_token_tree is None else
                     "the tree's depth")
            raise ValueError(f"{where}.acceptance_length: must be in [1, "
                             f"{bound} + 1 = {depth + 1}], got {length!r}")
        for tier, value in self.acceptance_by_tier:
            self._check_value(f"{where}.acceptance_by_tier.{tier}", value)
        dv = self.draft_vocab_size
        if dv is not None and (self.method != "eagle3" or type(dv) is not int or dv < 1):
            raise ValueError(f"{where}.draft_vocab_size: an EAGLE-3 head's LM-head rows (its "
                             "config.json's draft_vocab_size), an int >= 1 with method "
                             f"'eagle3' only, got {dv!r} with method {self.method!r}")
        if (self.method == "draft_model") != (self.model is not None):
            raise ValueError(f"{where}.model: a draft model config is given with method "
                             f"'draft_model' and only then, got method {self.method!r} and "
                             f"model {self.model!r}")

    def _check_tree(self, where: str) -> None:
        """``speculative_token_tree`` as vLLM 0.11.0 takes it (:func:`parse_token_tree`): one
        draft a node, so as many nodes as ``num_speculative_tokens``, and an EAGLE-type
        method."""
        text = self.speculative_token_tree
        assert text is not None
        name = f"{where}.speculative_token_tree"
        if not isinstance(text, str):
            raise ValueError(f"{name}: a string such as \"[(0,), (1,), (0, 0)]\", got {text!r}")
        tree = parse_token_tree(text, name)
        if len(tree) != self.num_speculative_tokens:
            raise ValueError(f"{name}: {len(tree)} nodes, but num_speculative_tokens is "
                             f"{self.num_speculative_tokens}: vLLM drafts one token a node")
        if self.method not in TREE_METHODS:
            raise ValueError(f"{name}: vLLM drafts trees with {', '.join(TREE_METHODS)} only, "
                             f"got method {self.method!r}")

    @property
    def shape(self) -> DraftShape:
        """The step's tokens and draft passes a request: a chain of ``num_speculative_tokens``,
        or the tree's (:func:`vllm_tree_shape`)."""
        if self.speculative_token_tree is None:
            return chain_shape(self.num_speculative_tokens)
        return vllm_tree_shape(parse_token_tree(self.speculative_token_tree,
                                                "engine.speculative_config.speculative_token_tree"))

    def _check_value(self, where: str, value: float) -> None:
        k = self.shape.max_accepted
        if self.acceptance_rate is not None and not 0.0 <= value <= 1.0:
            raise ValueError(f"{where}: an acceptance rate must be in [0, 1], got {value!r}")
        if self.acceptance_length is not None and not 1.0 <= value <= k + 1:
            raise ValueError(f"{where}: an acceptance length must be in [1, {k + 1}], got "
                             f"{value!r}")

    def _rate_of(self, value: float) -> float:
        """The per-token rate of a value of the kind given."""
        if self.acceptance_rate is not None:
            return value
        return rate_for_length(value, self.shape.max_accepted)

    @property
    def rate(self) -> float:
        """The per-token acceptance probability (given, or resolved from the length) of the
        tiers ``acceptance_by_tier`` does not name."""
        given = self.acceptance_rate if self.acceptance_rate is not None else self.acceptance_length
        assert given is not None
        return self._rate_of(given)

    def resolved(self, seed: int, priorities: dict[str, int]) -> SpeculativeConfig:
        """With the run's ``seed`` and each tier's rate by its priority (``priorities``: tier
        name -> priority); a tier named that the run does not configure, or two tiers of one
        priority with different acceptance, is refused."""
        where = "engine.speculative_config.acceptance_by_tier"
        given = dict(self.acceptance_by_tier)
        by_priority: dict[int, float] = {}
        for tier in given:
            if tier not in priorities:
                raise ValueError(f"{where}.{tier}: no such tier; tiers: {sorted(priorities)}")
        if given:
            for tier, priority in priorities.items():
                rate = self._rate_of(given[tier]) if tier in given else self.rate
                if by_priority.setdefault(priority, rate) != rate:
                    raise ValueError(f"{where}: tiers of priority {priority} have different "
                                     "acceptance; the engine tells requests' tiers by priority")
        return replace(self, seed=seed, rate_by_priority=tuple(sorted(by_priority.items())))

    def assumed(self) -> str:
        """What was given and what it means, in one line (the summary says it)."""
        k = self.shape.max_accepted
        given = (f"acceptance_rate {self.acceptance_rate:g} given" if self.acceptance_rate
                 is not None else f"acceptance_length {self.acceptance_length:g} given")
        tiers = "".join(f"; {tier} {value:g}: rate {self._rate_of(value):.4f}, length "
                        f"{mean_acceptance_length(self._rate_of(value), k):.3f}"
                        for tier, value in self.acceptance_by_tier)
        tree = ("" if self.speculative_token_tree is None else
                f", tree of {self.num_speculative_tokens} drafts, depth {k}")
        if self.draft_vocab_size is not None:
            tree += f", draft vocabulary {self.draft_vocab_size}"
        return (f"{self.method}, k={self.num_speculative_tokens}{tree}, {given}: per-token rate {self.rate:.4f}, mean "
                f"acceptance length {mean_acceptance_length(self.rate, k):.3f} (geometric)"
                + tiers)


def expected_accepted_tokens(rate: float, k: int) -> float:
    """``E[A] = rate + rate**2 + ... + rate**k``: accepted drafts a step."""
    return float(sum(rate**j for j in range(1, k + 1)))


def mean_acceptance_length(rate: float, k: int) -> float:
    """Tokens a step, ``1 + E[A] = (1 - rate**(k+1)) / (1 - rate)`` (Leviathan et al. eq. 1)."""
    return 1.0 + expected_accepted_tokens(rate, k)


def rate_for_length(length: float, k: int) -> float:
    """The per-token rate whose mean acceptance length with ``k`` drafts is ``length`` (the
    length grows with the rate: bisection to a 1e-12 bracket)."""
    if not 1.0 <= length <= k + 1:
        raise ValueError(f"acceptance length must be in [1, {k + 1}], got {length!r}")
    lo, hi = 0.0, 1.0
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        if mean_acceptance_length(mid, k) < length:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def check_draft_vocab_size(method: str, draft_vocab_size: int, target: ModelSpec) -> None:
    """``ValueError`` naming the field unless ``draft_vocab_size`` is an EAGLE-3 head's (method
    ``eagle3``) and within the ``target``'s vocabulary (vLLM maps each draft id to a target
    id: ``llama_eagle3.py:338-345``)."""
    vocab = target.vocab_size
    if method != "eagle3" or not 1 <= draft_vocab_size <= vocab:
        raise ValueError(
            "engine.speculative_config.draft_vocab_size: an EAGLE-3 head's LM-head rows, 1 to "
            f"the target {target.name}'s vocabulary of {vocab}, got {draft_vocab_size!r} with "
            f"method {method!r}")


def draft_pass_model(method: str, target: ModelSpec, draft: ModelSpec | None, gpu: GPUSpec,
                     tensor_parallel_size: int,
                     draft_vocab_size: int | None = None) -> VllmStepModel | None:
    """The step model of one draft forward pass on ``gpu``: the draft model's (``draft_model``;
    vLLM runs it with the target's tensor parallelism by default), or a one-layer copy of the
    target for a head (EAGLE: "a single transformer decoder layer" over the target's features,
    Li et al. 2024, arXiv:2401.15077, section 4; MTP: one transformer block sharing the
    embedding and output head, DeepSeek-V3 technical report, arXiv:2412.19437, section 2.2);
    None for ``ngram`` (host CPU).

    A head's pass reads its layer and an LM head. EAGLE's is the target's (vLLM 0.32.0 shares
    it: ``llm_base_proposer.py:1508-1556``, ``_maybe_share_lm_head``), ``vocab_size`` rows.
    EAGLE-3's is its own, ``draft_vocab_size`` rows (``Eagle3LlamaForCausalLM``'s
    ``ParallelLMHead(config.draft_vocab_size, ...)``, ``llama_eagle3.py:329-334``; the
    target's vocabulary when the head's config does not give one, ``:314-316``): given here,
    the copy's LM head has that many rows (its input embedding is the target's, looked up, not
    read whole). Refused: a ``draft_vocab_size`` with another method, or one beyond the
    target's vocabulary (vLLM maps each draft id to a target id: ``:338-345``)."""
    if method == "ngram":
        return None
    if method == "draft_model":
        assert draft is not None
        model = draft
    else:
        vocab = target.vocab_size
        if draft_vocab_size is not None:
            check_draft_vocab_size(method, draft_vocab_size, target)
            vocab = draft_vocab_size
        moe = target.moe
        model = replace(
            target, name=f"{target.name} {method} head", num_layers=1,
            moe=None if moe is None else replace(moe, num_moe_layers=min(1, moe.num_moe_layers)),
            num_sliding_layers=0, num_params_published=None, vocab_size=vocab)
    return VllmStepModel(gpu, model, tensor_parallel_size=tensor_parallel_size)


def accepted_from_uniform(u: float, rate: float, k: int) -> int:
    """The accepted drafts of ``k`` for a uniform draw ``u`` in ``(0, 1]``: ``P(A >= j) =
    rate**j`` by inversion (``A = min(k, floor(log u / log rate))``)."""
    if rate >= 1.0:
        return k
    if rate <= 0.0:
        return 0
    return min(k, math.floor(math.log(u) / math.log(rate)))
