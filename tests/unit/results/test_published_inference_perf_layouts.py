"""inference-perf's per-request report in the layouts before 0.6.0: the response figures in
``info.response_info`` (0.5.0 ``inference_perf/apis/base.py`` ``InferenceInfo.response_info``,
``StreamedInferenceResponseInfo``: ``output_tokens``, ``output_token_times``, ``server_usage``)
and in ``info`` itself (0.4.0 ``InferenceInfo``: ``output_tokens``, ``output_token_times``).

Published: github.com/aradhalevy/llm-d-benchmark ``ipp_benchmarking/example_outputs/
collected-logs-example/.../inference-perf-1780510738-2uuuze_1/per_request_lifecycle_metrics.json``
at 0aff7f9 (Qwen/Qwen3-30B-A3B behind llm-d, ``max_tokens`` 10 with ``ignore_eos``; excerpt: its
first 2 requests): kvbudget read only ``info.response_metrics`` (0.6.0+) and refused the file
with "no requests left: every row was dropped (0 output tokens: ...)", each of which had
streamed 10."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

EXCERPT = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
           / "inference-perf-0.5-llmd-qwen3-30b-excerpt" / "per_request_lifecycle_metrics.json")


def test_a_0_5_files_response_info_is_read() -> None:
    rec = read_recording(EXCERPT)
    assert rec.format == "inference-perf" and rec.counts["num_measured"] == 2
    # in send order: the 249-token prompt went first
    assert rec.workload.prompt_tokens.tolist() == [249, 74]
    assert rec.workload.output_tokens.tolist() == [10, 10]
    assert rec.workload.max_output_tokens.tolist() == [10, 10]
    m = rec.measured
    assert np.allclose(m["ttft_s"], [12802.287394846 - 12796.593075605,
                                     12802.310675315 - 12798.103025453])
    assert np.allclose(m["e2e_s"], [12802.295790875 - 12796.593075605,
                                    12802.315496534 - 12798.103025453])


def _flat(tmp_path: Path, times: Any) -> Path:
    """Two requests as inference-perf 0.4.0 writes them: ``info.output_tokens`` and
    ``info.output_token_times`` beside ``info.input_tokens``."""
    body = json.dumps({"model": "m", "prompt": "x", "max_tokens": 4, "ignore_eos": True})
    doc: list[dict[str, Any]] = [{"start_time": 10.0 + k, "end_time": 10.9 + k, "request": body,
            "info": {"input_tokens": 32, "output_tokens": 4,
                     "output_token_times": [10.5 + k + 0.1 * j for j in range(4)]
                     if times is None else times, "extra_info": {}, "lora_adapter": None},
            "error": None} for k in range(2)]
    path = tmp_path / "per_request_lifecycle_metrics.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_0_4_files_flat_info_is_read(tmp_path: Path) -> None:
    rec = read_recording(_flat(tmp_path, None))
    assert rec.workload.output_tokens.tolist() == [4, 4]
    assert np.allclose(rec.measured["ttft_s"], [0.5, 0.5])
    assert np.allclose(rec.measured["tpot_s"], [0.4 / 3, 0.4 / 3])


def test_a_bad_time_list_names_the_layouts_field(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"info\.output_token_times"):
        read_recording(_flat(tmp_path, "soon"))
