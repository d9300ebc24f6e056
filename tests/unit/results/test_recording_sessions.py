"""inference-perf's session reports (a trace session replay's ``per_session_lifecycle_metrics
.json``, ``summary_`` / ``stage_N_session_lifecycle_metrics.json``) hold no request: refused in
one line that names the file and the per-request report to pass, not "cannot tell the
recording format". The per-session file is hand-made (``handmade/``) from inference-perf
0.7.0's ``SessionLifecycleMetric`` fields (``inference_perf/apis/base.py``, as
``reportgen/base.py`` dumps them): a real one needs an OTel or Weka trace session replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

HANDMADE = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "handmade"
PER_SESSION = HANDMADE / "inference-perf-0.7.0-per_session_lifecycle_metrics-handmade.json"


def test_inference_perf_per_session_report_is_refused_by_name() -> None:
    # it said 'cannot tell the recording format (a JSON list that is not inference-perf's
    # per_request_lifecycle_metrics.json)', though it is inference-perf's own report
    with pytest.raises(TraceError) as err:
        detect_recording_format(PER_SESSION)
    said = str(err.value)
    assert "cannot tell" not in said
    assert "per_session_lifecycle_metrics.json" in said and "one row per session" in said
    assert "pass per_request_lifecycle_metrics.json from the same run" in said
    with pytest.raises(TraceError, match="one row per session"):
        read_recording(PER_SESSION)


@pytest.mark.parametrize("stage_file", [False, True])
def test_inference_perf_session_summaries_are_refused_by_name(tmp_path: Path,
                                                              stage_file: bool) -> None:
    # summarize_sessions' keys (inference-perf 0.7.0 reportgen/base.py); a stage's file puts
    # its stage_metadata first
    doc = {"num_sessions": 2, "num_sessions_succeeded": 2, "num_sessions_failed": 0,
           "total_events": 5, "sessions_per_second": 0.37,
           "session_duration_sec": {"mean": 4.54}}
    if stage_file:
        doc = {"stage_metadata": {"stage_id": 0, "status": "COMPLETED",
                                  "concurrent_sessions": 2, "session_rate": None}, **doc}
    path = tmp_path / "stage_0_session_lifecycle_metrics.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as err:
        read_recording(path)
    assert "is an inference-perf session summary" in str(err.value)
    assert "cannot tell" not in str(err.value)


def test_validate_refuses_a_per_session_report_in_one_line() -> None:
    res = CliRunner().invoke(app, ["validate", "--records", str(PER_SESSION)])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and PER_SESSION.name in lines[0]
    assert "one row per session" in lines[0] and "Traceback" not in res.output
