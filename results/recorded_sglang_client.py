"""What SGLang's ``bench_serving`` saves as each request's output length, and what it sent as
``ignore_eos``, by backend.

The result records neither ``ignore_eos`` nor ``--disable-ignore-eos``: SGLang 0.5.9
``sglang/bench_serving.py`` ``benchmark()`` writes its arguments as ``backend``,
``dataset_name``, ``request_rate``, ``max_concurrency``, ``sharegpt_output_len`` and the
``random_*`` lengths only; 0.5.23 ``sglang/benchmark/serving.py`` the same, and the refactored
client's ``sglang/benchmark/metrics.py`` ``save_results`` (sgl-project/sglang 1291c7fc, 6e48df33)
too. Each request function sends ``ignore_eos: not args.disable_ignore_eos``
(``--disable-ignore-eos``, ``store_true``: off unless given, so ``ignore_eos`` true, in 0.5.9,
0.5.23 and the copies of older clients kept in other repositories); the completions and chat
functions only where ``--extra-request-body`` has no ``ignore_eos`` of its own; ``trt`` sends
``min_length`` equal to ``max_tokens`` instead, dropped under the flag.

``output_lens`` (``calculate_metrics``: each request's ``output_len``, 0 for a failed one):

* ``sglang``, ``sglang-native`` (``async_request_sglang_generate``): the last chunk's
  ``meta_info.completion_tokens``, the server's count of the tokens it generated;
* ``vllm``, ``sglang-oai``, ``lmdeploy`` (``async_request_openai_completions``): a text chunk's
  ``usage.completion_tokens``, else the ``max_tokens`` asked (``request_func_input.output_len``);
  ``vllm-chat``, ``sglang-oai-chat``, ``lmdeploy-chat`` (``async_request_openai_chat_
  completions``): any chunk's usage, else the same. The client asks for no usage, and vLLM's and
  SGLang's servers stream one only when asked (``stream_options``; SGLang 0.5.9
  ``srt/entrypoints/openai/serving_completions.py``: the final usage chunk only with
  ``include_usage``), so against them each is the ``max_tokens`` asked;
* ``trt``, ``truss``: the ``max_tokens`` asked, always.

So where the run sent ``ignore_eos`` (its default) the asked length is what the server generated;
where it did not (``--disable-ignore-eos``) ``output_lens`` of a backend of the last two kinds are
upper bounds, which a simulation takes as the tokens generated: said, and assumed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SERVER_COUNTED = ("sglang", "sglang-native")
"""Backends whose ``output_lens`` are the server's count of the tokens generated."""

ASKED_UNLESS_USAGE = (
    "vllm",
    "sglang-oai",
    "lmdeploy",
    "vllm-chat",
    "sglang-oai-chat",
    "lmdeploy-chat",
)
"""Backends whose ``output_lens`` are the ``max_tokens`` asked unless the server streamed a usage."""

ASKED = ("trt", "truss")
"""Backends whose ``output_lens`` are the ``max_tokens`` asked, always."""

SENT = (
    "its client sends ignore_eos true unless run with --disable-ignore-eos (or an "
    "--extra-request-body with an ignore_eos of its own)"
)


@dataclass(frozen=True)
class OutputsSaid:
    """What an SGLang run's ``output_lens`` hold, in words: ``eos`` the ``ignore_eos`` note,
    ``max_tokens`` the ``max_tokens`` note where the asked length is what the file holds (None:
    the reader's own), ``assumed`` the assumption a converted trace carries (None: none)."""

    eos: str
    max_tokens: str | None = None
    assumed: str | None = None


def sglang_outputs_said(doc: Mapping[str, Any]) -> OutputsSaid:
    """What the ``output_lens`` of an SGLang ``bench_serving`` run of ``doc``'s backend hold,
    and what it sent as ``ignore_eos`` (the module's docstring)."""
    backend = str(doc.get("backend"))
    head = (
        "ignore_eos: not recorded in the file (sglang.bench_serving saves neither it nor "
        f"--disable-ignore-eos); {SENT}"
    )
    if backend in SERVER_COUNTED:
        return OutputsSaid(
            f"{head}. Backend {backend}'s output_lens are the server's count of the tokens it "
            "generated (meta_info.completion_tokens), whichever it was: simulated as generated"
        )
    if backend not in (*ASKED_UNLESS_USAGE, *ASKED):
        return OutputsSaid(f"{head} (backend {backend[:40]})")
    unless = (
        ""
        if backend in ASKED
        else " (or a usage's completion_tokens, which vLLM's and SGLang's servers stream only "
        "when asked: --extra-request-body stream_options)"
    )
    return OutputsSaid(
        f"{head}. Backend {backend}'s output_lens are the max_tokens the client asked "
        f"for{unless}, not a count of what the server generated: ASSUMED ignore_eos true, its "
        "default, so each request generated exactly that many and is simulated so; had the run "
        "--disable-ignore-eos, each is an upper bound (the model may have stopped at its "
        "end-of-sequence token), and the simulated outputs, decode steps and KV cache as long "
        "or longer than the server's",
        max_tokens=f"max_tokens: each request's output_lens, the max_tokens backend {backend}'s "
        "client asked for (the file records no other)",
        assumed=f"ignore_eos true for every request (SGLang's client's default; the file does "
        f"not record --disable-ignore-eos): each output_lens, the max_tokens backend {backend}'s "
        "client asked for, taken as the tokens the server generated (with --disable-ignore-eos "
        "they are upper bounds)",
    )


def fast_prepare_problem(doc: Mapping[str, Any]) -> str | None:
    """Why a ``--dataset-name generated-shared-prefix --gsp-fast-prepare`` run is refused: the
    flag saves 1 as every prompt's length, "which will make some output statistics inaccurate"
    (its help; 0.5.9 sglang/bench_serving.py ``sample_generated_shared_prefix_requests``:
    ``prompt_len = 1 if getattr(args, "gsp_fast_prepare", False) else
    len(tokenizer.encode(turn_prompts[0]))``; 0.5.23 sglang/benchmark/datasets/
    generated_shared_prefix.py the same), while each prompt was its group's system prompt, two
    newlines and a question, never one token: read, every request was simulated with a
    one-token prompt."""
    lens = doc.get("input_lens")
    if (
        doc.get("dataset_name") != "generated-shared-prefix"
        or not isinstance(lens, list)
        or not lens
        or any(x != 1 or isinstance(x, bool) for x in lens)
    ):
        return None
    return (
        f"1 for each of the {len(lens)} prompts of an SGLang bench_serving "
        "generated-shared-prefix run, each its group's system prompt and a question: "
        "--gsp-fast-prepare saves 1 in place of each prompt's length, which the file does "
        "not hold, so its prompts cannot be simulated; record it without --gsp-fast-prepare"
    )
