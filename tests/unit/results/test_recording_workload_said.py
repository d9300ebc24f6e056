"""A records file's measured columns (``ttft_s``, ``e2e_s``) are read by the recording: a run of
its workload (``validate_recording``'s simulated run, its summary, its notebook lines) does not
say them "not read", as the trace loader's warning did; the columns really left unread still
are said."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

import kvbudget as kb
from tests.unit.studies.test_calibrate_records import ENGINE, TRUTH, recorded_run


def test_a_recordings_workload_does_not_call_its_measured_columns_unread(tmp_path: Path) -> None:
    path = recorded_run(tmp_path / "r.csv", n=20)
    frame = pd.read_csv(path)
    frame["queue_s"] = 0.0  # a column neither the recording nor the trace loader reads
    frame.to_csv(path, index=False)
    rec = kb.read_recording(path)
    said = rec.workload.meta["warnings"]
    assert isinstance(said, tuple) and len(said) == 1
    assert said[0].startswith("columns not read: queue_s (the generic format reads")
    assert rec.notes[0] == said[0]  # the recording's note, said once in its repr
    assert repr(rec).count("columns not read") == 1
    run = kb.validate_recording(rec, kb.SimConfig(engine=ENGINE), cost_model=TRUTH).simulated
    assert run.summary["workload"]["warnings"] == [said[0]]
    assert "ttft_s" not in repr(run) and "e2e_s" not in repr(run)
