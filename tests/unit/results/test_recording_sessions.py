"""inference-perf's session reports (a trace session replay's ``per_session_lifecycle_metrics
.json``, ``summary_`` / ``stage_N_session_lifecycle_metrics.json``) hold no request: refused in
one line that names the file and the per-request report to pass, not "cannot tell the
recording format". The per-session file is hand-made (``handmade/``) from inference-perf
0.7.0's ``SessionLifecycleMetric`` fields (``inference_perf/apis/base.py``, as
``reportgen/base.py`` dumps them): a real one needs an OTel or Weka trace session replay."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

HANDMADE = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "handmade"
FIXTURES_IP = HANDMADE.parent / "inference-perf-0.7.0"
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


def _session_run(tmp_path: Path, session_rate: float) -> Path:
    """The real concurrent run's requests and stage files (inference-perf 0.7.0) as a trace
    session replay writes them: its session summary beside them (hand-made, written by
    default), each stage file's requested_rate its session_rate (0.0 when unset) and its
    concurrency its concurrent_sessions."""
    src = FIXTURES_IP / "concurrent"
    (tmp_path / "per_request_lifecycle_metrics.json").write_text(
        (src / "per_request_lifecycle_metrics.json").read_text())
    for k in (0, 1):
        doc = json.loads((src / f"stage_{k}_lifecycle_metrics.json").read_text())
        doc["load_summary"]["requested_rate"] = session_rate
        (tmp_path / f"stage_{k}_lifecycle_metrics.json").write_text(json.dumps(doc))
    (tmp_path / "summary_session_lifecycle_metrics.json").write_text(json.dumps(
        {"num_sessions": 6, "sessions_per_second": 3.1, "total_events": 19}))
    return tmp_path / "per_request_lifecycle_metrics.json"


def test_a_session_replays_requests_are_replayed_at_their_sends_not_as_a_capped_rate(
        tmp_path: Path) -> None:
    # its stage files' rate and concurrency count sessions: read as the concurrent load type,
    # the requests were a capped loop of 10 req/s and 2 slots with due times drawn again
    rec = read_recording(_session_run(tmp_path, 10.0))
    assert [(s.label, s.load, s.send_times) for s in rec.stages] == [
        ("stage 0: session replay, 2 concurrent sessions at 10 sessions/s", "open", "recorded"),
        ("stage 1: session replay, 4 concurrent sessions at 10 sessions/s", "open", "recorded")]
    sent = np.sort(rec.measured["arrival_s"].to_numpy())
    assert np.allclose(rec.workload.arrival_s, sent)  # due when sent: nothing drawn
    note = next(n for n in rec.notes if "trace session replay" in n)
    assert "summary_session_lifecycle_metrics.json beside the file" in note
    assert "kvbudget simulates no sessions" in note


def test_a_session_replay_without_a_session_rate_is_read_not_refused(tmp_path: Path) -> None:
    # no session_rate: the stage files say requested_rate 0.0, which was refused ('must be
    # > 0') though inference-perf writes it so
    rec = read_recording(_session_run(tmp_path, 0.0))
    assert rec.stages[0].label == "stage 0: session replay, 2 concurrent sessions"
