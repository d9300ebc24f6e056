"""Prompts beyond the model's context length are refused as vLLM refuses them, not served.

vLLM's default ``max_model_len`` is the model's context length (``max_position_embeddings``);
its front end answers 400 when the prompt plus the request's ``max_tokens`` exceeds it ("'max_tokens'
... is too large: ... This model's maximum context length is ..."), so neither the prompt alone
nor prompt + declared output may pass it."""

from __future__ import annotations

import dataclasses

from kvbudget.perf.models import get_model
from kvbudget.policies import TierConfig, make_policy
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from tests.conftest import make_workload

OPEN = (TierConfig("interactive", max_sequence_tokens=1 << 40, queue_timeout_s=None),)
"""A gateway tier that refuses nothing: what is refused here is refused by the server."""


def _statuses(model: str, prompts: list[int], outputs: list[int], declared: list[int],
              engine: EngineConfig | None = None) -> list[tuple[str, str]]:
    w = make_workload([float(i) for i in range(len(prompts))], prompts, outputs,
                      max_output_tokens=declared)
    cfg = SimConfig(gpu="H200", model=model, tiers=OPEN)
    if engine is not None:
        cfg = dataclasses.replace(cfg, engine=engine)
    rec = simulate(w, make_policy("unlimited"), cfg).records.sort_values("request_id")
    return list(zip(rec["status"], rec["reason"], strict=True))


def test_the_default_max_model_len_is_the_models_context_length() -> None:
    assert SimConfig(gpu="H200", model="Llama-2-7B").engine_for().max_model_len == 4096
    assert get_model("Llama-3.1-8B").max_position_embeddings == 131_072
    assert SimConfig(gpu="H200", model="Llama-3.1-8B").engine_for().max_model_len == 131_072
    given = SimConfig(gpu="H200", model="Llama-2-7B", engine=EngineConfig(max_model_len=2048))
    assert given.engine_for().max_model_len == 2048


def test_a_prompt_beyond_the_context_is_refused_not_served() -> None:
    # Llama-2-7B: 4,096 tokens. A prompt of 5,000 is refused; one of 3,000 + 100 is served.
    got = _statuses("Llama-2-7B", [5000, 3000], [10, 100], [10, 100])
    assert got == [("rejected_too_large", "prompt_too_long"), ("completed", "")]


def test_prompt_plus_declared_max_tokens_beyond_the_context_is_refused() -> None:
    # the true output (100) would fit; the declared max_tokens (2,000) does not: vLLM's 400
    got = _statuses("Llama-2-7B", [3000, 3000], [100, 100], [2000, 1096])
    assert got == [("rejected_too_large", "context_length"), ("completed", "")]


def test_a_long_context_model_serves_what_a_short_one_refuses() -> None:
    got = _statuses("Llama-3.1-8B", [5000, 120_000], [10, 10], [2000, 2000])
    assert got == [("completed", ""), ("completed", "")]
    got = _statuses("Llama-3.1-8B", [130_000], [10], [2000])
    assert got == [("rejected_too_large", "context_length")]


def test_a_run_says_what_the_default_context_refused() -> None:
    # before: 2 of 3 requests refused with no word of the context that refused them (exit 0,
    # read as the gateway's or the KV cache's refusals)
    w = make_workload([0.0, 1.0, 2.0], [5000, 3000, 3000], [10, 100, 100],
                      max_output_tokens=[10, 2000, 1096])
    summary = simulate(w, make_policy("unlimited"),
                       SimConfig(gpu="H200", model="Llama-2-7B", tiers=OPEN)).summary
    assert summary["assumed"] == [
        "max_model_len 4,096 (the model's context, vLLM's default) refused 2 requests before "
        "any prefill: 1 prompts longer, 1 whose prompt + max_output_tokens is over it (--set "
        "engine.max_model_len=N gives your server's)"]
    given = SimConfig(gpu="H200", model="Llama-2-7B", tiers=OPEN,
                      engine=EngineConfig(max_model_len=4096))
    assert "assumed" not in simulate(w, make_policy("unlimited"), given).summary


def test_a_given_max_model_len_beyond_the_context_is_said() -> None:
    # before: Llama-2-7B (4,096) served 6,000-token prompts at max_model_len 8,192, unsaid;
    # vLLM refuses to start so (vllm/config/model.py _get_and_verify_max_len)
    w = make_workload([0.0], [6000], [10], max_output_tokens=[10])
    cfg = SimConfig(gpu="H200", model="Llama-2-7B", tiers=OPEN,
                    engine=EngineConfig(max_model_len=8192))
    summary = simulate(w, make_policy("unlimited"), cfg).summary
    assert summary["assumed"] == [
        "max_model_len 8,192 (given) is over the model's context (max_position_embeddings "
        "4,096): vLLM refuses to start with it unless the config's rope scaling extends the "
        "context (or with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1); requests up to it were served"]
