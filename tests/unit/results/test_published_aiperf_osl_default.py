"""AIPerf 0.1.x summaries leave out settings not given on the command line: a published run's
``--osl 250`` (no ``--osl-stddev``) sent every request ``max_tokens`` 250, and kvbudget said
the file recorded none (``tests/fixtures/recordings/published/README.md`` cites the source)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvbudget.results.recordings import RecordedStage, read_recording
from tests.unit.results.excerpts import excerpt_copy, set_excerpt_counts

PUBLISHED = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
RUN = PUBLISHED / "aiperf-gpt-oss-20b-cancel10-excerpt"


# github.com/ai-dynamo/aiperf examples/artifacts/run1 at 7c31f57 (openai/gpt-oss-20b,
# `--concurrency 100 --num-requests 100 --osl 250 --request-cancellation-rate 10`): the
# summary holds input_config.input.prompt.output_tokens {"mean": 250} with no stddev, left out
# by json_exporter's model_dump_json(exclude_unset=True), so AIPerf's default 0 held and
# _set_max_tokens sent ceil(250) in every body. kvbudget required stddev 0 written out and said
# "max_tokens: its realised output length (... the file records no max_tokens)".
def test_an_unset_osl_stddev_is_aiperfs_default_zero(tmp_path: Path) -> None:
    rec = read_recording(excerpt_copy(RUN, tmp_path) / "profile_export.jsonl")
    assert rec.config["max_tokens"] == 250
    assert "max_tokens: the tool's recorded setting for every request" in rec.notes
    assert set(rec.workload.max_output_tokens.tolist()) == {250}
    # each output is its output_sequence_length: the reasoning tokens with the answer's
    assert sorted(rec.workload.output_tokens.tolist()) == [193, 193, 211, 241]
    assert rec.stages[0] == RecordedStage("concurrency 100", "closed", None, 100)
    # the requests AIPerf cancelled at once (--request-cancellation-rate) are not simulated
    assert rec.counts["num_failed"] == 2 and rec.counts["num_simulated"] == 4


def test_a_given_osl_stddev_is_still_drawn_per_request(tmp_path: Path) -> None:
    shutil.copytree(RUN, tmp_path / "run")
    set_excerpt_counts(tmp_path / "run")
    summary = tmp_path / "run" / "profile_export_aiperf.json"
    doc = json.loads(summary.read_text())
    doc["input_config"]["input"]["prompt"]["output_tokens"]["stddev"] = 20.0
    summary.write_text(json.dumps(doc))
    rec = read_recording(tmp_path / "run" / "profile_export.jsonl")
    assert "max_tokens" not in rec.config
    assert rec.notes[0].startswith("max_tokens: its realised output length")
