"""GuideLLM 0.2-0.3 sent its synthetic data's output length as each request's ``max_tokens``
with ``ignore_eos`` (v0.3.1 ``backend/openai.py`` ``_completions_payload``); its reports keep
no request body but keep the data settings. A published report (github.com/jhurlocker/
guidellm-pipeline at c925e317, Apache-2.0; excerpt in ``tests/fixtures/recordings/published/``)
of data ``{"type": "emulated", "prompt_tokens": 512, "output_tokens": 128}`` had the request
its time limit cut after 75 tokens simulated as one of ``max_tokens`` 75 (its realised length:
"the file records no max_tokens"), not the 128 the server reserved for."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvbudget.results.recorded_guidellm_synthetic import fixed_output_tokens
from kvbudget.results.recordings import read_recording
from tests.unit.results.excerpts import excerpt_copy

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
EXCERPT = FIXTURES / "published" / "guidellm-pipeline-llama-3-2-3b-excerpt.yaml"


def test_the_published_reports_max_tokens_come_from_its_data(tmp_path: Path) -> None:
    rec = read_recording(excerpt_copy(EXCERPT, tmp_path))
    assert rec.workload.output_tokens.tolist() == [128, 128, 128, 75]
    assert rec.workload.max_output_tokens.tolist() == [128] * 4
    assert rec.config["max_tokens"] == 128 and rec.config["ignore_eos"] is True
    assert any(n.startswith("max_tokens: 128 for every request, with ignore_eos, from the "
                            "report's synthetic data settings") for n in rec.notes)


def _report(tmp_path: Path, data: str) -> Path:
    doc = json.loads((FIXTURES / "guidellm-0.3.1" / "benchmarks.json").read_text())
    for bench in doc["benchmarks"]:
        bench["request_loader"]["data"] = data
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(("data", "fixed"), [
    ("prompt_tokens=32,output_tokens=16", True),  # as the tool wrote it
    ("prompt_tokens=32,output_tokens=16,output_tokens_stdev=4", False),  # drawn: unknown
    ("prompt_tokens=32,output_tokens=20", False),  # the outputs say another length
    ("some/dataset.jsonl", False),
])
def test_only_a_fixed_length_the_outputs_bear_out_is_taken(tmp_path: Path, data: str,
                                                            fixed: bool) -> None:
    rec = read_recording(_report(tmp_path, data))
    if fixed:
        assert np.all(rec.workload.max_output_tokens == 16)
        assert rec.config["ignore_eos"] is True
    else:
        assert "max_tokens" not in rec.config
        assert any("its realised output length" in n for n in rec.notes)


@pytest.mark.parametrize(("data", "length"), [
    ('{"type": "emulated", "prompt_tokens": 512, "output_tokens": 128}', 128),
    ("prompt_tokens=512,output_tokens=128", 128),
    ({"output_tokens": 64, "output_tokens_min": 64, "output_tokens_max": 64,
      "output_tokens_stdev": 8}, 64),
    ("output_tokens=64,output_tokens_min=32", None),
    ("output_tokens=64,output_tokens_stdev=1", None),
    ("prompt_tokens=512", None), ("{not json", None), (None, None),
])
def test_fixed_output_tokens(data: object, length: int | None) -> None:
    assert fixed_output_tokens(data) == length
