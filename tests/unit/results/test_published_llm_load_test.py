"""llm-load-test outputs others published (``tests/fixtures/recordings/published/``, source,
commit and licence in that folder's README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.results.recordings import RecordedStage, detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError
from tests.unit.results.test_published_files import llm_load_test_file

PUBLISHED = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
DRAFT = PUBLISHED / "llm-load-test-v2-draft-caikit-excerpt.json"


# github.com/openshift-psap/llm-load-test output/output.json at 262e682 (its v2 draft, Dec 2023:
# 20 users for 40 s against Caikit-NLP; plugins/caikit_client_plugin.py calculate_results wrote
# 'TTFT' in ms, 'response_time' in s). kvbudget named the file llm-load-test's but read the
# later 'ttft' key only: every request's TTFT was missing and validate refused the run with
# "no request has a measured TTFT ... (missing ttft 107)", though each request held it.
def test_llm_load_test_v2_draft_ttft_is_read() -> None:
    assert detect_recording_format(DRAFT) == "llm-load-test"
    rec = read_recording(DRAFT)
    assert rec.tool == "llm-load-test"
    assert rec.stages == (RecordedStage("concurrency 20", "closed", None, 20),)
    assert rec.counts["num_measured"] == 4
    results = sorted(json.loads(DRAFT.read_text())["results"], key=lambda r: r["start"])
    measured = rec.measured.sort_values("arrival_s")
    assert np.allclose(measured["ttft_s"], [r["TTFT"] / 1000 for r in results])
    # its response_time is in seconds here: the end less the start
    assert np.allclose(measured["e2e_s"], [r["response_time"] for r in results])
    assert sorted(rec.workload.prompt_tokens.tolist()) == sorted(r["input_tokens"] for r in results)
    assert any("stopped by its 40 s time limit" in n for n in rec.notes)


def test_llm_load_test_draft_ttft_out_of_range_names_its_key(tmp_path: Path) -> None:
    doc = json.loads(DRAFT.read_text())
    doc["results"][1]["TTFT"] = -5.0
    path = tmp_path / "output.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match=r"results\[1\]\.TTFT.*negative time from start:"):
        read_recording(path)


def _not_streamed(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same requests as a run with ``plugin_options.streaming: false`` wrote them: the
    OpenAI plugin's ``request_http`` (openshift-psap/llm-load-test b27aad1) sets no ack or
    first-token time."""
    out = []
    for r in results:
        r = dict(r)
        r.update(first_token_time=None, ack_time=None, ttft=None, tt_ack=None, itl=None)
        out.append(r)
    return out


# A run with plugin_options.streaming: false (the OpenAI plugin's request_http) has no
# first-token time: validate refused it with "no request has a measured TTFT and E2E with a
# completed status (... missing ttft 7)", not saying why nor what to do.
def test_llm_load_test_run_that_did_not_stream_is_named_so(tmp_path: Path) -> None:
    path, results = llm_load_test_file(tmp_path)
    doc = json.loads(path.read_text())
    doc["results"] = _not_streamed(results)
    doc["config"]["plugin_options"]["streaming"] = False
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert info.value.field == "config.plugin_options.streaming"
    assert "the run did not stream" in str(info.value)
    assert str(info.value).endswith("record a streamed run (plugin_options.streaming: true)")


def test_llm_load_test_first_layout_not_streamed_is_named_so(tmp_path: Path) -> None:
    # 64f000d plugins/plugin.py _calculate_results (streaming: False): no ttft key at all
    doc = json.loads(DRAFT.read_text())
    for r in doc["results"]:
        for key in ("TT_ack", "TTFT", "TPOT"):
            del r[key]
    doc["config"]["plugin_options"] = {"streaming": False}
    path = tmp_path / "output.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError, match="the run did not stream"):
        read_recording(path)
    # one streamed request among them is read as before (the flag alone refuses nothing)
    doc["results"][0]["TTFT"] = 100.0
    path.write_text(json.dumps(doc))
    assert read_recording(path).counts["num_measured"] == 1
