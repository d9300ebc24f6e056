"""llm-load-test outputs others published (``tests/fixtures/recordings/published/``, source,
commit and licence in that folder's README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvbudget.results.recordings import RecordedStage, detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

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
