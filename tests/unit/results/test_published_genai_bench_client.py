"""How a genai-bench run's client sent, as its ``cmd`` says: not streamed
(``--disable-streaming``) or open-loop (``--execution-engine async --qps-level R``), options of
github.com/basetenlabs/genai-bench (0.0.2).

Published: ``baseten_TRT-LLM_text-to-text_gpt-oss-120b_20260106_003622/`` of that repository at
e3109cf (gpt-oss-120b on Baseten's TRT-LLM, ``D(8000,700)`` at concurrency 4,
``--disable-streaming True``; excerpt: its first 13 requests, 3 of them failed): every TTFT is
genai-bench's placeholder, 1 ms after the send, and kvbudget compared its simulated TTFT with it
("ttft_mean_s 0.414 0.001 +41342.1%") and its TPOT with (E2E - 1 ms) / 699, the prefill in it.
Hand-made: the fork's open-loop runner stores its --qps-level in num_concurrency; read as such a
2 req/s open loop was replayed as a closed loop of 2 users."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from tests.conftest import unwrapped
from tests.unit.results.excerpts import excerpt_copy

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
EXCERPT = FIXTURES / "published" / "genai-bench-baseten-gpt-oss-120b-nonstreamed-excerpt"
CLOSED = FIXTURES / "genai-bench-0.0.5" / "closed"


def test_an_unstreamed_runs_placeholder_ttft_is_not_measured(tmp_path: Path) -> None:
    rec = read_recording(excerpt_copy(EXCERPT, tmp_path))
    measured = rec.measured
    ok = measured["usable"].to_numpy(dtype=bool)
    assert ok.sum() == 10 and rec.counts["num_failed"] == 3
    # read as the client saw it: the whole answer at its E2E, never the 1 ms placeholder
    assert np.allclose(measured["ttft_s"][ok], measured["e2e_s"][ok])
    assert any(n.startswith("not streamed (--disable-streaming in cmd)") for n in rec.notes)
    assert any(n.startswith("times: genai-bench's, from time.monotonic() before each POST to "
                            "the end of the response (E2E)") for n in rec.notes)


def test_validate_compares_no_ttft_of_an_unstreamed_run(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["validate", "--records", str(excerpt_copy(EXCERPT, tmp_path)),
                                      "--out", str(tmp_path / "v")])
    assert result.exit_code == 0, result.output
    rows = {r["metric"]: r for r in json.loads(
        (tmp_path / "v" / "validation.json").read_text())["metrics"] if r["stage"] == "all"}
    assert rows["ttft_mean_s"]["measured"] is None and rows["tpot_mean_s"]["measured"] is None
    assert rows["e2e_mean_s"]["measured"] == pytest.approx(2.13, abs=0.01)


def test_a_streamed_run_keeps_its_ttft() -> None:
    rec = read_recording(CLOSED)
    assert not any(n.startswith("not streamed") for n in rec.notes)
    assert (rec.measured["ttft_s"] < rec.measured["e2e_s"]).all()


def with_cmd(tmp_path: Path, extra: str) -> Path:
    """The closed-loop run copied under ``tmp_path``, its recorded command given ``extra``
    flags; returns its ``experiment_metadata.json``."""
    shutil.copytree(CLOSED, tmp_path / "run")
    path = tmp_path / "run" / "experiment_metadata.json"
    doc = json.loads(path.read_text())
    doc["cmd"] += extra
    path.write_text(json.dumps(doc))
    return path


def test_an_open_loop_run_is_refused_not_replayed_closed(tmp_path: Path) -> None:
    path = with_cmd(tmp_path, " --execution-engine async --qps-level 2.0 --distribution exponential")
    with pytest.raises(TraceError, match=r"ran open-loop at --qps-level 2\.0 .* closed loop, "
                                         "another load"):
        read_recording(path)
    result = CliRunner().invoke(app, ["validate", "--records", str(path),
                                      "--out", str(tmp_path / "v")])
    assert result.exit_code == 2
    assert "--qps-level 2.0" in " ".join(unwrapped(result.stderr))


def test_an_async_closed_loop_is_said_as_its_runner(tmp_path: Path) -> None:
    # basetenlabs/genai-bench parallel_feature_branch/ (GLM-4.6, --execution-engine async
    # --num-concurrency 1): its closed loop is the fork's async runner, not Locust
    # (async_runner/closed_loop.py: target_concurrency tasks started at once, each replaced
    # when it returns)
    path = with_cmd(tmp_path, " --execution-engine async")
    said = [n for n in read_recording(path).notes if n.startswith("no send time")]
    assert "genai-bench's async runner, --execution-engine async" in said[0]
    assert "Locust" not in said[0]
    assert "Locust, wait_time constant(0)" in next(
        n for n in read_recording(CLOSED).notes if n.startswith("no send time"))


def test_a_cut_down_run_file_is_refused() -> None:
    # the excerpt lists 13 of the 128 requests its aggregated_metrics count (it was read with
    # a note, a smaller run than the server saw)
    with pytest.raises(TraceError) as info:
        read_recording(EXCERPT)
    assert str(info.value) == (
        f"{EXCERPT}/D8000_700_text-to-text_openai_gpt-oss-120b_num_concurrency_4_time_66s.json: "
        "field 'individual_request_metrics': lists 13 requests, but its own count says 128 "
        "(aggregated_metrics.num_requests): requests missing (a cut or partly copied file?); "
        "trimmed on purpose, it reads as a run of the requests it holds once "
        "aggregated_metrics.num_requests is set to 13")
    # genai-bench's own files list every request they count
    assert read_recording(CLOSED).counts["num_rows_read"] == 23
