"""Requests beyond the model's context length, as the engine's front end treats them
(``workloads/context_limit.py``): refused, or served with the output cut at the context.

vLLM's default ``max_model_len`` is the model's context length (``max_position_embeddings``).
vLLM 0.32.0 answers 400 for a prompt as long as it or longer, and for a ``max_tokens`` over it;
prompt + ``max_tokens`` over it is served with ``max_tokens`` lowered to the context left (its
``get_max_tokens``; the live test checks it against the CPU vLLM). SGLang and TGI refuse
prompt + ``max_tokens`` over it."""

from __future__ import annotations

import dataclasses

import pytest

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


def test_prompt_plus_declared_max_tokens_beyond_the_context_is_served_cut_by_vllm() -> None:
    # before: refused (context_length) as vLLM before about 0.20 did; vLLM 0.32.0 lowers
    # max_tokens to max_model_len - prompt and serves it: the true output (100) fits, a longer
    # one (1,500) ends at the context left (1,096)
    w = make_workload([0.0, 1.0, 2.0], [3000, 3000, 3000], [100, 1500, 100],
                      max_output_tokens=[2000, 2000, 5000])
    rec = simulate(w, make_policy("unlimited"),
                   SimConfig(gpu="H200", model="Llama-2-7B", tiers=OPEN)).records
    rec = rec.sort_values("request_id")
    assert list(zip(rec["status"], rec["reason"], strict=True)) == [
        ("completed", ""), ("completed", ""), ("rejected_too_large", "context_length")]
    assert rec["output_tokens"].tolist() == [100, 1096, 0]  # a max_tokens over L: 400
    assert rec["max_output_tokens"].tolist() == [2000, 2000, 5000]  # what the client declared


@pytest.mark.parametrize("engine", ["sglang", "tgi"])
def test_engines_that_refuse_prompt_plus_max_tokens_beyond_the_context(engine: str) -> None:
    got = _statuses("Llama-2-7B", [3000, 3000, 5000], [100, 100, 10], [2000, 1096, 10],
                    EngineConfig(name=engine))
    assert got == [("rejected_too_large", "context_length"), ("completed", ""),
                   ("rejected_too_large", "prompt_too_long")]


def test_a_long_context_model_serves_what_a_short_one_refuses() -> None:
    got = _statuses("Llama-3.1-8B", [5000, 120_000], [10, 10], [2000, 2000])
    assert got == [("completed", ""), ("completed", "")]
    got = _statuses("Llama-3.1-8B", [131_072, 1000], [10, 10], [2000, 140_000])
    assert got == [("rejected_too_large", "prompt_too_long"),
                   ("rejected_too_large", "context_length")]


def test_a_run_says_what_the_default_context_refused_and_cut() -> None:
    # before: 2 of 3 requests refused with no word of the context that refused them (exit 0,
    # read as the gateway's or the KV cache's refusals)
    w = make_workload([0.0, 1.0, 2.0], [5000, 3000, 3000], [10, 100, 1500],
                      max_output_tokens=[10, 2000, 2000])
    summary = simulate(w, make_policy("unlimited"),
                       SimConfig(gpu="H200", model="Llama-2-7B", tiers=OPEN)).summary
    assert summary["assumed"] == [
        "max_model_len 4,096 (the model's context, vLLM's default) refused 1 request before "
        "any prefill: 1 prompt as long as it or longer, 0 whose max_output_tokens is over it "
        "(--set engine.max_model_len=N gives your server's)",
        "max_model_len 4,096 (the model's context, vLLM's default) cut the output of 1 "
        "request at the context left: their prompt + output is over it, and vLLM lowers "
        "max_tokens to max_model_len - prompt (served, not refused) (--set "
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
