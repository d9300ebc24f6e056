"""The default run's figures for one request, worked by hand from the step model and the API
server's cost (docs/fidelity.md): what ``kvbudget simulate`` prints for a lone request is the
sum a reader can do, with nothing added or lost on the default path (the vllm-v1 step model,
the vllm-api-server front end, async scheduling, chunked prefill)."""

from __future__ import annotations

import numpy as np
import pytest

import kvbudget as kb


@pytest.mark.parametrize(("prompt", "output"), [(1000, 100), (3000, 2), (8192, 40)])
def test_a_lone_requests_ttft_and_e2e_are_the_step_models_sum(prompt: int, output: int) -> None:
    config = kb.SimConfig(seed=0)  # Llama-3.1-8B on one H100-80GB, vLLM's defaults
    engine, step, front = (config.engine_for(), config.resolved_cost_model(),
                           config.resolved_frontend())
    assert prompt <= engine.max_num_batched_tokens  # one prefill step
    # one prefill step: the prompt's tokens, one sequence sampled, c (p + c) attention pairs
    # (docs/fidelity.md: each chunk's causal triangle counted in full)
    prefill_s = step.step_time(float(prompt), 0.0, 0.0, float(prompt * prompt), 1.0)
    # then a decode step per later token, each attending to the context so far
    decode_s = sum(step.step_time(0.0, 1.0, float(prompt + k), 0.0, 0.0)
                   for k in range(1, output))
    tokens = np.array([prompt])
    ttft = prefill_s + float(front.first_token_delay_s(tokens)[0])
    e2e = prefill_s + decode_s + float(front.finish_delay_s(tokens, np.array([output]))[0])
    w = kb.from_columns([0.0], [prompt], [output])
    r = kb.simulate(w, kb.make_policy("unlimited", {}), config).records.iloc[0]
    # to a part in a million: the engine adds the same terms in another order
    assert r.ttft_s == pytest.approx(ttft, rel=1e-6)
    assert r.e2e_s == pytest.approx(e2e, rel=1e-6)
    assert r.tpot_s == pytest.approx((e2e - ttft) / (output - 1), rel=1e-6)
