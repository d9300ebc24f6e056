"""inference-perf's workers cap the requests in flight: ``load.num_workers x
load.worker_max_concurrency`` (``config.yaml`` beside the reports).

inference-perf 0.7.0 queues a ``constant`` or ``poisson`` stage's requests at once and each
worker process takes one only into a free slot of its ``worker_max_concurrency``
(``loadgen/load_generator.py``, ``Worker.loop``), so a stage whose server falls behind is an
open loop capped at that many in flight. It was read as an open loop at its rate: replayed at
the recorded sends, which the cap had already spread, with no cap, so a slower simulated server
held more requests than the tool ever had in flight and a faster one could not send sooner.
The fixture is a real run (``scripts/make_recording_fixtures.sh inference-perf-capped``: one
worker of 2 slots at 16 req/s against the CPU vLLM of the live tests).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
import yaml  # type: ignore[import-untyped]

from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.results.recorded_fields import in_flight_after
from kvbudget.results.recorded_inference_perf_load import due_ticks
from kvbudget.results.recordings import RecordedStage, read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.recorded_replay import stage_plans
from kvbudget.studies.validate import validate_recording

if TYPE_CHECKING:
    import pandas as pd

CAPPED = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "recordings"
    / "inference-perf-0.7.0"
    / "worker_capped"
)


def copy(tmp_path: Path) -> Path:
    shutil.copytree(CAPPED, tmp_path / "run")
    return tmp_path / "run" / "per_request_lifecycle_metrics.json"


def set_config(path: Path, **load: object) -> None:
    config_path = path.parent / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["load"].update(load)
    config_path.write_text(yaml.safe_dump(config))


def test_a_constant_rate_under_the_workers_slots_is_capped_at_them() -> None:
    path = CAPPED / "per_request_lifecycle_metrics.json"
    config = yaml.safe_load((CAPPED / "config.yaml").read_text())["load"]
    cap = config["num_workers"] * config["worker_max_concurrency"]
    own = json.loads((CAPPED / "stage_0_lifecycle_metrics.json").read_text())["load_summary"]
    doc = json.loads(path.read_text())
    starts = np.array([r["start_time"] for r in doc])
    ends = np.array([r["end_time"] for r in doc])
    order = np.argsort(starts)
    # the run: the slots bound (every one of them busy at a send), more requests than slots
    assert in_flight_after(starts[order], starts, ends).max() == cap == 2
    assert len(doc) == own["count"] > cap
    rec = read_recording(path)
    label = f"stage 0: {own['requested_rate']:g} req/s, at most {cap} in flight"
    assert rec.stages == (
        RecordedStage(label, "capped", own["requested_rate"], cap, send_times="redrawn"),
    )
    assert (rec.measured["stage"] == label).sum() == own["count"]
    said = " ".join(rec.notes)
    assert (
        "workers (1 worker process, load.num_workers) each take a request from its queue "
        "only into one of their own load.worker_max_concurrency=2 slots" in said
    )
    assert (
        f"{label}: inference-perf's constant load type sends its 16 requests at 16 req/s "
        "(due over 1 s), each when one of 2 slots is free" in said
    )
    # due no later than sent, over the stage's num_requests / rate from its first send
    due = rec.workload.arrival_s
    sent = rec.measured.set_index("request_id").loc[rec.workload.request_id, "arrival_s"]
    assert due.min() == pytest.approx(sent.min())
    assert due.max() - due.min() <= own["count"] / own["requested_rate"] + 1e-9
    # docs/recordings.md names the stage as this run reads
    docs = Path(__file__).resolve().parents[3] / "docs" / "recordings.md"
    assert f"(the stage `{label}`)" in " ".join(docs.read_text().split())
    (plan,) = stage_plans(rec) or []
    assert plan.loop is not None
    assert (plan.loop.num_users, plan.loop.not_before_arrival) == (cap, True)


def test_a_stage_of_no_more_requests_than_the_slots_stays_an_open_loop(tmp_path: Path) -> None:
    path = copy(tmp_path)
    set_config(path, worker_max_concurrency=100)  # 100 slots for 16 requests: cannot bind
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("stage 0: 16 req/s", "open", 16.0),)
    assert not any("worker_max_concurrency" in n for n in rec.notes)
    (path.parent / "config.yaml").unlink()  # the cap unknown: the CPU count of its machine
    assert read_recording(path).stages == rec.stages


def test_a_poisson_stage_under_the_slots_draws_its_due_times_as_poisson(tmp_path: Path) -> None:
    path = copy(tmp_path)
    set_config(path, type="poisson")
    rec = read_recording(path)
    assert rec.stages[0].load == "capped" and rec.stages[0].max_concurrency == 2
    said = " ".join(rec.notes)
    assert "replayed as its poisson rate capped at 2 in flight" in said
    assert (
        "inference-perf's poisson load type sends its 16 requests at 16 req/s (a Poisson "
        "count of them each second)" in said
    )


def test_sessions_pinned_to_workers_are_said_to_be_pooled(tmp_path: Path) -> None:
    path = copy(tmp_path)
    config_path = path.parent / "config.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["data"]["shared_prefix"] = {"enable_multi_turn_chat": True}
    config_path.write_text(yaml.safe_dump(config))
    said = " ".join(read_recording(path).notes)
    assert (
        "(its sessions are pinned to workers, each with its own slots: the replay pools "
        "them)" in said
    )


def test_due_ticks_draw_as_inference_perfs_timers() -> None:
    rng = np.random.default_rng(0)
    constant = due_ticks("constant", rng, 40, 8.0)  # ConstantLoadTimer: spans 40 / 8 s
    assert len(constant) == 40 and (np.diff(constant) > 0).all()
    assert constant[-1] == pytest.approx(5.0)
    poisson = due_ticks("poisson", rng, 40, 8.0)  # PoissonLoadTimer: a count each second
    assert len(poisson) == 40 and (np.diff(poisson) >= 0).all()
    seconds = np.floor(poisson - 1e-12).astype(int)
    # each second's draws fill it: its last one at its end, as ConstantLoadTimer(n, 1) ends
    for s in np.unique(seconds)[:-1]:
        assert poisson[seconds == s].max() == pytest.approx(s + 1.0)


TRACE = CAPPED.parent / "trace_replay"
CONFIG = SimConfig(
    engine=EngineConfig(
        num_gpu_blocks=100, block_size=16, max_num_seqs=8, max_num_batched_tokens=2048
    )
)


def test_a_trace_replay_stage_is_no_rate_but_its_traces_timestamps() -> None:
    """load.type trace_replay sends a stage's requests at its trace's timestamps
    (inference-perf 0.7.0 ``loadgen/load_timer.py``, ``TraceReplayLoadTimer``); its stage file
    still reports the stage's ``rate`` as ``requested_rate``, and the stage was read as an open
    loop at 12 req/s, where the real run (``make_recording_fixtures.sh inference-perf-trace``)
    sent its 12 requests over 2.1 s."""
    path = TRACE / "per_request_lifecycle_metrics.json"
    own = json.loads((TRACE / "stage_0_lifecycle_metrics.json").read_text())["load_summary"]
    config = yaml.safe_load((TRACE / "config.yaml").read_text())["load"]
    assert (config["type"], own["requested_rate"], own["count"]) == ("trace_replay", 12.0, 12)
    starts = np.array([r["start_time"] for r in json.loads(path.read_text())])
    assert starts.max() - starts.min() > 2.0  # the trace's 2.1 s, not 12 at 12 req/s
    rec = read_recording(path)
    assert rec.stages == (RecordedStage("stage 0: trace replay", "open", None, None),)
    assert any(
        n.startswith(
            "stage 0: trace replay: load.type trace_replay (the run's config.yaml): "
            "inference-perf sent its requests at the timestamps of its trace ("
        )
        and "not at the stage's rate (12 req/s)" in n
        for n in rec.notes
    )
    docs = Path(__file__).resolve().parents[3] / "docs" / "recordings.md"
    assert "its stages are `stage 0: trace replay`" in " ".join(docs.read_text().split())
    # replayed at the recorded sends
    assert np.allclose(np.sort(rec.workload.arrival_s), np.sort(starts - starts.min()))


def _simulated_peak(records: pd.DataFrame) -> int:
    """The most simulated requests in flight at once, counted at each send (plain Python)."""
    sent, end = records["arrival_s"].tolist(), records["finished_s"].tolist()
    return max(sum(1 for s, e in zip(sent, end, strict=True) if s <= t < e) for t in sent)


def test_a_trace_replay_over_its_workers_cap_says_so(tmp_path: Path) -> None:
    """A trace_replay stage's requests are queued as a rate's are, each due at its trace
    timestamp (inference-perf 0.7.0 ``loadgen/load_generator.py`` ``run_stage``:
    ``request_queue.put(..., next(time_generator))``, ``TraceReplayLoadTimer``), and the
    workers take them into the same slots: at most ``num_workers x worker_max_concurrency``
    in flight. The report keeps no due times, so the replay sends at the recorded ones, with
    no cap; where its simulated server held more than the cap, the validation says so, naming
    the cap. The real run (cap 2 x 100) with its config set to 1 worker of 1 slot here."""
    shutil.copytree(TRACE, tmp_path / "run")
    path = tmp_path / "run" / "per_request_lifecycle_metrics.json"
    slow = LinearCostModel(
        intercept_s=0.5, per_prefill_token_s=0.0, per_decode_seq_s=0.0, per_context_token_s=0.0
    )
    wide = validate_recording(
        read_recording(path),
        CONFIG,
        cost_model=slow,
        frontend_overhead_s=0.0,
        model_chosen=True,
    )
    peak = _simulated_peak(wide.simulated.records)
    assert 1 < peak < 200  # over a cap of 1, under the run's own 200
    assert not any("workers' cap" in s for s in wide.said)
    set_config(path, num_workers=1, worker_max_concurrency=1)
    rec = read_recording(path)
    assert rec.config["trace_replay_worker_cap"] == {"stage 0: trace replay": 1}
    narrow = validate_recording(
        rec, CONFIG, cost_model=slow, frontend_overhead_s=0.0, model_chosen=True
    )
    line = next(s for s in narrow.said if "workers' cap" in s)
    assert line.startswith(
        "inference-perf's workers held at most load.num_workers x "
        "load.worker_max_concurrency requests in flight"
    )
    assert f"stage 'stage 0: trace replay': up to {peak} in flight, its workers' cap 1" in line
    assert "\n" not in line
