"""Published speculative-decoding speed-ups with their own acceptance figures, and the model's
prediction of each from those figures (nothing fitted): the check of issue 39 ("published
speed-ups reproduced within 15 %"), printed by ``benchmarks/bench_specdec.py`` and quoted in
docs/speculative.md.

The prediction (:func:`decode_speed_up`) is the engine's own pricing of a steady decode step of
``n`` requests (:mod:`kvbudget.simulator.spec_decode`): without speculation one token each,
priced by the ``vllm-v1`` step model; with it a verify step of ``n`` chunks of ``k + 1`` query
tokens plus ``k`` passes of the draft (:func:`~kvbudget.perf.speculative.draft_pass_model`),
emitting the mean acceptance length a request. A draft *tree* whose settings the publication
gives (SGLang's ``speculative_eagle_topk`` and ``speculative_num_draft_tokens``) is priced by its
shape instead (:func:`~kvbudget.perf.speculative.sglang_tree_shape`): a verify step of
``num_draft_tokens`` query tokens a request and passes ``topk`` tokens a request wide. The
speed-up is the ratio of tokens a second.

Where a prediction is off, :class:`Comparison` says by how much time a step: the step time the
published speed-up implies (the acceptance length's tokens at the model's own time a plain
token) less the time the model prices, in all and per draft pass. That is what the rows need,
shown and not fitted: no constant of the model is derived from it (docs/speculative.md, "What
the rows need").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.speculative import DraftShape, chain_shape, draft_pass_model, sglang_tree_shape
from kvbudget.perf.step_time import VllmStepModel

__all__ = [
    "EAGER_OP_S",
    "EAGLE3_LLAMA8B_DRAFT_VOCAB",
    "PUBLISHED",
    "SGLANG_DEFAULT_TREE",
    "TOLERANCE",
    "VLLM_0_9_2_DRAFTER",
    "Comparison",
    "DrafterHostWork",
    "PublishedSpeedUp",
    "StepGap",
    "compare",
    "cuda_graph_padded",
    "decode_speed_up",
    "decode_step_times",
    "draft_pass_time_window",
    "eagle3_over_eagle",
    "head_weights_left_out",
    "other_candidates",
    "unpublished_trees_at_defaults",
    "with_vllm_0_9_2_drafter",
]

TOLERANCE = 0.15
"""Issue 39's bar: a prediction within 15 % of the published speed-up."""


def decode_step_times(target: VllmStepModel, draft: VllmStepModel | None, n: int, k: int,
                      context: int, shape: DraftShape | None = None) -> tuple[float, float]:
    """The model's step times (seconds) of ``n`` decoding requests, each attending to
    ``context`` tokens: without speculation (one token each), and with it (a verify step of
    ``k + 1`` query tokens each plus ``k`` passes of ``draft``; None: no GPU pass, n-gram).
    With a ``shape`` (a tree's), its ``num_verify_tokens`` a request verified and its passes,
    a pass ``w`` tokens a request wide priced as ``w`` decode rows a request, as the engine
    prices a tree's (``SpecDecode._tree_seconds``)."""
    c = float(context)
    plain = float(target.step_time(0.0, float(n), n * (c + 1), 0.0, 0.0))
    shape = chain_shape(k) if shape is None else shape
    q = shape.num_verify_tokens
    verify = float(target.step_time(float(n * q), 0.0, n * (c + q), float(n * q) * (c + q),
                                    float(n)))
    if draft is not None and not shape.is_chain:
        passes = 0.0
        for w in shape.pass_widths:
            passes += float(draft.step_time(0.0, float(n * w), w * n * (c + q), 0.0,
                                            0.0)) - draft.step_overhead_s
        return plain, verify + passes
    one_pass = 0.0 if draft is None else (
        float(draft.step_time(0.0, float(n), n * (c + q), 0.0, 0.0)) - draft.step_overhead_s)
    return plain, verify + k * one_pass


def decode_speed_up(target: VllmStepModel, draft: VllmStepModel | None, n: int, k: int,
                    length: float, context: int, shape: DraftShape | None = None) -> float:
    """Tokens a second of ``n`` decoding requests with speculation (``k`` drafts a step, or a
    tree's ``shape``; mean acceptance ``length`` tokens a step) over without, each request
    attending to ``context`` tokens; ``draft`` None: no GPU pass (n-gram)."""
    plain, spec = decode_step_times(target, draft, n, k, context, shape)
    return (n * length / spec) / (n / plain)


@dataclass(frozen=True, slots=True)
class PublishedSpeedUp:
    """One published measurement: ``speed_up`` (with over without speculation) of ``method``
    with ``k`` drafts a step and the publication's own mean acceptance length ``length``
    (tokens a step), ``model`` on ``gpu`` at ``batch`` requests, ``context`` tokens a request
    (the workload's typical prompt and output, assumed: it moves the prediction little at
    small batches), the model sharded over ``tensor_parallel_size`` GPUs, from ``source``.
    ``tree``: the publication drafted trees; with SGLang's ``eagle_topk`` and
    ``num_draft_tokens`` (``--speculative-eagle-topk``, ``--speculative-num-draft-tokens``;
    ``k`` is its ``--speculative-num-steps``) where it gives them, priced as that tree, and as a
    chain of ``k`` where it does not. ``draft_vocab_size``: the EAGLE-3 head's LM-head rows where
    its checkpoint's config gives them (:func:`~kvbudget.perf.speculative.draft_pass_model`)."""

    source: str
    engine: str
    method: str
    model: str
    gpu: str
    batch: int
    k: int
    length: float
    speed_up: float
    tree: bool = False
    context: int = 300
    tensor_parallel_size: int = 1
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    draft_vocab_size: int | None = None

    @property
    def shape(self) -> DraftShape:
        """The step priced: the published tree's, else a chain of ``k``."""
        if self.eagle_topk is None or self.num_draft_tokens is None:
            return chain_shape(self.k)
        return sglang_tree_shape(self.k, self.eagle_topk, self.num_draft_tokens)

    @property
    def drafts(self) -> str:
        """What was drafted and how it is priced, in words (docs/speculative.md's table)."""
        if not self.tree:
            return "chain"
        if self.eagle_topk is None or self.num_draft_tokens is None:
            return "tree, settings not given: priced as a chain"
        return f"tree: top-{self.eagle_topk}, {self.num_draft_tokens} verified"


# vLLM issue #20780 (ekagra-ranjan, 2025-07-10, "Eagle 3 is expected to be much faster than
# Eagle 1"): vLLM V1, Llama-3.1-8B-Instruct, MT-bench, batch 1, chain drafts (EAGLE-LLaMA3.1-
# Instruct-8B and EAGLE3-LLaMA3.1-Instruct-8B); its table gives each K's acceptance length (AL)
# and TPOT (vanilla 7.07 ms). The same author's runs of this setup in PR #16937 ("Output
# tokens/s on H100 BS1") and tracking issue #17812 are on one H100.
_VLLM_20780 = "vLLM issue #20780 (H100: PR #16937), MT-bench"
_TPOT_VANILLA_MS = 7.07
_E1 = {2: (2.10, 4.37), 3: (2.29, 4.29), 4: (2.39, 4.48), 5: (2.43, 4.71), 6: (2.45, 4.94),
       7: (2.47, 5.20)}
_E3 = {2: (2.36, 4.32), 3: (2.79, 4.09), 4: (3.08, 4.05), 5: (3.32, 4.13), 6: (3.46, 4.20),
       7: (3.54, 4.29)}
EAGLE3_LLAMA8B_DRAFT_VOCAB = 32_000
"""The LM-head rows of #20780's EAGLE-3 head (EAGLE3-LLaMA3.1-Instruct-8B): the EAGLE authors'
EAGLE-3 config for Llama-3.1-8B gives ``"draft_vocab_size": 32000`` beside ``"vocab_size":
128256`` (SafeAILab/EAGLE 9666a81, ``eagle/traineagle3/config.json``); vLLM's bench of that
head's logits uses the same (PR #43349: ``DRAFT_VOCAB_SIZE = 32000``, ``TARGET_VOCAB_SIZE =
128256``)."""
# SGLang PR #4247 ("[Feature] Support EAGLE 3", chromecast56's comment of 2025-03-10, CUDA
# graphs on): Llama-3.1-8B-Instruct, MT-bench, 80 questions, one request at a time; throughput
# and acceptance length by --speculative-num-steps (draft *trees*); the baseline is the SGLang
# documentation's table for the same setup ("Speculative Decoding", Performance Highlights:
# 158.34 tokens/s without speculation on 1x H100). The comment gives --speculative-num-steps
# only, not --speculative-eagle-topk nor --speculative-num-draft-tokens (SGLang 0.4.4.post1's
# defaults are 4 and 8, server_args.py:130-132, but the comment does not say they were left
# so): these rows are priced as chains of num_steps.
_SGLANG_4247 = "SGLang PR #4247 + SGLang docs baseline, MT-bench"
SGLANG_DEFAULT_TREE = (4, 8)
"""SGLang 0.4.4.post1's defaults of ``speculative_eagle_topk`` and
``speculative_num_draft_tokens`` (``python/sglang/srt/server_args.py:131-132``): what a run
that sets ``--speculative-num-steps`` alone drafts (:func:`unpublished_trees_at_defaults`)."""
_SGLANG_BASE = 158.34
# SGLang PR #4716 ("Fix EAGLE3 for llama3.3 70b", ispobock's comment of 2025-03-24): Llama-3.3-
# 70B-Instruct on H100 with --tp 8, EAGLE3-LLaMA3.3-Instruct-70B drafting trees
# (--speculative-num-steps 8, --speculative-eagle-topk 8, --speculative-num-draft-tokens 64),
# --cuda-graph-max-bs 1, the 80 MT-bench questions one at a time: 88.61 tokens/s without
# speculation, 234.54 with it at acceptance length 5.88. Llama-3.3-70B has Llama-3.1-70B's
# architecture (the same config.json but for the weights), so the 3.1 preset prices it.
_SGLANG_4716 = "SGLang PR #4716, MT-bench"

PUBLISHED: tuple[PublishedSpeedUp, ...] = (
    *(PublishedSpeedUp(_VLLM_20780, "vllm", "eagle", "Llama-3.1-8B", "H100-80GB", 1, k, al,
                       _TPOT_VANILLA_MS / tpot) for k, (al, tpot) in _E1.items()),
    *(PublishedSpeedUp(_VLLM_20780, "vllm", "eagle3", "Llama-3.1-8B", "H100-80GB", 1, k, al,
                       _TPOT_VANILLA_MS / tpot, draft_vocab_size=EAGLE3_LLAMA8B_DRAFT_VOCAB)
      for k, (al, tpot) in _E3.items()),
    PublishedSpeedUp(_SGLANG_4247, "sglang", "eagle3", "Llama-3.1-8B", "H100-80GB", 1, 8, 5.39,
                     378.57 / _SGLANG_BASE, tree=True),
    PublishedSpeedUp(_SGLANG_4247, "sglang", "eagle3", "Llama-3.1-8B", "H100-80GB", 1, 5, 4.68,
                     361.70 / _SGLANG_BASE, tree=True),
    PublishedSpeedUp(_SGLANG_4247, "sglang", "eagle", "Llama-3.1-8B", "H100-80GB", 1, 8, 3.76,
                     230.08 / _SGLANG_BASE, tree=True),
    PublishedSpeedUp(_SGLANG_4716, "sglang", "eagle3", "Llama-3.1-70B", "H100-80GB", 1, 8, 5.88,
                     234.54 / 88.61, tree=True, tensor_parallel_size=8, eagle_topk=8,
                     num_draft_tokens=64),
)
"""Every publication found that gives a speed-up together with its own acceptance figures for
vLLM or SGLang on H100 (Llama-3.1-8B, and Llama-3.3-70B on 8 GPUs; none beyond batch 1)."""


@dataclass(frozen=True, slots=True)
class Comparison:
    """A publication's speed-up and the model's prediction from its acceptance figures, with
    the model's step times it comes from: ``plain_step_s`` (a step without speculation) and
    ``priced_step_s`` (the verify step and the draft passes)."""

    published: PublishedSpeedUp
    predicted: float
    plain_step_s: float
    priced_step_s: float

    @property
    def error(self) -> float:
        """The prediction's relative error (over the published figure: positive is over)."""
        return self.predicted / self.published.speed_up - 1.0

    @property
    def within(self) -> bool:
        return abs(self.error) <= TOLERANCE

    @property
    def implied_step_s(self) -> float:
        """The step time with speculation at which the model would predict the published
        speed-up: the acceptance length's tokens at the model's own time a plain token, over
        the published speed-up."""
        p = self.published
        return p.length * self.plain_step_s / p.speed_up

    @property
    def unpriced_step_s(self) -> float:
        """What the published speed-up needs a step beyond what the model prices (positive:
        the model prices too little)."""
        return self.implied_step_s - self.priced_step_s

    @property
    def unpriced_per_draft_pass_s(self) -> float:
        """:attr:`unpriced_step_s` spread over the step's ``k`` draft passes."""
        return self.unpriced_step_s / self.published.k


def draft_pass_time_window(rows: list[Comparison],
                           tolerance: float = TOLERANCE) -> tuple[float, float] | None:
    """The range of a time added to every draft pass (seconds) that would put each of ``rows``
    within ``tolerance`` of its published speed-up, or None if no one time does.

    A row's prediction with ``c`` more a pass is ``L * plain / (priced + k * c)``; it is within
    ``T`` of the published ``S`` when ``priced + k * c`` lies between ``L * plain / ((1 + T) S)``
    and ``L * plain / ((1 - T) S)``, which bounds ``c`` per row; the window is where the rows'
    bounds meet. Read off the rows being checked, it is what they need, never a constant of the
    model (that would be fitting them)."""
    lo, hi = -math.inf, math.inf
    for c in rows:
        p = c.published
        tokens_s = p.length * c.plain_step_s / p.speed_up
        lo = max(lo, (tokens_s / (1.0 + tolerance) - c.priced_step_s) / p.k)
        hi = min(hi, (tokens_s / (1.0 - tolerance) - c.priced_step_s) / p.k)
    return (lo, hi) if lo <= hi else None


def unpublished_trees_at_defaults() -> list[Comparison]:
    """The rows that drafted trees without giving their settings, priced as the trees SGLang's
    defaults draft (:data:`SGLANG_DEFAULT_TREE`): a what-if, not a check (the publication
    does not say the defaults were used)."""
    topk, tokens = SGLANG_DEFAULT_TREE
    return compare(tuple(replace(p, eagle_topk=topk, num_draft_tokens=tokens)
                         for p in PUBLISHED if p.tree and p.eagle_topk is None))


def compare(rows: tuple[PublishedSpeedUp, ...] = PUBLISHED) -> list[Comparison]:
    """The model's prediction of each published speed-up from its acceptance figures (the
    draft a one-layer head of the target for EAGLE, EAGLE-3 and MTP: ``draft_pass_model``)."""
    out = []
    for p in rows:
        gpu, model, tp = get_gpu(p.gpu), get_model(p.model), p.tensor_parallel_size
        target = VllmStepModel(gpu, model, tensor_parallel_size=tp)
        draft = draft_pass_model(p.method, model, None, gpu, tp, p.draft_vocab_size)
        plain, priced = decode_step_times(target, draft, p.batch, p.k, p.context, p.shape)
        out.append(Comparison(p, decode_speed_up(target, draft, p.batch, p.k, p.length,
                                                 p.context, p.shape), plain, priced))
    return out


@dataclass(frozen=True, slots=True)
class StepGap:
    """At one ``k``, how much longer a step with EAGLE-3 is than one with EAGLE in #20780's
    runs (the same setup, GPU, target, ``k`` and outputs: greedy decoding emits the target's
    tokens either way), and in the model. A published step is its TPOT times its acceptance
    length (the time a step over the tokens it emits); the model's is its priced step."""

    k: int
    published_s: float
    model_s: float

    @property
    def unexplained_s(self) -> float:
        """What EAGLE-3's step takes beyond EAGLE's in the runs and not in vLLM's source as the
        model prices it."""
        return self.published_s - self.model_s


def eagle3_over_eagle(rows: list[Comparison] | None = None) -> list[StepGap]:
    """#20780's EAGLE-3 step less its EAGLE step at each ``k``, as published and as priced
    (``rows``: :func:`compare`'s by default)."""
    rows = compare() if rows is None else rows
    vllm = {(c.published.method, c.published.k): c for c in rows
            if c.published.engine == "vllm" and not c.published.tree}
    out = []
    for (method, k), e3 in sorted(vllm.items()):
        e1 = vllm.get(("eagle", k))
        if method != "eagle3" or e1 is None:
            continue
        published = (e3.published.length / e3.published.speed_up
                     - e1.published.length / e1.published.speed_up) * _TPOT_VANILLA_MS * 1e-3
        out.append(StepGap(k, published, e3.priced_step_s - e1.priced_step_s))
    return out


EAGER_OP_S = 250e-6 / 12
"""The host's time to enqueue one small eager PyTorch op on the GPU in vLLM (20.8 us): vLLM PR
#57534 measures a chain of 12 such launches (``arange``, ``searchsorted``, ``clamp``,
``index_select``, ``remainder``, ``copy_``) at "~250 us of CPU enqueue time". The one vLLM
measurement of an eager small op's host cost found; a later release than #20780's, on its own
host. Of the same order: the torch-profiler table of vllm-omni PR #553 (CPU time a call of
``aten::argmax`` 29 us, ``aten::div_`` 21 us, ``aten::masked_fill_`` 25 us, the profiler's own
cost included). A Triton kernel's launch is counted at it too (Triton's Python launcher measured 49 us
after triton-lang/triton PR #3638: counted low)."""


@dataclass(frozen=True, slots=True)
class DrafterHostWork:
    """The eager GPU ops (each a host-side launch) of one vLLM release's EAGLE drafter that its
    CUDA graphs leave out, counted in its source: ``ops_per_step`` after the verify step's
    GPU-to-CPU sync (the model runner's inputs for the drafter and the proposer's set-up, its
    ``.item()`` syncs and the final ``.tolist()``), ``ops_per_pass`` around each pass's graphed
    layer (its LM head and argmax, and an EAGLE-3 head's draft-to-target scatter), and
    ``ops_between_passes`` before every pass after the first (positions, sequence lengths,
    slot mapping, the graphs' input buffers), each at ``op_s`` of host time."""

    release: str
    ops_per_step: int
    ops_per_pass: int
    ops_between_passes: int
    op_s: float = EAGER_OP_S

    def draft_s(self, k: int, pass_s: float, launch_s: float) -> float:
        """A step's draft phase of ``k`` chain passes, each ``pass_s`` of GPU work as the step
        model prices it (its layer's launches ``launch_s`` included). The per-step ops run
        after a sync, with the GPU idle: their host time adds. The passes have no sync between
        them, so the host enqueues one while the GPU runs the one before: each takes the
        longer of its host work (its ops and its layer's launches) and its GPU work."""
        first = max(self.ops_per_pass * self.op_s + launch_s, pass_s)
        later = max((self.ops_per_pass + self.ops_between_passes) * self.op_s + launch_s, pass_s)
        return self.ops_per_step * self.op_s + first + (k - 1) * later


# vLLM 0.9.2 (2025-07-08, the release two days before #20780, which names none), counted op by
# op: gpu_model_runner.py:1605-1686 (the next tokens' and rejected counts' uploads, prepare_inputs'
# two subtractions, zeros_like, cumsum and Triton kernel, the gathers of token ids, positions,
# hidden states (EAGLE-3: three and a cat) and slot mapping, the final tolist): 12 (EAGLE-3 15);
# eagle.py:98-201, 275 (last_token_indices, the input shift and its index_put, seq_lens' index,
# add and cast, the two max().item() syncs and a subtraction, two buffer copies, the sampled
# rows' gather, the positions' and hidden states' gathers, the final stack; EAGLE-3 its fc,
# :100-103): 17 (18); a pass: compute_logits' LM-head GEMM (LogitsProcessor at tp 1 adds no
# kernel) and argmax (:185-186, :267-271), EAGLE-3 adding llama_eagle3.py:209-215's arange, add,
# new_full and index_put: 2 (6); between passes, eagle.py:214-255: the cast, positions += 1,
# the compare and where, seq_lens += 1 and its masked_fill_, floor division, gather, the slot
# mapping's multiply, modulo and add and its masked_fill_, three buffer copies: 15.
VLLM_0_9_2_DRAFTER: dict[str, DrafterHostWork] = {
    "eagle": DrafterHostWork("vLLM 0.9.2", 12 + 17, 2, 15),
    "eagle3": DrafterHostWork("vLLM 0.9.2", 15 + 18, 6, 15),
}
"""The drafter host work of #20780's vLLM by method (vLLM 0.32.0, which the engine models, fuses
the between-pass ops into one Triton kernel, ``eagle_step_update_slot_mapping_and_metadata``,
vLLM PR #33503: the engine does not charge these counts)."""


def _head_bytes(p: PublishedSpeedUp) -> tuple[float, float]:
    """:func:`head_weights_left_out` of row ``p``'s head in bytes, ``(a pass, once a step)``."""
    m = get_model(p.model)
    per_pass, per_step = head_weights_left_out(p.method, m.hidden_size, m.num_attention_heads,
                                               m.num_kv_heads, m.head_dim)
    return float(per_pass * m.dtype_bytes), float(per_step * m.dtype_bytes)


def with_vllm_0_9_2_drafter(rows: tuple[PublishedSpeedUp, ...] = PUBLISHED) -> list[Comparison]:
    """The vLLM chain rows of ``rows`` priced as :func:`compare` prices them, but their draft
    phase as vLLM 0.9.2 ran it: each pass's GPU work with the head's weights the one-layer copy
    leaves out (:func:`head_weights_left_out`, read at the step model's streaming rate; EAGLE-3's
    ``fc`` once a step, before the proposer's first sync) beside the drafter's host work
    (:data:`VLLM_0_9_2_DRAFTER`). The same verify step, plain step and acceptance length."""
    out = []
    for p in rows:
        if p.engine != "vllm" or not p.shape.is_chain or p.method not in VLLM_0_9_2_DRAFTER:
            continue
        gpu, model = get_gpu(p.gpu), get_model(p.model)
        target = VllmStepModel(gpu, model, tensor_parallel_size=p.tensor_parallel_size)
        draft = draft_pass_model(p.method, model, None, gpu, p.tensor_parallel_size,
                                 p.draft_vocab_size)
        assert draft is not None
        plain, verify = decode_step_times(target, None, p.batch, p.k, p.context)
        n, q = float(p.batch), p.k + 1
        rate = gpu.hbm_bandwidth_bytes_s * draft.mem_efficiency
        per_pass, per_step = _head_bytes(p)
        pass_s = (float(draft.step_time(0.0, n, n * (p.context + q), 0.0, 0.0))
                  - draft.step_overhead_s + per_pass / rate)
        spec = (verify + per_step / rate
                + VLLM_0_9_2_DRAFTER[p.method].draft_s(p.k, pass_s, draft.layer_overhead_s))
        out.append(Comparison(p, p.length * plain / spec, plain, spec))
    return out


def head_weights_left_out(method: str, hidden_size: int, num_attention_heads: int,
                          num_kv_heads: int, head_dim: int) -> tuple[int, int]:
    """Weights (parameters) a vLLM EAGLE head reads beyond the one target layer and LM head the
    model prices, ``(a pass, once a step)``: EAGLE's ``fc`` over the token's embedding and the
    target's feature side by side, ``2 h x h`` a pass (``llama_eagle.py:71-73``, vLLM 0.9.2);
    EAGLE-3's first layer's q, k and v projections over ``2 h`` inputs, ``h x (heads + 2 kv
    heads) x head_dim`` more a pass (``llama_eagle3.py:40-48``), and its ``fc`` folding the
    target's three features, ``3 h x h`` once a step (``:107-114``, called at
    ``eagle.py:100-103``)."""
    h = hidden_size
    if method == "eagle":
        return 2 * h * h, 0
    if method == "eagle3":
        return h * (num_attention_heads + 2 * num_kv_heads) * head_dim, 3 * h * h
    raise ValueError(f"head_weights_left_out: an EAGLE head's method, 'eagle' or 'eagle3', got "
                     f"{method!r}")


def cuda_graph_padded(tokens: int) -> int:
    """The CUDA-graph size vLLM 0.9.2 pads a step of ``tokens`` to: its capture sizes are 1, 2,
    4 and the multiples of 8 (``vllm/config.py:4729-4730``)."""
    if tokens <= 2:
        return max(tokens, 1)
    if tokens <= 4:
        return 4
    return -(-tokens // 8) * 8


def other_candidates(p: PublishedSpeedUp) -> dict[str, float]:
    """What else a vLLM 0.9.2 chain step does that neither :func:`compare` nor
    :func:`with_vllm_0_9_2_drafter` prices, each sized by the step models (seconds a step at
    the row's batch; none is added to a prediction): the draft's first pass over every token
    the verify step accepted and the one it sampled (``eagle.py:163-179``: ``num_tokens``
    rows, the mean acceptance length a request; priced as one), the verify step's logits for
    all its ``k + 1`` rows (``logits_indices``; priced for one), and its tokens padded to the
    next CUDA-graph size (:func:`cuda_graph_padded`). The rejection sampler's ops are enqueued
    before the verify step's sync, while the GPU runs the target's forward: at batch 1 only
    their GPU time (microseconds) reaches the step, so it is not sized here."""
    gpu, model = get_gpu(p.gpu), get_model(p.model)
    tp, n, c, q = p.tensor_parallel_size, float(p.batch), float(p.context), p.k + 1
    target = VllmStepModel(gpu, model, tensor_parallel_size=tp)
    draft = draft_pass_model(p.method, model, None, gpu, tp, p.draft_vocab_size)
    assert draft is not None
    rows = n * p.length
    first = (float(draft.step_time(rows, 0.0, n * (c + q), rows * (c + q), n))
             - float(draft.step_time(0.0, n, n * (c + q), 0.0, 0.0)))
    tokens = n * q
    verify = float(target.step_time(tokens, 0.0, n * (c + q), tokens * (c + q), n))
    logits = float(target.step_time(tokens, 0.0, n * (c + q), tokens * (c + q), tokens)) - verify
    padded = float(cuda_graph_padded(p.batch * q))
    pad = float(target.step_time(padded, 0.0, n * (c + q), tokens * (c + q), n)) - verify
    return {"first pass over the accepted tokens": first,
            "verify logits for every row": logits,
            "verify tokens padded to a CUDA graph": pad}
