"""An inference-perf run not streamed (``api.streaming: false``, inference-perf 0.7.0's
default): its report keeps no ``output_token_times``, so no request has a first-token time.
kvbudget refused the file, "no request has a measured TTFT and E2E with a completed status
(... missing ttft 16)", naming no cause; now each request is read as its client saw it, the
whole answer at its end: E2E compared, TTFT and TPOT not, and a note says why. Fixture:
``scripts/make_recording_fixtures.sh inference-perf-unstreamed`` (8 req/s for 2 s, 32 prompt
and 16 output tokens, against the CPU vLLM of the live tests)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording

RUN = (Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "inference-perf-0.7.0"
       / "unstreamed")


def test_an_unstreamed_run_reads_to_its_own_summary() -> None:
    rec = read_recording(RUN / "per_request_lifecycle_metrics.json")
    summary = json.loads((RUN / "summary_lifecycle_metrics.json").read_text())["successes"]
    m = rec.measured
    assert len(m) == summary["count"] == 16
    assert rec.workload.output_tokens.tolist() == [16] * 16  # the server's usage
    assert float(m["e2e_s"].mean()) == pytest.approx(
        summary["latency"]["request_latency"]["mean"], rel=1e-9)
    assert np.allclose(m["ttft_s"], m["e2e_s"])  # the whole answer at its end
    assert any(n.startswith('16 requests not streamed ("stream": false in the body')
               for n in rec.notes)


def test_validate_compares_its_e2e_only(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", "--records",
                                      str(RUN / "per_request_lifecycle_metrics.json"),
                                      "--model", "Llama-3.2-1B", "--out", str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    rows = {r["metric"]: r for r in json.loads(
        (tmp_path / "v" / "validation.json").read_text())["metrics"] if r["stage"] == "all"}
    assert rows["ttft_mean_s"]["measured"] is None
    assert rows["e2e_mean_s"]["measured"] == pytest.approx(0.2354, abs=1e-3)


def test_a_streamed_run_keeps_its_first_token_times() -> None:
    rec = read_recording(RUN.parent / "per_request_lifecycle_metrics.json")
    assert not any('not streamed ("stream": false' in n for n in rec.notes)
    assert (rec.measured["ttft_s"] < rec.measured["e2e_s"]).all()
