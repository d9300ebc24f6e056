"""An SGLang ``bench_serving`` result of a prefill/decode-disaggregated server.

Behind SGLang's load balancer for disaggregation (``python -m sglang_router.launch_router
--pd-disaggregation`` or the older ``sglang.srt.disaggregation.mini_lb``), the client's
``GET /get_server_info`` answers with every worker's own answer: ``{"internal_states": [the
decode workers' ranks], "prefill": [one server info a prefill worker], "decode": [one a decode
worker]}`` (sgl-project/sglang at bda7cc0, ``python/sglang/srt/disaggregation/mini_lb.py``,
``get_server_info``), so the result's ``server_info`` has no settings of its own at the top.
Seen in a published sweep (github.com/TonyLi15/sglang-benchmark ``benchmarks/results/
pd_1p1d_*.jsonl`` at 8864250: Qwen2.5-3B, one prefill and one decode worker): read as a server
of one engine, it named no model ("the recording names no model") and, given one, took the
first decode rank's KV pool for the whole server with no word of the split.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _workers(info: Any, role: str) -> list[Mapping[str, Any]]:
    workers = info.get(role) if isinstance(info, Mapping) else None
    return [w for w in workers if isinstance(w, Mapping)] if isinstance(workers, list) else []


def is_pd_server_info(info: Any) -> bool:
    """Whether ``server_info`` is the disaggregation load balancer's (prefill and decode
    workers' answers, no ``model_path`` of its own)."""
    return isinstance(info, Mapping) and "model_path" not in info and bool(
        _workers(info, "prefill") or _workers(info, "decode"))


def pd_model_path(doc: Mapping[str, Any]) -> str | None:
    """The model the workers of a disaggregated server name (the first that names one)."""
    info = doc.get("server_info")
    if not is_pd_server_info(info):
        return None
    for worker in (*_workers(info, "decode"), *_workers(info, "prefill")):
        model = worker.get("model_path")
        if isinstance(model, str) and model:
            return model
    return None


def pd_view(doc: Mapping[str, Any]) -> tuple[Mapping[str, Any], str | None]:
    """``doc`` with its ``server_info`` replaced by the first decode worker's (the settings an
    engine of it ran), and the note saying what that leaves out; ``(doc, None)`` for a result
    of a server that is not disaggregated."""
    info = doc.get("server_info")
    if not is_pd_server_info(info):
        return doc, None
    prefill, decode = _workers(info, "prefill"), _workers(info, "decode")
    note = (f"the server was SGLang prefill/decode disaggregation behind its load balancer "
            f"(server_info lists {len(prefill)} prefill and {len(decode)} decode workers): "
            "kvbudget simulates a recording on aggregated engines, so prefill and decode are "
            "simulated on the same engine, with the "
            + ("first decode worker's settings" if decode else "first prefill worker's settings")
            + ", and the KV transfer between the pools is not simulated: the simulated TTFT "
            "and TPOT are those of an aggregated server, not of this one")
    return {**doc, "server_info": (decode or prefill)[0]}, note
