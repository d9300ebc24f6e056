"""Which engine a recording is simulated with, and what its server's own pools mean for it:
the recorded server's engine where the file tells it (an SGLang ``bench_serving`` result's
``server_info``: :mod:`kvbudget.results.recorded_sglang_server`), else the one chosen, said
loudly where it is not the recording's (a helper of :mod:`kvbudget.cli.recorded`)."""

import json
from dataclasses import dataclass
from typing import Any

from kvbudget.perf.models import ModelSpec

SERVER_NAMES = {"sglang": "SGLang", "tgi": "TGI", "trtllm": "TensorRT-LLM", "vllm": "vLLM"}
"""The recording's ``server_engine`` (the kvbudget engine that models that server: SGLang's
from its ``server_info``, its ``--backend sglang`` or its model list; genai-bench's
``--server-engine``; any of these from the
words of the server's refusals for the model's context,
:func:`kvbudget.results.recorded_refusals.context_refusals`) and the server's own name, as
the settings line says it."""

SERVER_ONLY_KEYS: dict[str, tuple[str, ...]] = {
    "sglang": ("schedule_conservativeness", "max_queued_requests", "async_scheduling")}
"""The knobs a server's recording tells that only its own engine takes
(:class:`kvbudget.simulator.engine_config.EngineConfig` refuses ``max_queued_requests`` on
another engine; ``schedule_conservativeness`` scales SGLang's admission estimate only, and its
overlap scheduler is no other engine's ``async_scheduling``)."""

HYBRID_SWA_TYPES = ("gpt_oss", "llama4")
"""The model types whose KV SGLang splits into a full-attention pool and a sliding-window pool
(``python/sglang/srt/configs/model_config.py`` ``is_hybrid_swa_model``: GptOssForCausalLM,
Llama4ForConditionalGeneration among the architectures kvbudget has configs for); others with
sliding-window layers (Gemma 2 and 3) it sizes as full attention, as kvbudget does."""


@dataclass(frozen=True)
class EngineChoice:
    """The ``--set`` items of the engine (its name where the recording chose it, and the
    knobs only it takes) and the settings line's clause saying which engine and why."""

    items: list[str]
    said: str


def _chosen(given: dict[str, Any], overrides: list[str]) -> tuple[str | None, str]:
    """The engine the user chose and the flag that chose it (``--engine`` is applied after
    ``--set``, so it wins), or ``(None, '')``."""
    if isinstance(given.get("name"), str):
        return str(given["name"]), "--engine"
    for item in reversed(overrides):
        key, _, raw = item.partition("=")
        if key.strip() == "engine.name":
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = raw.strip()
            return str(value), "--set engine.name"
    return None, ""


def engine_choice(cfg: dict[str, Any], given: dict[str, Any],
                  overrides: list[str]) -> EngineChoice:
    """The engine a recording is simulated with: where the recording tells its server's
    (``server_engine``) and nothing chose one, that engine with the knobs only it takes
    (:data:`SERVER_ONLY_KEYS`, each unless ``--set`` gives it); where the user chose the
    same, its knobs; where the user chose another, nothing of it, and the clause says
    loudly that the simulated engine is NOT the recording's server (as ``--model`` does)."""
    server = cfg.get("server_engine")
    if not isinstance(server, str) or server not in SERVER_NAMES:
        return EngineChoice([], "")
    version = cfg.get("server_version")
    theirs = SERVER_NAMES[server] + (f" {version}" if isinstance(version, str) else "")
    chosen, flag = _chosen(given, overrides)
    knobs = [k for k in SERVER_ONLY_KEYS.get(server, ()) if k in cfg]
    if chosen is not None and chosen != server:
        left = [f"{k}={json.dumps(cfg[k])}" for k in knobs]
        return EngineChoice([], (
            f", engine {chosen} ({flag}; NOT the recording's server, {theirs}: the simulation "
            f"schedules by {chosen}'s rules, not the ones the recording measured"
            + (f", and leaves out its {', '.join(left)}" if left else "") + ")"))
    items = [f"engine.{k}={json.dumps(cfg[k])}" for k in knobs
             if not any(o.startswith(f"engine.{k}=") for o in overrides)]
    if chosen is None:
        return EngineChoice([f"engine.name={json.dumps(server)}", *items],
                            f", engine {server} (the recording's server, {theirs})")
    return EngineChoice(items, f", engine {server} ({flag}; the recording's server, {theirs})")


def engine_assumed_said(cfg: dict[str, Any], given: dict[str, Any], overrides: list[str],
                        engine: str) -> str:
    """The settings line's clause where the recording does not tell its server (a load tool's
    file names the client's API, ``backend`` ``openai``, not the server behind it: a published
    ``benchmark_serving.py`` result of github.com/moguizhizi/learning_project at 9239dfc6 ran
    against MindIE) and nothing chose an engine: ``engine`` (kvbudget's default, vLLM's
    scheduler) said as ASSUMED; '' where the recording or the user chose it."""
    server = cfg.get("server_engine")
    if (isinstance(server, str) and server in SERVER_NAMES) or \
            _chosen(given, overrides)[0] is not None:
        return ""
    return (f", engine {engine} (ASSUMED: the recording does not say which server answered; "
            "pass --engine sglang, tgi or trtllm if it was another)")


def sliding_window_said(cfg: dict[str, Any], model: ModelSpec, *, num_blocks: int,
                        block_size: int, prompt_tokens: Any) -> str:
    """A warning (or '') for an SGLang pool told in tokens (``kv_tokens_per_engine``) of a
    model SGLang gives two pools (:data:`HYBRID_SWA_TYPES`, its hybrid SWA memory on): its
    ``max_total_num_tokens`` is then the full-attention layers' pool, and the sliding-window
    layers hold ``swa_full_tokens_ratio`` (0.8 by default) times as many tokens
    (``python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py``,
    ``set_num_tokens_hybrid_swa``). kvbudget models every layer as full attention, each
    request holding all its tokens in one pool: the full-attention pool's figure is the
    right size for it, and the one that fills first, wherever a request's tokens are at
    least the window over that ratio (past the window a request holds only the window's in
    the sliding-window layers). The recorded prompts shorter than that are counted: for
    them the server's sliding-window pool filled first, which the simulation does not."""
    if "kv_tokens_per_engine" not in cfg or cfg.get("server_engine") != "sglang" or \
            model.model_type not in HYBRID_SWA_TYPES or not model.num_sliding_layers or \
            cfg.get("sglang_hybrid_swa_memory") is False or not model.sliding_window:
        return ""
    ratio = float(cfg.get("sglang_swa_full_tokens_ratio", 0.8))
    tokens = int(cfg["kv_tokens_per_engine"])
    if num_blocks != tokens // block_size:  # blocks given in its place: the user's choice
        return ""
    least = int(-(-model.sliding_window // ratio))
    short = int((prompt_tokens < least).sum())
    return (f"the SGLang server's KV pool of {tokens:,} tokens an engine "
            f"(max_total_num_tokens) is {model.name}'s {model.num_full_attention_layers} "
            f"full-attention layers'; its {model.num_sliding_layers} sliding-window layers "
            f"(window {model.sliding_window}) had a pool of their own, {ratio:g} times as "
            f"many tokens (swa_full_tokens_ratio; SGLang's hybrid SWA memory). Simulated as "
            f"{num_blocks:,} blocks of {block_size} holding every layer of a request's "
            "tokens: the full-attention pool, the one that fills first for a request of "
            f"{least} tokens or more; "
            + (f"{short} of the recorded prompts are shorter: with those the server's "
               "sliding-window pool could fill first, which is not simulated (the simulated "
               "engine admits more)" if short else "every recorded prompt is at least that"))


def dp_attention_refusal(cfg: dict[str, Any], given: dict[str, Any]) -> str | None:
    """Why a recording of SGLang's data-parallel attention (``--enable-dp-attention``) is not
    simulated as recorded, unless ``--num-gpu-blocks`` says the one engine to simulate in its
    place: its server was one engine of ``tp_size`` GPUs whose ``dp_size`` attention ranks each
    schedule their own requests over their own KV pool (``max_total_num_tokens`` is one
    rank's), stepping together (``python/sglang/srt/managers/data_parallel_controller.py``
    ``launch_dp_attention_schedulers``). kvbudget has no engine of several schedulers, and a
    fleet's replica is one engine: one rank's pool taken as the engine's would simulate a
    fraction of its KV, their sum a request larger than a rank holds. None where not."""
    ranks = cfg.get("sglang_dp_attention")
    if not isinstance(ranks, int) or given.get("num_gpu_blocks") is not None:
        return None
    tokens = cfg.get("sglang_kv_tokens_per_attention_rank")
    seqs = cfg.get("sglang_max_running_per_attention_rank")
    pools = (f" of {tokens:,} tokens each (server_info max_total_num_tokens; "
             f"{ranks * tokens:,} tokens in all, {ranks * tokens // 16:,} blocks of 16, a "
             f"request holding at most one rank's {tokens // 16:,})"
             if isinstance(tokens, int) else "")
    running = f", {seqs} requests running each" if isinstance(seqs, int) else ""
    flag = cfg.get("sglang_dp_attention_flag")
    flag = flag if isinstance(flag, str) else f"--dp-size {ranks} --enable-dp-attention"
    return (f"the SGLang server ran data-parallel attention ({flag}): one engine whose "
            f"{ranks} attention ranks each scheduled their own requests over their own KV "
            f"pool{pools}{running}, stepping together; "
            "kvbudget simulates no engine of several schedulers: pass --num-gpu-blocks N (and "
            "--max-num-seqs) for the one engine to simulate in its place, or with "
            f"--set fleet.num_replicas={ranks} each rank's, as replicas that do not step "
            "together")
