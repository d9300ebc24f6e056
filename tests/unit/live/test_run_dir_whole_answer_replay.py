"""A run directory made by a real replay against a fake server that hands over a whole answer
in one write: ``validate --records`` / ``calibrate --records`` of it find that answer by the
gaps between its chunks (``requests.part.jsonl``), where its TPOT misses it, as
``validate --url`` finds it in the same run (``ReplayOutcome.itl_mean_s``).

The fake (a threaded ``http.server`` on 127.0.0.1) writes every token of an answer in one
write, in four chunks (so the client's own time a chunk, which grows on a loaded machine,
stays far below the threshold over the answer's 199 tokens after the first). Request 0's stream then ends only once request 1 has reached the server (sequenced by
that event, never by a timer), half a second later on the replay's clock: its tokens came
microseconds apart, its TPOT (which counts the time to the stream's end) tens of times the
threshold. Request 1's stream ends in the same write, so its TPOT finds it too.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import ReplayConfig, ReplayMeta, replay
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.results.recorded_whole_answer import BURST_ITL_S, whole_answer_rows_of
from kvbudget.results.recordings import read_recording
from kvbudget.results.run_parts import REQUESTS_PART
from kvbudget.workloads import from_columns
from tests.unit.live.fake_models import ModelsHandler, serving

WAIT_S = 60.0  # a bound on the held stream's wait; it ends at once at teardown
HELD, OTHER = 200, 199  # max_tokens of request 0 (held) and of request 1


def _chunks(num_tokens: int) -> list[int]:
    """The tokens of each of an answer's four chunks (a server behind on its stream merges
    tokens into one chunk; the client counts them from the usage)."""
    return [num_tokens // 4] * 3 + [num_tokens - 3 * (num_tokens // 4)]


class _Handler(ModelsHandler):
    server: _Server

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        n = int(body["max_tokens"])
        if n == OTHER:
            self.server.other_arrived.set()
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        tokens = "".join("data: " + json.dumps({"id": "c", "object": "text_completion", "choices": [
            {"index": 0, "text": "a" * k, "finish_reason": "length" if i == 3 else None}],
            "usage": None}) + "\n\n" for i, k in enumerate(_chunks(n)))
        end = ("data: " + json.dumps({"id": "c", "object": "text_completion", "choices": [],
                                      "usage": {"prompt_tokens": len(body["prompt"]),
                                                "completion_tokens": n,
                                                "total_tokens": len(body["prompt"]) + n}})
               + "\n\ndata: [DONE]\n\n")
        if n == HELD:  # the whole answer in one write; the stream's end once request 1 came
            self.wfile.write(tokens.encode())
            self.wfile.flush()
            self.server.other_arrived.wait(WAIT_S)
            self.wfile.write(end.encode())
        else:
            self.wfile.write((tokens + end).encode())
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.other_arrived = threading.Event()


@pytest.fixture
def url() -> Iterator[str]:
    server = _Server()
    with serving(server, server.other_arrived.set) as at:
        yield at


def test_a_replays_run_directory_finds_the_answer_read_at_once_that_tpot_misses(
        url: str, tmp_path: Path) -> None:
    workload = from_columns([0.0, 0.5], [5, 5], [HELD, OTHER], tiers=["batch", "batch"])
    config = ReplayConfig(ServerTarget(url), tiers=(INTERACTIVE, BATCH), capacity_tokens=4096,
                          poll_period_s=0.05)
    out = tmp_path / "run"
    outcome = replay(workload, make_policy("unlimited"), config, out,
                     meta=ReplayMeta("t", "unlimited", {}, 1.0, 0, url))
    assert outcome.complete and (outcome.records["status"] == "completed").all()
    assert outcome.itl_mean_s is not None
    # validate --url finds both by their chunks' gaps; request 0's TPOT is over the threshold
    assert (outcome.itl_mean_s < BURST_ITL_S).all(), outcome.itl_mean_s
    assert outcome.records["tpot_s"][0] > BURST_ITL_S
    recording = read_recording(out)
    m = recording.measured
    np.testing.assert_allclose(m["itl_mean_s"], outcome.itl_mean_s)
    assert whole_answer_rows_of(m).tolist() == [True, True]
    assert np.isnan(recording.records()["tpot_s"]).all()
    said = [n for n in recording.notes if n.startswith("2 of 2 completed requests")]
    assert len(said) == 1 and "(their inter-token times; " in said[0]
    # the same run without its part file (as a copy of the parquet files only): TPOT alone
    bare = tmp_path / "bare"
    shutil.copytree(out, bare)
    (bare / REQUESTS_PART).unlink()
    assert whole_answer_rows_of(read_recording(bare).measured).tolist() == [False, True]
