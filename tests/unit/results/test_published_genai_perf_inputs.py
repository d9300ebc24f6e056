"""genai-perf's ``inputs.json`` (the request bodies it writes into every artifact folder before
perf_analyzer runs: triton-inference-server/perf_analyzer at 263c5f6e,
``genai-perf/genai_perf/inputs/inputs.py`` ``_write_json_to_file``) passed to ``--records``.

github.com/apeterson7/triton-llm at aa0f701e committed only
``artifacts/gpt2-triton-tensorrtllm-concurrency1/inputs.json`` of its genai-perf run (100
records ``{"model", "text_input", "max_tokens", "stream"}``, Triton's format, indented). The
file got "cannot tell the recording format ...: pass a format (records, run, vllm-bench, ...)",
which no format could read; its folder got "it holds 1 data file(s) (inputs.json): pass one of
them", which led back to that. The files here are of the same shape, written as genai-perf
writes them (``json.dumps(..., indent=2)``). AIPerf writes an ``inputs.json`` of its own,
checked on a real one."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvbudget.results.recordings import read_recording
from tests.unit.results.test_published_result_folders import refused

AIPERF_RUN = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"
              / "prefix2x16_rate8")
"""A real AIPerf 0.13.0 artifact folder (``scripts/make_recording_fixtures.sh aiperf-prefix``),
whose ``inputs.json`` holds its 10 sessions' bodies (``dataset/dataset_manager.py``
``_generate_inputs_json_file``)."""

TRITON_RECORD = {"model": "gpt2", "text_input": ["play with wind LORD"], "max_tokens": [150],
                 "stream": [True]}
"""A record of Triton's formats: the request's fields at the top (``triton_format``)."""
OPENAI_RECORD = {"payload": [{"model": "llama", "messages": [
    {"role": "user", "content": "hi"}], "max_tokens": 16, "stream": True}]}
"""A record of the OpenAI formats: the body under ``payload`` (``base_converter.py``
``_finalize_payload``)."""


def write_inputs(folder: Path, record: dict[str, Any], n: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "inputs.json"
    path.write_text(json.dumps({"data": [record] * n}, indent=2))
    return path


@pytest.mark.parametrize("record", [TRITON_RECORD, OPENAI_RECORD])
def test_genai_perf_inputs_file_is_named(tmp_path: Path, record: dict[str, Any]) -> None:
    path = write_inputs(tmp_path, record)
    said = refused(path)
    assert said.startswith(f"{path}: is genai-perf's inputs.json: the 3 request bodies it "
                           "generated for perf_analyzer to send (--input-data), no time")
    assert "rerun with AIPerf" in said and "pass a format" not in said


def test_a_data_list_of_other_records_is_not_said_to_be_genai_perf(tmp_path: Path) -> None:
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps({"data": [{"prompt": "x"}]}))
    assert "genai-perf" not in refused(path)


def test_genai_perf_artifact_folder_without_summaries_is_named(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    run = artifacts / "gpt2-triton-tensorrtllm-concurrency1"
    write_inputs(run, TRITON_RECORD)
    said = refused(run)
    assert said.startswith(f"{run}: is genai-perf's artifact folder: its inputs.json holds the "
                           "request bodies it generated, no measurement, beside no "
                           "profile_export.json")
    assert "pass one of them" not in said
    assert ("the first, gpt2-triton-tensorrtllm-concurrency1/, is genai-perf's artifact folder: "
            "its gpt2-triton-tensorrtllm-concurrency1/inputs.json") in refused(artifacts)
    (run / "profile_export.json").write_text('{"experiments": []}')
    assert "beside perf_analyzer's profile_export.json, each request's timestamps but no " \
        "token counts" in refused(run)


def test_aiperf_inputs_file_is_named_and_the_records_beside_it_are_read(tmp_path: Path) -> None:
    # AIPerf writes inputs.json too; it got the same "cannot tell the recording format"
    said = refused(AIPERF_RUN / "inputs.json")
    assert said.startswith(f"{AIPERF_RUN / 'inputs.json'}: is AIPerf's inputs.json: the "
                           "request bodies of its 10 sessions")
    assert "profile_export.jsonl" in said and "genai-perf" not in said
    assert read_recording(AIPERF_RUN / "profile_export.jsonl").tool.startswith("aiperf")
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(AIPERF_RUN / "inputs.json", run)
    assert refused(run).startswith(f"{run}: is AIPerf's artifact folder without its "
                                   "per-request records: its inputs.json holds")
