"""Each AIPerf request's ``max_tokens`` as its body in ``inputs.json`` (beside the records,
which kvbudget already reads for prefixes) sent it. AIPerf 0.13.0's own runs (fixtures made by
``scripts/make_recording_fixtures.sh``, ``--osl 16``) sent ``"max_tokens": 16`` in every body;
kvbudget said "max_tokens: its realised output length (... the file records no max_tokens)"
and reserved what each request happened to generate, not what it asked for."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording

AIPERF = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "aiperf-0.13.0"


@pytest.mark.parametrize("run", ["prefix2x16_rate8", "system16_chat_rate8"])
def test_each_body_as_sent_is_the_requests_max_tokens(run: str) -> None:
    rec = read_recording(AIPERF / run / "profile_export.jsonl")
    assert "max_tokens: the tool's recorded setting for every request" in rec.notes
    assert set(rec.workload.max_output_tokens.tolist()) == {16}


def test_a_chat_bodys_max_completion_tokens_is_read(tmp_path: Path) -> None:
    shutil.copytree(AIPERF / "system16_chat_rate8", tmp_path / "run")
    inputs = tmp_path / "run" / "inputs.json"
    doc = json.loads(inputs.read_text())
    for session in doc["data"]:
        for body in session["payloads"]:
            body.pop("max_tokens", None)
            body["max_completion_tokens"] = 40
    inputs.write_text(json.dumps(doc))
    rec = read_recording(tmp_path / "run" / "profile_export.jsonl")
    assert set(rec.workload.max_output_tokens.tolist()) == {40}


def test_without_inputs_the_fixed_output_length_is_read(tmp_path: Path) -> None:
    shutil.copytree(AIPERF / "prefix2x16_rate8", tmp_path / "run")
    (tmp_path / "run" / "inputs.json").unlink()
    rec = read_recording(tmp_path / "run" / "profile_export.jsonl")
    assert rec.config["max_tokens"] == 16  # --osl 16 --osl-stddev 0: every draw is 16
    assert set(rec.workload.max_output_tokens.tolist()) == {16}
    summary = tmp_path / "run" / "profile_export_aiperf.json"
    doc = json.loads(summary.read_text())
    doc["input_config"]["datasets"][0]["prompts"]["osl"]["stddev"] = 4.0  # drawn per request
    summary.write_text(json.dumps(doc))
    rec = read_recording(tmp_path / "run" / "profile_export.jsonl")
    assert "max_tokens" not in rec.config
    assert rec.notes[0].startswith("max_tokens: its realised output length")
