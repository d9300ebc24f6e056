"""Locust's files (``locust --csv``, ``--csv-full-history``, ``--json-file``) passed to
``--records``: named as Locust's aggregates, with what to do instead.

The fixtures are what Locust 2.47.0 wrote against the CPU vLLM (``scripts/
make_recording_fixtures.sh locust``: 2 users of a locustfile sending 16-token completions for
6 s). Before, ``_failures.csv`` and ``_exceptions.csv`` were asked for a ``prompt_tokens``
column, the JSON stats were "cannot tell the recording format", the folder was told to "pass
one of them", and the stats tables were anonymous aggregates."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_locust import locust_csv_refusal, locust_refusal
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

RUN = Path(__file__).parents[2] / "fixtures" / "recordings" / "locust-2.47.0"
INSTEAD = "Locust keeps no request's own send time, tokens or first token"


def refusal(path: Path) -> str:
    with pytest.raises(TraceError) as caught:
        read_recording(path)
    text = str(caught.value)
    assert "\n" not in text and text.startswith(f"{path}: is Locust's "), text
    return text


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("tiny_stats.csv", "--csv *_stats.csv: one row an endpoint and their aggregate"),
        ("tiny_stats_history.csv", "--csv-full-history *_stats_history.csv"),
        ("tiny_failures.csv", "--csv *_failures.csv"),
        ("tiny_exceptions.csv", "--csv *_exceptions.csv"),
        ("tiny.json", "--json-file stats: 1 endpoint(s)"),
    ],
)
def test_each_file_it_wrote_is_named(name: str, said: str) -> None:
    text = refusal(RUN / name)
    assert said in text and INSTEAD in text and "genai-bench" in text
    assert "missing column" not in text and "cannot tell" not in text


def test_the_folder_is_named_with_its_prefix(tmp_path: Path) -> None:
    text = refusal(RUN)
    assert "output folder (--csv tiny: tiny_stats.csv" in text and "pass one of them" not in text
    # another tool's *_stats.csv (not Locust's header) is not claimed
    (tmp_path / "run_stats.csv").write_text("arrival_s,prompt_tokens\n0.0,5\n")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(TraceError) as caught:
        read_recording(tmp_path)
    assert "Locust" not in str(caught.value)


def test_the_stats_are_the_run_and_look_alikes_are_not_claimed(tmp_path: Path) -> None:
    stats = json.loads((RUN / "tiny.json").read_text())
    assert [(e["method"], e["name"]) for e in stats] == [("POST", "/v1/completions")]
    assert stats[0]["num_requests"] > 0 and stats[0]["num_failures"] == 0
    assert locust_refusal([{k: v for k, v in stats[0].items() if k != "response_times"}]) is None
    assert locust_refusal([]) is None
    # hand-made: a header that shares Locust's first columns only in part
    assert locust_csv_refusal(["type", "name", "request count"]) is None
    assert locust_csv_refusal(["count", "message"]) is None


def test_validate_says_it_in_one_line_and_fails(tmp_path: Path) -> None:
    copy = tmp_path / "results_failures.csv"
    shutil.copy(RUN / "tiny_failures.csv", copy)
    result = CliRunner().invoke(app, ["validate", "--records", str(copy)])
    assert result.exit_code != 0
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Locust's --csv *_failures.csv" in lines[0]
