"""AIPerf's ``--extra-inputs`` as its first summaries keep them: ``input_config.input.extra``,
a list of ``[name, value]`` pairs (AIPerf 0.1.1 ``aiperf/common/config/input_config.py``,
parsed by ``parse_str_or_dict_as_tuple_list``), where 0.13.0 keeps a dict at
``input_config.endpoint.extra``. kvbudget read only the dict: the published Qwen run's
``--extra-inputs "min_tokens:200" --extra-inputs "ignore_eos:true"`` were not read (the
settings line's "the file records" named no ignore_eos), nor a ``max_tokens`` sent so."""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.results.recordings import read_recording
from tests.unit.results.excerpts import excerpt_copy, set_excerpt_counts

EXCERPT = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
           / "aiperf-qwen-concurrency1-excerpt")


def test_the_published_runs_extra_input_pairs_are_read(tmp_path: Path) -> None:
    rec = read_recording(excerpt_copy(EXCERPT, tmp_path) / "profile_export.jsonl")
    assert rec.config["ignore_eos"] is True


def test_a_max_tokens_pair_is_each_requests_setting(tmp_path: Path) -> None:
    summary = json.loads((EXCERPT / "profile_export_aiperf.json").read_text())
    # AIPerf merged the pairs with payload.update(pairs): a later pair of one name wins
    summary["input_config"]["input"]["extra"] = [
        ["max_tokens", 100], ["ignore_eos", True], ["max_tokens", 256]]
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary))
    (tmp_path / "profile_export.jsonl").write_text(
        (EXCERPT / "profile_export.jsonl").read_text())
    set_excerpt_counts(tmp_path / "profile_export.jsonl")
    rec = read_recording(tmp_path / "profile_export.jsonl")
    assert rec.config["max_tokens"] == 256 and rec.config["ignore_eos"] is True
    assert "max_tokens: the tool's recorded setting for every request" in rec.notes
    assert set(rec.workload.max_output_tokens.tolist()) == {256}


def test_pairs_that_are_no_pairs_are_not_read(tmp_path: Path) -> None:
    summary = json.loads((EXCERPT / "profile_export_aiperf.json").read_text())
    summary["input_config"]["input"]["extra"] = [["max_tokens"], "ignore_eos:true", [3, 4]]
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(summary))
    (tmp_path / "profile_export.jsonl").write_text(
        (EXCERPT / "profile_export.jsonl").read_text())
    set_excerpt_counts(tmp_path / "profile_export.jsonl")
    rec = read_recording(tmp_path / "profile_export.jsonl")
    assert "ignore_eos" not in rec.config
    # the run's fixed output length (--output-tokens-mean 200, stddev 0), not a pair
    assert rec.config["max_tokens"] == 200


def test_the_fixed_output_length_is_each_requests_max_tokens(tmp_path: Path) -> None:
    # the published run's --output-tokens-mean 200 --output-tokens-stddev 0: AIPerf 0.1.1 sent
    # max_completion_tokens 200 in every body (composer/base.py _set_max_tokens)
    rec = read_recording(excerpt_copy(EXCERPT, tmp_path) / "profile_export.jsonl")
    assert set(rec.workload.max_output_tokens.tolist()) == {200}
    assert "max_tokens: the tool's recorded setting for every request" in rec.notes
