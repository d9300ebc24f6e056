"""The API server's cost as a client sees it (perf.cost_model.FrontendCost)."""

import numpy as np
import pytest

from kvbudget.perf.cost_model import FRONTENDS, FrontendCost


def test_where_each_term_lands() -> None:
    """per_request_s and the first token's own processing are in TTFT; every later token and
    post_decode_s only at the end of the stream."""
    cost = FrontendCost(per_request_s=0.01, per_prompt_token_s=1e-6, per_output_token_s=1e-4,
                        post_decode_s=1e-3)
    prompt = np.array([100, 100], dtype=np.int64)
    output = np.array([1, 11], dtype=np.int64)
    first = cost.first_token_delay_s(prompt)
    finish = cost.finish_delay_s(prompt, output)
    np.testing.assert_allclose(first, [0.01 + 1e-4 + 1e-4] * 2)
    np.testing.assert_allclose(finish - first, [1e-3, 10 * 1e-4 + 1e-3])


def test_zero_output_adds_no_later_tokens() -> None:
    cost = FrontendCost(per_output_token_s=1e-4)
    finish = cost.finish_delay_s(np.array([5], dtype=np.int64), np.array([0], dtype=np.int64))
    np.testing.assert_allclose(finish, [1e-4])


def test_post_decode_alone_is_a_cost_and_must_be_non_negative() -> None:
    assert not FrontendCost(post_decode_s=1e-3).is_zero
    assert FRONTENDS["none"].is_zero
    with pytest.raises(ValueError, match="post_decode_s"):
        FrontendCost(post_decode_s=-1.0)


def test_vllm_api_server_defaults_are_the_documented_ones() -> None:
    """docs/fidelity.md, "API server": 1.22 us a prompt token (tokenisation 1.1 us, sha256
    block hashes 0.12 us), 12 ms less 566 of them before the engine, 45.9 us an output token
    (BLIS alpha2), 0.78 ms at the end (BLIS alpha1)."""
    api = FRONTENDS["vllm-api-server"]
    assert api.per_prompt_token_s == pytest.approx(1.1e-6 + 6e-3 / 50_000)
    assert api.per_request_s == pytest.approx(12.0e-3 - 566 * 1.22e-6)
    assert (api.per_output_token_s, api.post_decode_s) == (45.9e-6, 0.78e-3)


def test_vllm_api_server_first_token_delay_by_hand() -> None:
    """At BLIS's 566-token training shape the front end still adds the 12 ms it was derived
    from (plus the first token's 45.9 us); a 64k-token prompt adds 65,536 x 1.22 us = 79.95 ms
    more: 11.31 + 79.95 + 0.05 = 91.31 ms."""
    api = FRONTENDS["vllm-api-server"]
    first = api.first_token_delay_s(np.array([566, 65_536], dtype=np.int64))
    np.testing.assert_allclose(first * 1e3, [12.0 + 0.0459, 91.3093], atol=1e-4)
