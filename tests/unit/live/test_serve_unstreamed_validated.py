"""A ``kvbudget serve`` directory whose clients did not all stream: a non-streamed answer
comes whole, so its row has its E2E but no TTFT (docs/serve.md: its SLO is judged on its E2E).
``validate --records`` left such requests out of every comparison, the E2E one too (a walk saw
24 completed, 3 compared), though their E2E is measured as a streamed request's is. Built with
the gateway's own recorder (:class:`~kvbudget.live.serve_records.ServeRecorder`), as
test_serve_records_replayed.py builds its directory of whole answers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.live.serve_records import Outcome, ServeRecorder, request_row
from kvbudget.policies.request import Request as GatewayRequest
from kvbudget.results.recordings import read_recording
from tests.unit.live.test_serve_records_replayed import TIERS

pytestmark = pytest.mark.timeout(120)
GAP_S = 0.02  # a streamed answer's tokens 20 ms apart, as a decode of 50 tokens/s


def _serve_dir(root: Path, streams: tuple[bool, ...]) -> Path:
    """A serve run directory of one completed request of 8 output tokens each second, streamed
    (its TTFT 0.1 s and its gaps) or not (its E2E only, as the gateway writes one)."""
    recorder = ServeRecorder(root, tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={"executor": "serve"})
    recorder.sample({"time_s": 0.0, "kv_used_tokens": 0, "kv_reserved_tokens": 0,
                     "kv_capacity_tokens": 100_000, "num_running": 0, "num_waiting": 0,
                     "num_preemptions": 0}, 0.0)
    for i, stream in enumerate(streams):
        arrival = 1.0 + i
        request = GatewayRequest(request_id=i, tier="chat", arrival_s=arrival,
                                 prompt_tokens=5, max_output_tokens=8)
        end = arrival + 0.1 + 7 * GAP_S
        outcome = Outcome("completed", "", 8, arrival, arrival + 0.1 if stream else math.nan,
                          end, 13, token_gaps_s=(GAP_S,) * 7 if stream else ())
        recorder.write(request_row(request, outcome), end)
    run_dir = recorder.close(float(len(streams) + 1))
    assert run_dir is not None
    return run_dir


def test_validate_compares_the_e2e_of_requests_not_streamed(tmp_path: Path) -> None:
    run_dir = _serve_dir(tmp_path / "runs", (True, False, True, False, False))
    recording = read_recording(run_dir)
    assert recording.num_usable == 5
    records = recording.records()
    assert int(records["e2e_s"].notna().sum()) == 5  # every completed request's E2E
    assert int(records["ttft_s"].notna().sum()) == 2  # the streamed ones' TTFT only
    assert int(records["tpot_s"].notna().sum()) == 2
    res = CliRunner().invoke(app, ["validate", "--records", str(run_dir), "--gpu", "H100-80GB",
                                   "--model", "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    assert "5 requests simulated, 5 measured" in said, said
    assert "3 of the 5 completed requests were not streamed (no TTFT: kvbudget serve sees no " \
        "first token of a whole answer): read as the gateway got each, the whole answer at its " \
        "end, their E2E is compared, not their TTFT nor TPOT" in said, said
    # the line under the table names the gateway as the reader, no client nor proxy
    assert "TTFT and TPOT: 3 of the 5 compared requests got their whole answer in one read " \
        "(tokens after the first under 100 us apart: see the note), so their measured TTFT and " \
        "TPOT are the gateway's read, not the server's times" in said, said
    report = json.loads((tmp_path / "v" / "validation.json").read_text())
    pairs = pd.DataFrame(report["per_request"]).set_index("metric")["num_pairs"]
    assert (pairs["e2e_s"], pairs["ttft_s"], pairs["tpot_s"]) == (5, 2, 2)
