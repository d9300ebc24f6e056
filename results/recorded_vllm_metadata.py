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

import re
from collections.abc import Mapping
from typing import Any

RESULT_TEXT_KEYS = frozenset(
    {
        "date",
        "endpoint_type",
        "backend",
        "label",
        "model_id",
        "tokenizer_id",
        "request_rate",
        "ramp_up_strategy",
        "dataset_name",
        "tag",
        "served_model_name",
    }
)
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
    unread = [
        (k, v)
        for k, v in doc.items()
        if isinstance(k, str)
        and isinstance(v, str)
        and k not in RESULT_TEXT_KEYS
        and k not in READ_KEYS
        and k.replace("-", "_") not in read_elsewhere
    ]
    if not unread:
        return None
    shown = ", ".join(f"{k}={v[:40]}" for k, v in unread[:SHOWN]) + (
        f" and {len(unread) - SHOWN} more" if len(unread) > SHOWN else ""
    )
    return (
        f"the file's --metadata {shown}: not read (kvbudget takes only max_tokens and "
        "ignore_eos from it); where they describe the server, pass them as --gpu, "
        "--tensor-parallel-size, --engine or --set fleet.num_replicas=N"
    )


GATEWAY_KEY = "gateway_metadata"
"""``Recording.config``'s key for the ``--metadata`` pairs that say the requests went through a
gateway (:func:`gateway_pairs`), a list of ``KEY=VALUE``; absent where none does."""

GATEWAY_WORDS = frozenset({"gateway", "router", "proxy"})
"""The words of a ``--metadata`` key or value that name a hop between the load tool and the
server: an API gateway, a router in front of replicas (llm-d's, vLLM's ``vllm-router``), a
prefill/decode proxy. github.com/dariustanrd/tokenkaki at 0781746d benchmarks Qwen3-8B on vLLM
0.19 both ways, its results' ``--metadata`` telling which: ``benchmark_target=vllm`` and
``base_url`` the server's, or ``benchmark_target=gateway``, ``gateway_base_url`` and
``vllm_base_url`` (the gateway's port before the server's)."""

_NOT_A_HOP = frozenset({"", "none", "null", "false", "no", "0", "off", "direct", "n/a", "na"})
"""Values of a key naming a gateway that say there was none (``gateway=none``)."""

_CLIENT_PROXY_KEYS = frozenset({"http_proxy", "https_proxy", "no_proxy", "all_proxy"})
"""The client's own proxy settings (environment variables someone saved), no hop of the
deployment's."""


def _words(text: str) -> set[str]:
    return set(re.split(r"[^a-z0-9]+", text.lower()))


def gateway_pairs(doc: Mapping[str, Any]) -> list[str]:
    """The ``--metadata`` pairs of one result (``doc``) that say its requests went through a
    gateway, a router or a proxy (:data:`GATEWAY_WORDS` in a key whose value does not deny it, or
    in a value), as ``KEY=VALUE``; empty where none does. A result records no such thing of its
    own: ``vllm bench serve`` writes its ``base_url``'s host nowhere it reads, so only a pair its
    user added tells that the server was not answering directly. Where the pairs also name the
    URL the client sent to (``base_url``), a gateway's URL other than it is an address recorded
    beside the one used, no hop (:func:`_unused_address`)."""
    used = doc.get("base_url")
    pairs = []
    for k, v in doc.items():
        if (
            not isinstance(k, str)
            or not isinstance(v, str)
            or k in RESULT_TEXT_KEYS
            or k.lower() in _CLIENT_PROXY_KEYS
        ):
            continue
        named = (
            bool(_words(k) & GATEWAY_WORDS)
            and v.strip().lower() not in _NOT_A_HOP
            and not _unused_address(v, used)
        )
        if named or _words(v) & GATEWAY_WORDS:
            pairs.append(f"{k}={v[:60]}")
    return pairs


def _unused_address(value: str, used: object) -> bool:
    """Whether ``value``, a gateway key's, is a URL other than ``used``, the ``base_url`` pair
    naming where the requests went: github.com/dariustanrd/tokenkaki 05d758c8
    ``benchmarks/vllm-serving-bench.sh`` passes ``--base-url "${BASE_URL}"`` and records
    ``base_url``, ``gateway_base_url`` and ``vllm_base_url`` on every run, ``BASE_URL`` the
    gateway's or the server's by ``BENCHMARK_TARGET``, so its direct runs
    (``benchmark_target=vllm``) carry the gateway's URL too."""
    if not isinstance(used, str) or "://" not in used or "://" not in value:
        return False
    return value.strip().rstrip("/") != used.strip().rstrip("/")


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
    unread = [
        (k, v)
        for k, v in doc.items()
        if isinstance(k, str) and isinstance(v, Mapping) and v and k not in READ_OBJECTS
    ]
    if not unread:
        return None
    said = []
    for key, obj in unread:
        pairs = [(f"{key}.{k}", v) for k, v in obj.items() if not isinstance(v, Mapping | list)]
        pairs += [
            (f"{key}.{k}.{k2}", v2)
            for k, v in obj.items()
            if isinstance(v, Mapping)
            for k2, v2 in v.items()
            if not isinstance(v2, Mapping | list)
        ]
        shown = ", ".join(f"{k}={str(v)[:40]}" for k, v in pairs[:SHOWN]) + (
            f" and {len(pairs) - SHOWN} more" if len(pairs) > SHOWN else ""
        )
        said.append(f"{key} ({shown})" if shown else key)
    return (
        f"the file's {'; '.join(said)}: not read (kvbudget reads no such object of a "
        "serving benchmark's result: the settings line's ASSUMED parts stand); where it "
        "describes the server, pass it as --gpu, --model, --tensor-parallel-size or --set "
        "engine.KEY=VALUE (docs/scenarios.md)"
    )
