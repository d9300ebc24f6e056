"""What an engine's front end does with a request for the model's context, ``max_model_len``
``L`` (the engine's when set, else the model's ``max_position_embeddings``, vLLM's default, as
:meth:`~kvbudget.simulator.sim_config.SimConfig.engine_for` fills it in), before its scheduler
sees the request: refuse it (HTTP 400) or serve it with its output cut at the context.

- **vLLM** (``vllm``, ``vllm-swap``; vLLM 0.32.0, the local copy): a prompt of ``L`` tokens or
  more is refused, ``prompt_too_long`` (``vllm/renderers/params.py`` ``_token_len_check``,
  "exceeds this limit even without any output tokens"; a prompt of exactly ``L`` leaves
  ``max_tokens`` 0, which ``SamplingParams`` refuses, "max_tokens must be at least 1"); a
  ``max_tokens`` over ``L`` is refused, ``context_length`` (``params.py`` ``__post_init__``,
  "max_tokens=N cannot be greater than max_model_len=L"); otherwise the request is served
  with ``max_tokens`` lowered to the context left, ``min(max_tokens, L - prompt)``
  (``vllm/entrypoints/serve/utils/api_utils.py`` ``get_max_tokens``, called by the
  completions and chat servers), so its output ends at ``L - prompt`` tokens. Earlier vLLM
  (``serving_engine.py`` ``_validate_input``, to about 0.20) refused prompt + ``max_tokens``
  over ``L`` instead; the live CPU vLLM 0.32.0 of the tests serves it cut.
- **SGLang, TGI, TensorRT-LLM**: prompt + ``max_tokens`` over ``L`` is refused (SGLang's
  ``TokenizerManager._validate_one_request`` without ``--allow-auto-truncate``; TGI's
  validation, "inputs tokens + max_new_tokens must be <= max_total_tokens"):
  ``prompt_too_long`` when the prompt alone is over it, else ``context_length``.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kvbudget.workloads import Workload

__all__ = ["CUTTING_ENGINES", "context_refusals", "cut_to_context"]

CUTTING_ENGINES = frozenset({"vllm", "vllm-swap"})
"""The engines whose front end lowers ``max_tokens`` to the context left instead of refusing."""


def context_refusals(workload: Workload, limit: int, cuts: bool) -> dict[int, str]:
    """The rows the front end refuses for the context ``limit``, with their reasons (the
    module doc; ``cuts``: the engine is one of :data:`CUTTING_ENGINES`)."""
    prompt = workload.prompt_tokens
    declared = workload.max_output_tokens
    if cuts:
        too_long = prompt >= limit
        refused = too_long | (declared > limit)
    else:
        too_long = prompt > limit
        refused = prompt + declared > limit
    return {int(i): "prompt_too_long" if too_long.item(i) else "context_length"
            for i in np.flatnonzero(refused).tolist()}


def cut_to_context(workload: Workload, limit: int, cuts: bool) -> tuple[Workload, int]:
    """``workload`` with each served request's output cut at the context left,
    ``limit - prompt`` (vLLM's lowered ``max_tokens``: the engine finishes it there), and the
    number of requests cut; unchanged (0) when the engine refuses instead (``cuts`` false).
    The declared ``max_output_tokens`` is kept: the gateway in front reserves what the client
    asked for."""
    if not cuts:
        return workload, 0
    prompt, output = workload.prompt_tokens, workload.output_tokens
    cut = (prompt < limit) & (workload.max_output_tokens <= limit) & (prompt + output > limit)
    if not cut.any():
        return workload, 0
    return (replace(workload, output_tokens=np.where(cut, limit - prompt, output)),
            int(cut.sum()))
