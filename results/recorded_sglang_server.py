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

from kvbudget.results.recorded_summaries import is_sglang

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


def _attention_ranks(info: Mapping[str, Any], dp: int | None) -> int | None:
    """The attention data-parallel ranks inside one engine, or None: ``dp_size`` with
    ``enable_dp_attention`` (SGLang 0.5.9, ``python/sglang/srt/server_args.py``), or
    ``attn_dp_size`` (SGLang 0.5.23, ``sglang/srt/arg_groups/fields/parallel.py``: "the number
    of data-parallel attention groups inside the TP group, one scheduler each"), which the old
    spelling now resolves to, ``dp_size`` then 1 (``arg_groups/parallel_hook.py``,
    ``_handle_deprecated_dp_attention``: "that width moves to ``attn_dp_size``, and ``dp_size``
    counts replicas again"); its ``server_info`` keeps ``enable_dp_attention`` true beside it
    (``ServerArgs.resolved_dict``) and SGLang refuses both widths above 1 together
    (``parallel_hook.py``: "not supported")."""
    ranks = _count(info.get("attn_dp_size"))
    if ranks is not None and ranks >= 2:
        return ranks
    if info.get("enable_dp_attention") is True and dp is not None and dp >= 2:
        return dp
    return None


def _parallel(info: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """``tp_size`` GPUs an engine; ``dp_size`` engines behind SGLang's controller (unless
    data-parallel attention splits one engine of ``tp_size`` GPUs: :func:`_attention_ranks`)."""
    tp = _count(info.get("tp_size"))
    if tp is not None:
        out["tensor_parallel_size"] = tp
    dp = _count(info.get("dp_size"))
    ranks = _attention_ranks(info, dp)
    if ranks is not None:
        # one engine of tp_size GPUs whose attention ranks each schedule their own requests
        # over their own KV pool, stepping together (data_parallel_controller.py
        # launch_dp_attention_schedulers): no engine kvbudget has (the command line refuses
        # its pool as one engine's)
        out["sglang_dp_attention"] = ranks
        if _count(info.get("attn_dp_size")) == ranks:
            out["sglang_dp_attention_flag"] = f"--attn-dp-size {ranks}"
        return
    if dp is None or dp < 2:
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
    seqs = _count(info.get("max_running_requests")) or _count(
        state.get("effective_max_running_requests_per_dp"))
    if "sglang_dp_attention" in out:  # each attention rank's, not the engine's
        if tokens is not None:
            out["sglang_kv_tokens_per_attention_rank"] = tokens
        if seqs is not None:
            out["sglang_max_running_per_attention_rank"] = seqs
        return
    if tokens is not None:
        out["kv_tokens_per_engine"] = tokens
        notes.append(f"the SGLang server's KV pool held {tokens:,} tokens an engine "
                     "(server_info max_total_num_tokens): simulated as the blocks that many "
                     "tokens fill (num_gpu_blocks on the settings line)")
    if seqs is not None:
        out["max_num_seqs"] = seqs


def _page(info: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """The tokens one of SGLang's KV pages holds (``page_size``, what vLLM calls
    ``block_size``): SGLang 0.5.9 ``python/sglang/srt/server_args.py`` leaves it None
    (``page_size: Optional[int] = None``) for ``_handle_page_size`` to set to 1, unless given or
    an attention backend raises it (FlashMLA 64, Cutlass MLA 128, TensorRT-LLM MHA 64...);
    ``server_info`` holds the value the server ran with."""
    page = _count(info.get("page_size"))
    if page is None:
        notes.append("the SGLang server_info keeps no page_size (the tokens a KV page holds: 1 "
                     "unless set or raised by its attention backend): simulated at the "
                     "simulated engine's block_size (16 unless given), so each request's KV "
                     "is rounded up to 16-token blocks where the server's may not have been")
        return
    out["block_size"] = page
    notes.append(f"the SGLang server's KV pages held {page} token{'s' if page > 1 else ''} "
                 f"(server_info page_size): simulated with block_size {page}")


def _prefill_budget(info: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """SGLang's prefill batch takes new tokens up to ``chunked_prefill_size`` (a longer prompt
    is cut into chunks of it; -1 turns chunking off) while fewer than ``max_prefill_tokens``
    are in it (``python/sglang/srt/managers/schedule_policy.py``, ``PrefillAdder``:
    ``rem_chunk_tokens`` and ``rem_input_tokens``): the smaller of the two is simulated as
    vLLM's ``max_num_batched_tokens``; without chunking, a prompt is prefilled whole (vLLM's
    budget without chunked prefill, at least the context)."""
    chunk = _count(info.get("chunked_prefill_size"))
    most = _count(info.get("max_prefill_tokens"))
    if info.get("chunked_prefill_size") == -1:
        out["enable_chunked_prefill"] = False
        notes.append("the SGLang server ran without chunked prefill (--chunked-prefill-size "
                     "-1): each prompt simulated prefilled in one step (vLLM's "
                     "--no-enable-chunked-prefill, its budget a step at least the context)")
        return
    if chunk is None and most is None:
        return
    budget = most if chunk is None else chunk if most is None else min(chunk, most)
    out["max_num_batched_tokens"] = budget
    told = (f"--chunked-prefill-size {chunk}" if chunk is not None else "") + (
        f"{' and ' if chunk is not None else ''}--max-prefill-tokens {most}"
        if most is not None and (chunk is None or most < chunk) else "")
    notes.append(f"SGLang's {told} (its prefill tokens a batch) simulated as "
                 f"max_num_batched_tokens {budget} (vLLM's budget a step, decodes included)")


SCHEDULE_POLICIES_AS_FCFS = ("fcfs", "lpm", "dfs-weight")
"""SGLang's ``--schedule-policy`` choices that order a waiting queue of prompts sharing no
cached prefix in arrival order (``python/sglang/srt/managers/schedule_policy.py``:
``lpm`` and ``dfs-weight`` sort by the length of each prompt's match in the radix cache, a
stable sort, and ``lpm`` turns to ``fcfs`` past 128 waiting requests); a recording's prompts
are simulated sharing none, so these are kvbudget's ``fcfs``. ``lof`` (longest output first)
and ``random`` are not modelled: said as assumed."""


def _scheduler(info: Mapping[str, Any], out: dict[str, Any], notes: list[str]) -> None:
    """SGLang's scheduler knobs under kvbudget's sglang engine's names (the same as SGLang's,
    ``python/sglang/srt/server_args.py``): ``schedule_conservativeness`` (its
    ``new_token_ratio``'s scale), ``max_queued_requests`` (its 503 past that many waiting),
    ``disable_overlap_schedule`` (the overlap scheduler off: ``async_scheduling`` false); its
    ``schedule_policy`` and priority scheduling said."""
    ratio = info.get("schedule_conservativeness")
    if isinstance(ratio, int | float) and not isinstance(ratio, bool) and ratio > 0:
        out["schedule_conservativeness"] = float(ratio)
    queued = _count(info.get("max_queued_requests"))
    if queued is not None:
        out["max_queued_requests"] = queued
    if isinstance(info.get("disable_overlap_schedule"), bool):
        out["async_scheduling"] = not info["disable_overlap_schedule"]
    policy = info.get("schedule_policy")
    if isinstance(policy, str) and policy not in SCHEDULE_POLICIES_AS_FCFS:
        notes.append(f"ASSUMED: first come, first served; the SGLang server ran "
                     f"--schedule-policy {policy}, which kvbudget does not model")
    elif isinstance(policy, str) and policy != "fcfs":
        notes.append(f"SGLang's --schedule-policy {policy} orders waiting prompts by their "
                     "cached prefix; the recording's prompts are simulated sharing none, "
                     "where that order is arrival order (fcfs)")
    if info.get("enable_priority_scheduling") is True:
        notes.append("the SGLang server ran --enable-priority-scheduling; the recording "
                     "keeps no request's priority: simulated first come, first served")


def _sliding(info: Mapping[str, Any], out: dict[str, Any]) -> None:
    """Whether SGLang split a sliding-window model's KV into two pools (its hybrid SWA memory,
    on unless ``disable_hybrid_swa_memory``): then ``max_total_num_tokens`` is the
    full-attention layers' pool and the sliding-window layers' holds
    ``swa_full_tokens_ratio`` times as many tokens
    (``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py``,
    ``set_num_tokens_hybrid_swa``); read by the command line, which knows the model."""
    if isinstance(info.get("disable_hybrid_swa_memory"), bool):
        out["sglang_hybrid_swa_memory"] = not info["disable_hybrid_swa_memory"]
    ratio = info.get("swa_full_tokens_ratio")
    if isinstance(ratio, int | float) and not isinstance(ratio, bool) and 0 < ratio <= 1:
        out["sglang_swa_full_tokens_ratio"] = float(ratio)


NATIVE_BACKENDS = ("sglang", "sglang-native")
"""``bench_serving --backend`` choices that post to SGLang's own ``/generate`` (python/sglang/
bench_serving.py ``ASYNC_REQUEST_FUNCS``: ``async_request_sglang_generate``), which only an
SGLang server answers; its other backends speak OpenAI's API, which any server does."""

SERVER_ENGINE = "sglang"
"""The recording's ``server_engine`` for an SGLang server: kvbudget's engine of that name."""


def sglang_server(doc: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The settings an SGLang result's ``server_info`` records, under the recording's config
    keys (``server_engine`` ``sglang``, ``tensor_parallel_size``, ``block_size``,
    ``num_replicas``/``data_parallel_size`` and the controller's ``data_parallel_balance``,
    ``kv_tokens_per_engine``, ``max_num_seqs``, ``max_num_batched_tokens``,
    ``enable_chunked_prefill``, ``max_model_len``, ``enable_prefix_caching``,
    ``kv_cache_dtype``, ``quantization``, ``server_version``, SGLang's own
    ``schedule_conservativeness``, ``max_queued_requests``, ``async_scheduling`` and its
    sliding-window pools), and the notes saying how they are simulated. A result without one
    whose client spoke SGLang's own API (:data:`NATIVE_BACKENDS`) says only the server;
    ``({}, [])`` for any other."""
    info = doc.get("server_info")
    if not isinstance(info, Mapping):
        if is_sglang(doc) and doc.get("backend") in NATIVE_BACKENDS:
            return {"server_engine": SERVER_ENGINE}, [
                f"the server was SGLang (bench_serving --backend {doc['backend']} posts to "
                "its own /generate); the file keeps no server_info, so its settings are not "
                "known"]
        return {}, []
    out: dict[str, Any] = {"server_engine": SERVER_ENGINE}
    notes: list[str] = []
    _parallel(info, out, notes)
    _page(info, out, notes)
    _kv(info, out, notes)
    _prefill_budget(info, out, notes)
    _scheduler(info, out, notes)
    _sliding(info, out)
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
    return out, notes




SERVER_INFO_KEYS = frozenset({"model_path", "tp_size", "mem_fraction_static"})
"""Fields of SGLang's ``ServerArgs`` that its server-info answer always holds (every version's
``python/sglang/srt/server_args.py``): the three together tell a saved answer from any
tool's result."""


def server_info_refusal(doc: Mapping[str, Any]) -> str | None:
    """Why SGLang's server-info answer saved on its own is no recording: ``GET /server_info``
    (``/get_server_info`` before SGLang 0.5.23 deprecated it, ``python/sglang/srt/entrypoints/
    http_server.py``) answers with the server's arguments, its scheduler's state, each
    data-parallel rank's ``internal_states`` and its ``version``, no request. A saved answer
    (github.com/mattbucci/2x-R9700-RDNA4-GFX1201-sglang-inference 28f8146 ``benchmarks/
    profiling/native-decode-laguna-eager/server_info.json``) was told it "holds aggregate
    figures (limit_mm_data_per_request, ...)", a server setting named as a run's statistic.
    bench_serving saves the same answer as its result's ``server_info``, which kvbudget reads
    (:func:`sglang_server`). None for any other document."""
    if not set(doc) >= SERVER_INFO_KEYS or "server_info" in doc:
        return None
    said = [f"model_path {doc['model_path']}", f"tp_size {doc['tp_size']}"]
    dp = _count(doc.get("dp_size"))
    if dp is not None and dp > 1:
        said.append(f"dp_size {dp}")
    tokens = _count(doc.get("max_total_num_tokens"))
    if tokens is not None:
        said.append(f"max_total_num_tokens {tokens}")
    version = doc.get("version")
    run = f"SGLang {version}" if isinstance(version, str) else "SGLang"
    return (
        f"is {run}'s server info (GET /server_info or /get_server_info: the server's "
        f"settings, {', '.join(said)}), not a recording: no request is in it; pass the "
        "bench_serving result (--output-file, one JSON line a run, with --output-details for "
        "each request), which saves this answer as its server_info and from which kvbudget "
        "reads these settings"
    )
