"""``kvbudget replay --records FILE``: a load tool's recording replayed live as its tool sent
it. The live replay could send a closed loop of conversations by the simulator's own turn
order, but only from Python: ``replay`` took a trace alone (no stage's loop, no conversations)
and ``validate --records`` takes no ``--url``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.results.run_result import read_run
from kvbudget.studies.recorded_replay import pick_stage
from tests.unit.live.test_backends_live_gateway import Fake, _cli, fake  # noqa: F401

REPO = Path(__file__).resolve().parents[3]
RECORDINGS = REPO / "tests" / "fixtures" / "recordings"


def test_a_recordings_conversations_are_replayed_as_its_tool_sent_them(fake: Fake,  # noqa: F811
                                                                       tmp_path: Path) -> None:
    fake.state.token_s = 0.001
    path = RECORDINGS / "guidellm-0.8.1" / "turns3_concurrent2.json"
    out = tmp_path / "run"
    code, stdout, stderr = _cli("replay", "--url", fake.url, "--records", str(path), "--out",
                                str(out), "--poll-period", "0.05")
    assert code == 0, stderr
    assert f"wrote {out}/requests.parquet" in stdout
    said = " ".join(stderr.split())
    assert f"replaying 12 requests of {path} as recorded: " in said, stderr
    run = read_run(out)
    assert len(run.records) == 12 and (run.records["status"] == "completed").all()
    assert any("8 requests are later turns of conversations" in a
               for a in run.summary["assumed"]), run.summary["assumed"]
    # at most the recorded 2 streams at once (the stage's closed loop, not an open loop)
    arrival, finished = run.records["arrival_s"].to_numpy(), run.records["finished_s"].to_numpy()
    assert max(int(((arrival <= t) & (finished > t)).sum()) for t in arrival) <= 2
    # the same prompt lengths as the recording's requests
    rec = read_recording(path)
    assert sorted(run.records["prompt_tokens"]) == sorted(rec.workload.prompt_tokens.tolist())


def test_replay_records_refuses_what_would_go_unused(fake: Fake, tmp_path: Path  # noqa: F811
                                                     ) -> None:
    path = RECORDINGS / "guidellm-0.8.1" / "turns3_concurrent2.json"
    out = str(tmp_path / "run")
    code, _, stderr = _cli("replay", "--url", fake.url, "--out", out)
    assert code == 2 and "pass --trace FILE or --records FILE" in stderr
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(path), "--out", out,
                           "--users", "4")
    assert code == 2 and "--users/--think-time-s: with --records the recording's own load" in \
        " ".join(stderr.split()), stderr
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(path), "--out", out,
                           "--time-scale", "0.5")
    assert code == 2 and "--time-scale: with --records" in " ".join(stderr.split()), stderr
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(path), "--out", out,
                           "--stage", "nope")
    assert code == 2 and "--stage 'nope' names no stage; the recording's stages are 0 = 0: " \
        "concurrent x2" in " ".join(stderr.split()), stderr
    # a sweep's stages each ran their own load: one is named, and replayed as it ran
    sweep = RECORDINGS / "guidellm-0.8.1" / "sweep.json"
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(sweep), "--out", out)
    said = " ".join(stderr.split())
    assert code == 2 and "3 stages (0: synchronous, 1: throughput x512, 2: constant" in said \
        and "pass --stage LABEL (or its index, or its name) to replay one" in said, stderr
    fake.state.token_s = 0.001
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(sweep), "--stage",
                           "0: synchronous", "--out", out, "--poll-period", "0.05")
    assert code == 0, stderr
    assert "replaying 2 requests of" in stderr and "closed loop, 1 user" in " ".join(
        stderr.split()), stderr
    assert len(read_run(Path(out)).records) == 2


@pytest.mark.parametrize("given", ["2", "constant", "constant 12.9674 req/s x512",
                                   "constant@12.97", "2: constant 12.9674 req/s x512"])
def test_a_stage_is_named_by_its_label_index_or_name(fake: Fake, tmp_path: Path,  # noqa: F811
                                                     given: str) -> None:
    # a sweep's labels are long to type: its index, the label's part after the colon, that
    # part's first word or GuideLLM's own name of the strategy pick the one stage they name;
    # the capped stage (a constant rate under GuideLLM's cap of 512) is replayed as it ran
    fake.state.token_s = 0.001
    sweep = RECORDINGS / "guidellm-0.8.1" / "sweep.json"
    out = tmp_path / "run"
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(sweep), "--stage",
                           given, "--out", str(out), "--poll-period", "0.05")
    said = " ".join(stderr.split())
    assert code == 0, stderr
    assert "replaying 3 requests of" in said and "stage '2: constant 12.9674 req/s x512' as " \
        "recorded: open loop at the recorded send times, at most 512 in flight" in said, said
    run = read_run(out)
    rec = read_recording(sweep)
    rows = rec.measured["stage"].astype(str) == "2: constant 12.9674 req/s x512"
    recorded = rec.workload.arrival_s[rows.to_numpy()]
    # each sent no sooner than its recorded send, from the stage's first
    sent = np.sort(run.records["arrival_s"].to_numpy())
    assert len(sent) == 3 and (sent >= recorded - recorded.min() - 1e-9).all()


def test_an_unknown_or_ambiguous_stage_is_refused_listing_the_labels() -> None:
    sweep = read_recording(RECORDINGS / "guidellm-0.8.1" / "sweep.json")
    assert pick_stage(sweep, "synchronous").label == "0: synchronous"
    assert pick_stage(sweep, " throughput@512 ").label == "1: throughput x512"
    assert pick_stage(sweep, "1").label == "1: throughput x512"
    with pytest.raises(ValueError, match=r"--stage '3' names no stage; the recording's stages "
                       r"are 0 = 0: synchronous; 1 = 1: throughput x512; 2 = 2: constant"):
        pick_stage(sweep, "3")
    # two constant-rate stages: "constant" names both, refused; the index or rate picks one
    two = replace(sweep, stages=(*sweep.stages, replace(sweep.stages[2], label="3: constant "
                                                         "20 req/s x512", request_rate=20.0)))
    with pytest.raises(ValueError, match=r"--stage 'constant' names 2 stages \(2: constant "
                       r"12.9674 req/s x512, 3: constant 20 req/s x512\): pass one's label or "
                       r"index; the recording's stages are 0 = 0: synchronous"):
        pick_stage(two, "constant")
    assert pick_stage(two, "constant@20.00").label == "3: constant 20 req/s x512"
    # a label's number that is no word is no name: vllm bench's appended lines
    append = read_recording(RECORDINGS / "vllm-bench-0.32.0" / "append.jsonl")
    assert pick_stage(append, "1").label == "line 2: concurrency 4"
    assert pick_stage(append, "8 req/s, concurrency 2").label == "line 1: 8 req/s, concurrency 2"
    with pytest.raises(ValueError, match="'8' names no stage"):
        pick_stage(append, "8")


@pytest.mark.parametrize(("fixture", "num", "slots"), [
    ("capped6c3_constant.jsonl", 20, 3), ("multiturn3_delay300_rate4c2.jsonl", 12, 2)])
def test_aiperfs_capped_rate_is_replayed_at_its_ticks(fake: Fake, tmp_path: Path,  # noqa: F811
                                                      fixture: str, num: int,
                                                      slots: int) -> None:
    # AIPerf 0.13.0 --request-rate R --concurrency C (and its multi-turn sessions at 4 req/s
    # under 2 session slots): refused before, now sent at the ticks (its recorded issue
    # times, then its rate's), at most C requests (sessions) open at once
    fake.state.token_s = 0.001
    path = RECORDINGS / "aiperf-0.13.0" / fixture
    out = tmp_path / "run"
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(path), "--out",
                           str(out), "--poll-period", "0.05")
    said = " ".join(stderr.split())
    assert code == 0, said
    assert f"replaying {num} requests of" in said and f"at most {slots} in flight, each sent " \
        "at a tick of its constant schedule" in said, said
    rec = read_recording(path)
    issued = np.sort(rec.workload.arrival_s - rec.workload.arrival_s.min())
    sent = np.sort(read_run(out).records["arrival_s"].to_numpy())
    assert len(sent) == num and fake.state.max_active <= slots
    assert (sent >= issued - 1e-9).all()  # none before its tick
