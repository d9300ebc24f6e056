"""What a serving benchmark's ``--metadata KEY=VALUE`` left in its result and kvbudget does not
read, said.

``vllm bench serve --metadata`` (and ``benchmarks/benchmark_serving.py``'s, and the forks of it)
writes each pair as a top-level key of the result, its value a string (vLLM 0.32.0
``vllm/benchmarks/serve.py``: ``result_json[kvstring[0].strip()] = kvstring[1].strip()``).
People record the server there: github.com/moguizhizi/learning_project's results at 9239dfc6
carry ``hardware`` 910B3, ``kind`` mindie and ``env`` TP4PP1 (a run on Ascend 910B3 NPUs
against MindIE at TP 4); others write ``gpu=4xNVIDIA_L40S`` or ``decode_replicas=4``. kvbudget
reads ``max_tokens`` and
``ignore_eos`` from them; the others (a GPU, a parallelism, a number of replicas) are the
server's, which the settings line then says it ASSUMED: the note names them beside it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

RESULT_TEXT_KEYS = frozenset({
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "request_rate",
    "ramp_up_strategy", "dataset_name", "tag", "served_model_name"})
"""The keys of a serving benchmark's own result whose values are text: vLLM 0.32.0
``serve.py`` (``date``, ``endpoint_type``, ``backend``, ``label``, ``model_id``,
``tokenizer_id``, ``request_rate`` as ``"inf"``, ``ramp_up_strategy``), SGLang's
``bench_serving`` (``backend``, ``dataset_name``, ``tag``). Any other text value came from
``--metadata``."""

READ_KEYS = frozenset({"max_tokens", "max_output_len", "max_output_tokens", "ignore_eos"})
"""The ``--metadata`` keys kvbudget reads (``recorded_vllm_bench``)."""

SHOWN = 8
"""How many unread pairs the note lists."""


def metadata_note(doc: Mapping[str, Any], read_elsewhere: frozenset[str]) -> str | None:
    """A note naming the ``--metadata`` pairs of one result (``doc``) kvbudget does not read;
    None where there is none. ``read_elsewhere``: keys another part of the reader takes (a
    ``vllm bench sweep`` run's serve parameters), spelled with ``_``."""
    unread = [(k, v) for k, v in doc.items() if isinstance(k, str) and isinstance(v, str)
              and k not in RESULT_TEXT_KEYS and k not in READ_KEYS
              and k.replace("-", "_") not in read_elsewhere]
    if not unread:
        return None
    shown = ", ".join(f"{k}={v[:40]}" for k, v in unread[:SHOWN]) + (
        f" and {len(unread) - SHOWN} more" if len(unread) > SHOWN else "")
    return (f"the file's --metadata {shown}: not read (kvbudget takes only max_tokens and "
            "ignore_eos from it); where they describe the server, pass them as --gpu, "
            "--tensor-parallel-size, --engine or --set fleet.num_replicas=N")


READ_OBJECTS = frozenset({"server_info", "details"})
"""The keys of a serving benchmark's result whose values are JSON objects that kvbudget reads:
SGLang's ``server_info`` and its nested per-request ``details``."""


def object_note(doc: Mapping[str, Any]) -> str | None:
    """A note naming the JSON objects of one result (``doc``) that kvbudget does not read, with
    their first scalar pairs (one object down besides); None where there is none.

    A script that runs ``vllm.benchmarks.serve.benchmark`` itself may save what it learnt of the
    server beside the result (github.com/maty0609/vllm-benchmarks ``vllm_benchmark.py``:
    ``server_config`` with ``gpu_type`` 'RTX 3090 24GB', ``model_root``
    'QuantTrio/Qwen3.5-27B-AWQ' and ``vllm_params``), which kvbudget passed over unsaid while
    its settings line said "the recording does not name its GPU"."""
    unread = [(k, v) for k, v in doc.items() if isinstance(k, str) and isinstance(v, Mapping)
              and v and k not in READ_OBJECTS]
    if not unread:
        return None
    said = []
    for key, obj in unread:
        pairs = [(f"{key}.{k}", v) for k, v in obj.items() if not isinstance(v, Mapping | list)]
        pairs += [(f"{key}.{k}.{k2}", v2) for k, v in obj.items() if isinstance(v, Mapping)
                  for k2, v2 in v.items() if not isinstance(v2, Mapping | list)]
        shown = ", ".join(f"{k}={str(v)[:40]}" for k, v in pairs[:SHOWN]) + (
            f" and {len(pairs) - SHOWN} more" if len(pairs) > SHOWN else "")
        said.append(f"{key} ({shown})" if shown else key)
    return (f"the file's {'; '.join(said)}: not read (kvbudget reads no such object of a "
            "serving benchmark's result: the settings line's ASSUMED parts stand); where it "
            "describes the server, pass it as --gpu, --model, --tensor-parallel-size or --set "
            "engine.KEY=VALUE (docs/scenarios.md)")
