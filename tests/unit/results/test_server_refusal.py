"""``results.records.server_refusal``: a server's refusal as ``kvbudget serve`` and
``kvbudget replay`` record it. The messages are vLLM 0.32.0's, as the live CPU vLLM answered
them (``tests/live/test_live_vllm.py`` ``test_vllms_context_refusals_are_recognised`` sends
the requests again and checks the same reasons)."""

from __future__ import annotations

import pytest

from kvbudget.results.records import server_refusal

VLLM_0_32 = [
    # prompt of 1,025 token ids, max_model_len 1,024
    ("This model's maximum context length is 1024 tokens. However, your prompt contains at "
     "least 1025 input tokens, which exceeds this limit even without any output tokens. Please "
     "reduce the length of the input prompt. (parameter=input_tokens, value=1025)",
     "prompt_too_long"),
    # prompt of exactly 1,024 ids: max_tokens lowered to 0
    ("max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)", "prompt_too_long"),
    # a text prompt of 30,000 characters
    ("This model's maximum context length is 1024 tokens. However, your prompt contains 30000 "
     "characters (more than 12288 characters, which is the upper bound for 1024 input "
     "tokens). Please reduce the length of the input prompt. (parameter=input_text, "
     "value=30000)", "prompt_too_long"),
    # max_tokens 1,025 on a short prompt (completions; chat says max_completion_tokens)
    ("max_tokens=1025 cannot be greater than max_model_len=1024. Please request fewer output "
     "tokens. (parameter=max_tokens, value=1025)", "context_length"),
    ("max_completion_tokens=1025 cannot be greater than max_model_len=1024. Please request "
     "fewer output tokens. (parameter=max_completion_tokens, value=1025)", "context_length"),
]


VLLM_0_32_SOURCE = [
    # messages of vLLM 0.32.0's source the CPU vLLM did not answer to these requests (another
    # check refused them first): api_utils.get_max_tokens, input_processor._validate_model_input
    ("Input length (1030) exceeds model's maximum context length (1024).", "prompt_too_long"),
    ("The decoder prompt (length 1030) is longer than the maximum model length of 1024. Make "
     "sure that `max_model_len` is no smaller than the number of text tokens.",
     "prompt_too_long"),
    ("The decoder prompt (length 1024) plus the number of requested output tokens (at least "
     "1) is longer than the maximum model length of 1024.", "prompt_too_long"),
]


@pytest.mark.parametrize(("message", "reason"), VLLM_0_32 + VLLM_0_32_SOURCE)
def test_vllms_context_refusals_join_the_simulators_reasons(message: str, reason: str) -> None:
    # the max_tokens, text-prompt and prompt-of-exactly-the-context refusals were server_400:
    # recorded as a generic server error, not the simulator's context refusal
    assert server_refusal(400, message) == ("rejected_too_large", reason)


def test_other_refusals_keep_their_status() -> None:
    # vLLM refuses a min_tokens above the max_tokens it lowered to the context left: no
    # simulated rule is that (the simulator serves it cut), and a truncation size over the
    # context is not a context refusal of the request's lengths
    assert server_refusal(400, "min_tokens must be less than or equal to max_tokens=24, got "
                               "30.") == ("rejected_too_large", "server_400")
    assert server_refusal(400, "truncate_prompt_tokens=2000 cannot be greater than "
                               "max_model_len = 1024. Please request a smaller truncation "
                               "size.") == ("rejected_too_large", "server_400")
    assert server_refusal(404, "The model `x` does not exist.") == (
        "rejected_overloaded", "server_404")
    assert server_refusal(503, "anything") is None
