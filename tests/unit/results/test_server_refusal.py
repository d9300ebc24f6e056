"""``results.records.server_refusal``: a server's refusal as ``kvbudget serve`` and
``kvbudget replay`` record it. The messages are vLLM 0.32.0's, as the live CPU vLLM answered
them (``tests/live/test_live_vllm.py`` ``test_vllms_context_refusals_are_recognised`` sends
the requests again and checks the same reasons)."""

from __future__ import annotations

import pytest

from kvbudget.results.records import context_refusal_of, error_text, server_refusal

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


# Other engines' context refusals, each its source's f-string filled in verbatim (the source
# and its lines in results/records.py CONTEXT_REFUSALS), with the status the engine answers
# (None: an error event in a stream its server had answered 200) and the simulator's reason
OTHER_ENGINES = [
    # SGLang 0.5.23 tokenizer_manager.py:1349-1351, 400: the prompt alone
    ("sglang", 400, "The input (1025 tokens) is longer than the model's context length (1024 "
     "tokens).", "prompt_too_long"),
    # SGLang 0.5.23 tokenizer_manager.py:1371-1377, 400: prompt + max_new_tokens
    ("sglang", 400, "Requested token count exceeds the model's maximum context length of 1024 "
     "tokens. You requested a total of 1100 tokens: 1000 tokens from the input messages and "
     "100 tokens for the completion. Please reduce the number of tokens in the input messages "
     "or the completion to fit within the limit.", "context_length"),
    # TGI v3.3.7 validation.rs:999 behind infer/mod.rs:414, 422 (unstreamed) or an event
    ("tgi", 422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 1024. "
     "Given: 1000 `inputs` tokens and 100 `max_new_tokens`", "context_length"),
    ("tgi", None, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 1024. "
     "Given: 1000 `inputs` tokens and 100 `max_new_tokens`", "context_length"),
    # the same check refuses a prompt alone over max_total_tokens (it runs first): its figures
    ("tgi", 422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 1024. "
     "Given: 1030 `inputs` tokens and 5 `max_new_tokens`", "prompt_too_long"),
    # exactly the limit is not over it (the simulator's rule for an engine that refuses)
    ("tgi", 422, "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 1024. "
     "Given: 1024 `inputs` tokens and 1 `max_new_tokens`", "context_length"),
    # TGI v3.3.7 validation.rs:1001, a prompt over --max-input-tokens
    ("tgi", 422, "Input validation error: `inputs` must have less than 1023 tokens. Given: 1030",
     "prompt_too_long"),
    # TensorRT-LLM 4c05a748 llm.py _check_arguments, TensorRT backend, 400
    ("trtllm", 400, "The sum of prompt length (4000.0) and query length (0) max_tokens (2048) "
     "should not exceed max_seq_len (4096)", "context_length"),
    ("trtllm", 400, "The sum of prompt length (5000.0) and query length (0) max_tokens (16) "
     "should not exceed max_seq_len (4096)", "prompt_too_long"),
    # LMDeploy v0.16.0 async_engine.py:563-564, 400
    ("lmdeploy", 400, "Input length (1025) must be smaller than the model context length "
     "(1024).", "prompt_too_long"),
    # Ollama llm/llama_server.go:298, 400; server/routes.go:939
    ("ollama", 400, "the prompt is longer than the context length currently available to the "
     "model; shorten the prompt, adjust the context length in settings, or use a model with a "
     "longer context length", "prompt_too_long"),
    ("ollama", 400, "the input length exceeds the context length", "prompt_too_long"),
    # llama.cpp fb402660 server-context.cpp update_slots, 400, and its earlier server.cpp's
    ("llama.cpp", 400, "the request exceeds the available context size, try increasing it",
     "prompt_too_long"),
    ("llama.cpp", 400, "the request exceeds the available context size. try increasing the "
     "context size or enable context shift", "prompt_too_long"),
    ("llama.cpp", 400, "request (1030 tokens) exceeds the available context size (1024 tokens), "
     "try increasing it", "prompt_too_long"),
    ("llama.cpp", 400, "input is larger than the max context size. skipping", "prompt_too_long"),
]


@pytest.mark.parametrize(("engine", "status", "message", "reason"), OTHER_ENGINES)
def test_other_engines_context_refusals_join_the_simulators_reasons(
        engine: str, status: int | None, message: str, reason: str) -> None:
    # SGLang's, TGI's, TensorRT-LLM's, LMDeploy's, Ollama's and llama.cpp's were server_400
    # (TGI's 422 server_422, rejected_overloaded; its stream event a backend error): a context
    # refusal counted as a generic server error
    assert server_refusal(status, message) == ("rejected_too_large", reason)
    found = context_refusal_of(message)
    assert found is not None and found[0].engine == engine and found[1] == reason


def test_an_engines_words_decide_nothing_beside_a_failure() -> None:
    # a context message with a 5xx, 408 or 429 is no refusal of the request as sent
    message = OTHER_ENGINES[0][2]
    assert server_refusal(500, message) is None
    assert server_refusal(429, message) is None
    # an error event without context words is no refusal (a failure, or a queue cap)
    assert server_refusal(None, "Model is overloaded") is None
    # TensorRT-LLM's PyTorch backend: a prompt over the step's token budget, not the context
    assert server_refusal(400, "The sum of prompt length (9000.0), query length (0) should not "
                               "exceed max_num_tokens (8192)") == ("rejected_too_large",
                                                                   "server_400")
    # SGLang's scheduler: over min(context, KV pool) - 6, which it does not name
    assert server_refusal(400, "Input length (4090 tokens) exceeds the maximum allowed length "
                               "(4089 tokens). Use a shorter input or enable "
                               "--allow-auto-truncate.") == ("rejected_too_large", "server_400")


@pytest.mark.parametrize(("payload", "text"), [
    ({"error": {"message": "m", "type": "t"}}, "m"),  # OpenAI, vLLM
    ({"object": "error", "message": "m", "type": "BadRequest", "param": None, "code": 400},
     "m"),  # SGLang, TensorRT-LLM
    ({"error": "m", "error_type": "validation"}, "m"),  # TGI
    ({"error": {"message": "m", "http_status_code": 422}}, "m"),  # TGI's stream event
    ({"choices": []}, ""), ([1], ""), ("x", ""),
])
def test_every_engines_error_shape_is_read(payload: object, text: str) -> None:
    assert error_text(payload) == text
