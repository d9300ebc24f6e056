"""A records file without its requests' send times is refused, not simulated at drawn arrivals.

The generic records format requires ``arrival_s`` (docs/recordings.md). A file without it
(a script's per-request latencies, mapped with ``--column``: the layout of
github.com/liqcui/sglang-benchmark-tools 8d465f33 ``examples/logs/*.requests.jsonl``) was read
through the trace loader, which draws Poisson arrivals at 1 req/s for a table of lengths alone:
validate and calibrate compared the measured TTFT and E2E (taken under the load the requests
met) with a simulation at a load kvbudget made up, exit 0, its "measured" output tokens/s
spanning the made-up arrivals, said only in a note among many."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

COLUMNS = {"prompt_tokens": "input_len", "output_tokens": "output_len"}


def _write(path: Path, *, sent: bool) -> Path:
    rows = []
    for i in range(12):
        row: dict[str, object] = {
            "request_id": str(i),
            "input_len": 512,
            "output_len": 64,
            "ttft_s": 0.2 + 0.01 * i,
            "e2e_s": 1.5 + 0.01 * i,
            "status": "ok",
        }
        if sent:
            row["start"] = 1_700_000_000.0 + 0.5 * i  # epoch seconds
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_records_without_send_times_are_refused_naming_the_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "requests.jsonl", sent=False)
    with pytest.raises(TraceError) as err:
        read_recording(path, format="records", columns=COLUMNS)
    said = str(err.value)
    assert "field 'arrival_s'" in said and "has no 'arrival_s' column" in said
    assert "--column arrival_s=COLUMN" in said and "--arrival poisson:RATE" in said
    with pytest.raises(TraceError) as err:  # a mapping that names a column the file lacks
        read_recording(path, format="records", columns={**COLUMNS, "arrival_s": "sent_at"})
    assert "'sent_at'" in str(err.value)


def test_records_with_send_times_mapped_are_read(tmp_path: Path) -> None:
    path = _write(tmp_path / "requests.jsonl", sent=True)
    recording = read_recording(path, format="records", columns={**COLUMNS, "arrival_s": "start"})
    assert len(recording.workload.arrival_s) == 12
    assert recording.workload.arrival_s[1] - recording.workload.arrival_s[0] == pytest.approx(0.5)


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_validate_and_calibrate_refuse_it_in_one_line(tmp_path: Path, command: str) -> None:
    path = _write(tmp_path / "requests.jsonl", sent=False)
    out = ["--out", str(tmp_path / ("v" if command == "validate" else "c.toml"))]
    result = CliRunner().invoke(
        app,
        [
            command,
            "--records",
            str(path),
            "--records-format",
            "records",
            "--column",
            "prompt_tokens=input_len",
            "--column",
            "output_tokens=output_len",
            "--model",
            "Llama-3.1-8B",
            "--gpu",
            "H100",
            *out,
        ],
    )
    assert result.exit_code == 2, result.output
    assert "has no 'arrival_s' column" in result.output
    assert "Traceback" not in result.output and "simulated vs measured" not in result.output
