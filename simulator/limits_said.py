"""What a run says of the request limits nobody set: the default tiers' ``max_sequence_tokens``
and vLLM's default ``max_model_len`` (the model's context), where they refused requests, a
given ``max_model_len`` over the model's context, a given ``num_gpu_blocks`` over the GPU's
memory, and an engine preset's prefix caching off where the workload has prefix hashes
(the summary's ``assumed``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from kvbudget.perf.hardware import GIB, MIB
from kvbudget.perf.kv_capacity import weights_per_gpu
from kvbudget.policies.tiers import DEFAULT_TIERS
from kvbudget.results.records import STATUS_CODES
from kvbudget.results.said import CONTEXT_DEFAULT, CONTEXT_DEFAULT_REFUSED, context_cut
from kvbudget.workloads.context_limit import CUTTING_ENGINES
from kvbudget.workloads.counted import counted

if TYPE_CHECKING:
    from kvbudget.simulator.sim_config import ReplicaSetup, SimConfig
    from kvbudget.workloads import Workload

__all__ = ["limits_said"]

StatusArray = npt.NDArray[np.integer[Any]]


def limits_said(w: Workload, config: SimConfig, setup: ReplicaSetup, status: StatusArray,
                reason: Mapping[int, str], beyond_context: Mapping[int, str] | None = None,
                num_cut: int = 0) -> dict[str, Any]:
    """``{"assumed": [line, ...]}`` for the limits nobody set that refused requests of ``w``
    (``status``: each row's status code; ``reason``: the refusals' reasons by row;
    ``beyond_context``: the rows the model's context refuses, whoever refused them first, with
    its reasons, :func:`~kvbudget.workloads.context_limit.context_refusals`) or cut their
    output (``num_cut``: :func:`~kvbudget.workloads.context_limit.cut_to_context`), and
    ``gateway_too_large`` (:func:`_too_large_said`), or ``{}``."""
    beyond_context = beyond_context or {}
    first = _gateway_first(status, reason, beyond_context)
    tiers = _default_tiers_said(w, config, setup, status, reason, beyond_context)
    return _joined(tiers, _context_said(config, setup, reason, num_cut, first),
                   _blocks_said(config, setup), _prefix_said(w, config, setup),
                   _too_large_said(tiers, first))


def _gateway_first(status: StatusArray, reason: Mapping[int, str],
                   beyond_context: Mapping[int, str]) -> Counter[str]:
    """The requests beyond the model's context that the gateway refused as too large first
    (no reason: a tier's ``max_sequence_tokens`` or the KV capacity), by the reason the
    context's refusal would have had (``prompt_too_long``, ``context_length``): both the
    assumed lines and the table's refused line count them as the context's refusals."""
    if not beyond_context:
        return Counter()
    rows = np.flatnonzero(status == STATUS_CODES["rejected_too_large"]).tolist()
    return Counter(beyond_context[i] for i in rows if i not in reason and i in beyond_context)


def _too_large_said(tiers: dict[str, Any], first: Counter[str]) -> dict[str, Any]:
    """``{"gateway_too_large": {...}}``: of the gateway's too-large refusals (no reason), how
    many the assumed lines count (``default_tiers``: the default tiers' limit; the context's
    reasons: requests beyond the model's context), so that the refused line
    (``cli/tables.py``) does not count them again as the gateway's; ``{}`` when none."""
    counts = {"default_tiers": int(tiers.get("num_refused", 0)), **first}
    return {"gateway_too_large": counts} if any(counts.values()) else {}


def _blocks_said(config: SimConfig, setup: ReplicaSetup) -> dict[str, Any]:
    """``{"assumed": [line]}`` when a given ``num_gpu_blocks`` holds more KV than the GPU's
    memory beside the model's weights (per GPU: the blocks' bytes, ``kv_bytes_per_token`` x
    ``block_size``, plus the weights, over ``memory_bytes``): a cache no server of that GPU
    has, simulated as asked (a what-if is allowed) and said with the memory it implies."""
    blocks = config.engine.num_gpu_blocks
    if blocks is None or setup.num_gpu_blocks is None:
        return {}
    engine, gpu, model = setup.engine, setup.gpu, setup.model
    tp = engine.tensor_parallel_size
    ep = tp if engine.enable_expert_parallel else 1
    block_bytes = model.kv_bytes_per_token(tp, engine.kv_cache_dtype) * engine.block_size
    kv, weights = blocks * block_bytes, weights_per_gpu(model, tp, ep)
    if kv + weights <= gpu.memory_bytes:
        return {}
    room = max(gpu.memory_bytes - weights, 0.0)
    on = f"{tp} x {gpu.name}" if tp > 1 else gpu.name
    return {"assumed": [
        f"num_gpu_blocks {blocks:,} (given) hold {kv / GIB:,.1f} GiB of KV per GPU "
        f"({block_bytes / MIB:.3g} MiB a block of {engine.block_size} tokens), beside "
        f"{weights / GIB:.1f} GiB of weights: {(kv + weights) / GIB:,.1f} GiB, over the "
        f"{gpu.memory_bytes / GIB:.1f} GiB of {on}'s memory (at most {int(room // block_bytes):,} "
        "blocks fit beside the weights, fewer after vLLM's other reservations): no server of "
        "that GPU holds this cache; simulated as given"]}


def _prefix_said(w: Workload, config: SimConfig, setup: ReplicaSetup) -> dict[str, Any]:
    """``{"assumed": [line]}`` when the workload has prefix hashes (a Mooncake trace's) and the
    engine's preset, nobody having set it, models prefix caching off (sglang, tgi, trtllm):
    the hashes shared no KV, which a run on that engine left unsaid (SGLang's radix cache is
    on by default in SGLang itself)."""
    hashes = w.prefix_hashes
    if (hashes is None or len(hashes) == 0 or config.engine.enable_prefix_caching is not None
            or setup.engine.enable_prefix_caching):
        return {}
    name = setup.engine.name
    how = ("it is not modelled with swap preemption" if name == "vllm-swap" else
           "--set engine.enable_prefix_caching=true models it on")
    return {"assumed": [
        f"prefix caching off ({config.engine_defaults}'s default for engine {name}): the "
        f"workload's {len(hashes):,} prefix "
        f"block hashes ({w.prefix_block_tokens} tokens each) shared no KV ({how})"]}


def _default_tiers_said(w: Workload, config: SimConfig, setup: ReplicaSetup,
                        status: StatusArray, reason: Mapping[int, str],
                        beyond_context: Collection[int]) -> dict[str, Any]:
    """``{"assumed": [line]}`` when tiers whose ``max_sequence_tokens`` is the default
    tiers' (none given, or only another tier's limit set) refused requests that the
    model's context would take: a limit nobody set must not pass unsaid for the traffic's
    own size (a request beyond the context too is refused whatever the tiers say: not
    counted)."""
    tiers = {t.name: (i, t) for i, t in enumerate(config.tiers)}
    default = {t.name: t.max_sequence_tokens for t in DEFAULT_TIERS}
    kept = {n: i for n, (i, t) in tiers.items() if default.get(n) == t.max_sequence_tokens}
    if not kept:
        return {}
    size = w.prompt_tokens + w.max_output_tokens
    context = setup.engine.max_model_len
    over = (size > np.array([default[n] if n in kept else np.iinfo(np.int64).max
                             for n in w.tier_names], dtype=np.int64)[w.tier])
    over[list(beyond_context)] = False  # what the context refuses anyway: not the tiers' doing
    refused = np.flatnonzero(over & (status == STATUS_CODES["rejected_too_large"]))
    # the gateway's refusals (no reason) by the tier's limit, not by the capacity
    rows = [i for i in refused.tolist() if i not in reason]
    if not rows:
        return {}
    names = sorted({w.tier_names[int(w.tier[i])] for i in rows}, key=kept.__getitem__)
    limits = "/".join(sorted({f"{default[n]:,}" for n in names}))
    whose = (f"the default tiers' max_sequence_tokens ({limits})"
             if config.tiers is DEFAULT_TIERS else
             f"the default max_sequence_tokens ({limits}) of tier"
             f"{'s' if len(names) > 1 else ''} {', '.join(names)}")
    return {"num_refused": len(rows), "assumed": [
        f"{whose} refused {counted(len(rows), 'request')} "
        "as too large (prompt + max_output_tokens above it) before any prefill"
        + (f"; the model's context is {context:,} tokens" if context else "")
        + ": give the tiers' limits ("
        + " ".join(f"--set tiers.{kept[n]}.max_sequence_tokens=N" for n in names)
        + ", or [[tiers]] in a scenario)"]}


def _context_said(config: SimConfig, setup: ReplicaSetup, reason: Mapping[int, str],
                  num_cut: int, first: Counter[str]) -> dict[str, Any]:
    """``{"assumed": [line]}`` when the model's context, taken as vLLM's default (no
    ``max_model_len`` given), refused requests (HTTP 400) or cut their output
    (:mod:`~kvbudget.workloads.context_limit`): a
    limit nobody set must not pass unsaid as capacity refusals. A given one beyond the
    model's context is said too: vLLM refuses to start with it (vllm/config/model.py
    ``_get_and_verify_max_len``) unless rope scaling extends the context or
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``."""
    given, context = config.engine.max_model_len, setup.model.max_position_embeddings
    if given is not None:
        return {} if given <= context else {"assumed": [
            f"max_model_len {given:,} (given) is over the model's context "
            f"(max_position_embeddings {context:,}): vLLM refuses to start with it unless "
            "the config's rope scaling extends the context (or with "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1); requests up to it were served"]}
    counts = Counter(r for r in reason.values()
                     if r in ("prompt_too_long", "context_length")) + first
    limit = f"max_model_len {setup.engine.max_model_len:,}"
    server = "(--set engine.max_model_len=N gives your server's)"
    said = []
    if counts:
        cuts = setup.engine.name in CUTTING_ENGINES
        said.append(
            f"{limit} {CONTEXT_DEFAULT_REFUSED} {counted(counts.total(), 'request')} before "
            f"any prefill: {counted(counts['prompt_too_long'], 'prompt')} "
            + ("as long as it or longer" if cuts else "longer")
            + f", {counts['context_length']:,} whose "
            + ("max_output_tokens" if cuts else "prompt + max_output_tokens")
            + f" is over it {server}")
    if num_cut:
        said.append(f"{context_cut(f'{limit} {CONTEXT_DEFAULT}', num_cut)} {server}")
    return {"assumed": said} if said else {}


def _joined(*said: dict[str, Any]) -> dict[str, Any]:
    """The ``{"assumed": [...]}`` entries of ``said`` as one (absent when all are empty), and
    ``gateway_too_large`` where one has it."""
    lines = [line for d in said for line in d.get("assumed", ())]
    rest = {k: v for d in said for k, v in d.items() if k == "gateway_too_large"}
    return {**rest, **({"assumed": lines} if lines else {})}
