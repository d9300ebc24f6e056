"""``kvbudget replay --records FILE``: a load tool's recording replayed live as its tool sent
it. The live replay could send a closed loop of conversations by the simulator's own turn
order, but only from Python: ``replay`` took a trace alone (no stage's loop, no conversations)
and ``validate --records`` takes no ``--url``."""

from __future__ import annotations

from pathlib import Path

from kvbudget.results.recordings import read_recording
from kvbudget.results.run_result import read_run
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
    assert code == 2 and "--stage 'nope': the recording's stages are" in " ".join(
        stderr.split()), stderr
    # a sweep's stages each ran their own load: one is named, and replayed as it ran
    sweep = RECORDINGS / "guidellm-0.8.1" / "sweep.json"
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(sweep), "--out", out)
    assert code == 2 and "3 stages (0: synchronous, 1: throughput x512, 2: constant" in " ".join(
        stderr.split()) and "pass --stage LABEL to replay one" in " ".join(stderr.split()), stderr
    fake.state.token_s = 0.001
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(sweep), "--stage",
                           "0: synchronous", "--out", out, "--poll-period", "0.05")
    assert code == 0, stderr
    assert "replaying 2 requests of" in stderr and "closed loop, 1 user" in " ".join(
        stderr.split()), stderr
    assert len(read_run(Path(out)).records) == 2
    # its capped stage (GuideLLM's constant rate under a concurrency cap) is not replayed live
    code, _, stderr = _cli("replay", "--url", fake.url, "--records", str(sweep), "--stage",
                           "2: constant 12.9674 req/s x512", "--out", str(tmp_path / "run2"))
    assert code == 2 and "a capped open loop" in " ".join(stderr.split()), stderr
