"""What an SGLang ``bench_serving`` result says of the server it measured.

SGLang's client asks the server for its settings before the run and saves the answer whole
as the result's ``server_info`` (``python/sglang/bench_serving.py``: ``GET /get_server_info``,
the server's ``ServerArgs`` plus ``max_total_num_tokens``, ``version`` and each data-parallel
rank's ``internal_states``). A file that carries it says how many GPUs served the model, how
many engines shared the load and how big each one's KV pool was: those are read here, never
assumed. Seen in a published run (github.com/Scicom-AI-Enterprise-Organization/llm-benchmaq,
``benchmarks/sglang/runpod_h100sxm/Qwen3-8B/*.jsonl``, SGLang 0.5.9 with ``tp_size`` 4 and
``dp_size`` 2), which kvbudget had simulated as one engine on one GPU, saying "the recording
does not say how many GPUs served the model".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SGLANG_BALANCE = {"round_robin": "round_robin", "minimum_tokens": "least_tokens",
                  "total_tokens": "least_tokens"}
"""SGLang's ``--load-balance-method`` (how its data-parallel controller picks a rank,
``python/sglang/srt/managers/data_parallel_controller.py``) as the fleet router that does the
same: ranks in turn, or the rank holding the fewest tokens. Its request-counting methods
(``shortest_queue``, ``total_requests``) have no router of their own: the nearest, fewest
tokens, is simulated and said as assumed."""


def _count(value: Any) -> int | None:
    """A whole number of at least 1, else None (SGLang writes None for a setting left to it)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    return None


def _first_state(info: Mapping[str, Any]) -> Mapping[str, Any]:
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        return states[0]
    return {}


def _parallel(info: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """``tp_size`` GPUs an engine; ``dp_size`` engines behind SGLang's controller (unless
    ``enable_dp_attention``: then the ``dp_size`` is attention's split inside one engine of
    ``tp_size`` GPUs, ``python/sglang/srt/server_args.py``)."""
    tp = _count(info.get("tp_size"))
    if tp is not None:
        out["tensor_parallel_size"] = tp
    dp = _count(info.get("dp_size"))
    if dp is None or dp < 2:
        return
    if info.get("enable_dp_attention") is True:
        notes.append(f"the SGLang server ran data-parallel attention (--dp-size {dp} "
                     "--enable-dp-attention): one engine of its tp_size GPUs, simulated with "
                     "tensor-parallel attention")
        return
    out["num_replicas"] = out["data_parallel_size"] = dp
    method = info.get("load_balance_method")
    out["data_parallel_balance"] = method if isinstance(method, str) else "unknown"


def _kv(info: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """Each engine's KV pool in tokens (``max_total_num_tokens``, else the first rank's
    ``memory_usage.token_capacity``): the blocks are counted from it at the simulated block
    size (SGLang's pages hold ``page_size`` tokens, 1 by default)."""
    state = _first_state(info)
    usage = state.get("memory_usage")
    tokens = _count(info.get("max_total_num_tokens")) or (
        _count(usage.get("token_capacity")) if isinstance(usage, Mapping) else None)
    if tokens is not None:
        out["kv_tokens_per_engine"] = tokens
        notes.append(f"the SGLang server's KV pool held {tokens:,} tokens an engine "
                     "(server_info max_total_num_tokens): simulated as the blocks that many "
                     "tokens fill (num_gpu_blocks on the settings line)")
    seqs = _count(info.get("max_running_requests")) or _count(
        state.get("effective_max_running_requests_per_dp"))
    if seqs is not None:
        out["max_num_seqs"] = seqs
    chunk = _count(info.get("chunked_prefill_size"))
    if chunk is not None:
        out["max_num_batched_tokens"] = chunk
        notes.append(f"SGLang's --chunked-prefill-size {chunk} (its prefill tokens a batch) "
                     "simulated as max_num_batched_tokens (vLLM's budget a step, decodes "
                     "included)")


def sglang_server(doc: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The settings an SGLang result's ``server_info`` records, under the recording's config
    keys (``tensor_parallel_size``, ``num_replicas``/``data_parallel_size`` and the
    controller's ``data_parallel_balance``, ``kv_tokens_per_engine``, ``max_num_seqs``,
    ``max_num_batched_tokens``, ``max_model_len``, ``enable_prefix_caching``,
    ``kv_cache_dtype``, ``quantization``, ``server_version``), and the notes saying how they
    are simulated; ``({}, [])`` for a file without one."""
    info = doc.get("server_info")
    if not isinstance(info, Mapping):
        return {}, []
    out: dict[str, Any] = {}
    notes: list[str] = []
    _parallel(info, out, notes)
    _kv(info, out, notes)
    context = _count(info.get("context_length"))
    if context is not None:
        out["max_model_len"] = context
    if isinstance(info.get("disable_radix_cache"), bool):
        out["enable_prefix_caching"] = not info["disable_radix_cache"]
    dtype = info.get("kv_cache_dtype")
    if isinstance(dtype, str) and dtype != "auto":
        out["kv_cache_dtype"] = dtype
    if "quantization" in info:
        quant = info.get("quantization")
        out["quantization"] = quant if isinstance(quant, str) and quant else "none"
    version = info.get("version")
    if isinstance(version, str):
        out["server_version"] = version
    notes.append(f"the server was SGLang{' ' + version if isinstance(version, str) else ''}: "
                 "its settings above are simulated with vLLM's scheduling rules unless "
                 "--set engine.name=sglang (SGLang's admission by new_token_ratio and its "
                 "retraction)")
    return out, notes
