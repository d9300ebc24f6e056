"""An AIPerf run whose prompts came from a Mooncake trace (``--input-file T
--custom-dataset-type mooncake_trace``): AIPerf makes each of an entry's ``hash_ids`` one block
of text, the same text for the same id (ai-dynamo/aiperf ``aiperf/dataset/generator/
prompt.py``), so entries sharing leading ids shared a prefix in the server's cache.

github.com/anud18/qwen36-vllm-aiperf-benchmark ``results/nvfp4/cf_llama31_agent/agent_flat/c1/``
at f5ecc84c (AIPerf 0.10.0, 20 requests at concurrency 1): its summary's
``input_config.datasets`` is ``{"type": "file", "path": "datasets/aiperf/nvfp4_agent_flat.jsonl",
"format": "mooncake_trace"}``, and the server read 23,224 of the 33,226 prompt tokens (70 %)
from its cache, each request's prompt holding the one before. kvbudget said only its generic
"the recording tells no prompt prefixes" note, naming vllm bench's and multi-turn chats' ways
of sharing, not the trace the run's prefixes came from nor how to simulate them.

Hand-made: AIPerf 0.13.0's concurrency-4 fixture under a summary whose dataset is that one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"
TRACE = "datasets/aiperf/nvfp4_agent_flat.jsonl"


@pytest.mark.parametrize("mooncake", [True, False])
def test_a_mooncake_trace_datasets_shared_prefixes_are_said(tmp_path: Path,
                                                            mooncake: bool) -> None:
    summary = json.loads((AIPERF / "concurrency4_aiperf.json").read_text())
    if mooncake:
        summary["input_config"]["datasets"] = [
            {"name": "main", "type": "file", "path": TRACE, "format": "mooncake_trace",
             "entries": 20, "random_seed": 42}]
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary))
    path = tmp_path / "profile_export.jsonl"
    path.write_text((AIPERF / "concurrency4.jsonl").read_text())
    said = [n for n in read_recording(path).notes if "Mooncake trace" in n]
    if not mooncake:
        assert said == []
        return
    assert len(said) == 1 and said[0].startswith(f"prompts built from the Mooncake trace {TRACE}")
    assert "the records keep no hash_ids: not simulated" in said[0]
    assert f"kvbudget simulate --trace {TRACE} --format mooncake" in said[0]
