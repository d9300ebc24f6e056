"""``kvbudget validate --records`` and ``calibrate --records`` of NVIDIA Dynamo's per-request
trace (``tests/fixtures/recordings/dynamo-1.6.1/``, ``scripts/make_recording_fixtures.sh
dynamo``): the measured figures they print and write are the file's own, computed here from its
lines (``request_received_ms``, ``ttft_ms``, ``total_time_ms``, ``output_tokens``)."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app

TRACE = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "recordings"
    / "dynamo-1.6.1"
    / "trace_chat_completions_c124.jsonl"
)
MODEL = ("--model", "Llama-3.1-8B", "--gpu", "H100-80GB")


def run(*args: Any) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def requests() -> list[dict[str, Any]]:
    return [json.loads(line)["event"]["request"] for line in TRACE.read_text().splitlines()]


def by_hand() -> dict[str, float]:
    rs = requests()
    start_s = min(r["request_received_ms"] for r in rs) / 1000
    end_s = max(r["request_received_ms"] / 1000 + r["total_time_ms"] / 1000 for r in rs)
    return {
        "ttft_mean_s": statistics.mean(r["ttft_ms"] for r in rs) / 1000,
        "ttft_p50_s": statistics.median(r["ttft_ms"] for r in rs) / 1000,
        "e2e_mean_s": statistics.mean(r["total_time_ms"] for r in rs) / 1000,
        "e2e_p50_s": statistics.median(r["total_time_ms"] for r in rs) / 1000,
        "tpot_mean_s": statistics.mean(
            (r["total_time_ms"] - r["ttft_ms"]) / (r["output_tokens"] - 1) for r in rs
        )
        / 1000,
        # completed output tokens over first arrival to last finish
        "output_tokens_per_s": sum(r["output_tokens"] for r in rs) / (end_s - start_s),
        "completed": len(rs),
    }


def test_validate_compares_against_the_traces_own_figures(tmp_path: Path) -> None:
    code, stdout, stderr = run("validate", "--records", TRACE, *MODEL, "--out", tmp_path / "v")
    assert code == 0, stderr
    said = " ".join((stdout + stderr).split())
    assert "(NVIDIA Dynamo request trace): 48 requests simulated, 48 measured" in said, said
    assert "note: holds, per request, the frontend's arrival (request_received_ms)" in said
    measured = {
        m["metric"]: m["measured"]
        for m in json.loads((tmp_path / "v" / "validation.json").read_text())["metrics"]
    }
    hand = by_hand()
    for metric, value in hand.items():
        assert measured[metric] == pytest.approx(value, rel=1e-6), metric
    # the printed table: the measured column, rounded to 3 significant figures
    row = next(ln.split() for ln in stdout.splitlines() if ln.startswith("ttft_mean_s"))
    assert float(row[2]) == pytest.approx(hand["ttft_mean_s"], rel=5e-3)


def test_calibrate_fits_to_the_trace_and_bounds_its_front_end_by_its_shortest_ttft(
    tmp_path: Path,
) -> None:
    """The fitted front-end term is bounded by the shortest measured TTFT (a TTFT is the term
    plus at least one engine step): the file's smallest ttft_ms."""
    out = tmp_path / "cost.json"
    code, stdout, stderr = run(
        "calibrate", "--records", TRACE, *MODEL, "--max-evals", "4", "--out", out
    )
    assert code == 0, stderr
    cal = json.loads(out.read_text())["calibration"]
    assert cal["counts"]["num_measured"] == 48 and cal["counts"]["num_failed"] == 0
    assert cal["records_format"] == "dynamo-trace"
    shortest_s = min(r["ttft_ms"] for r in requests()) / 1000
    assert cal["first_token"]["fixed_part_bounds_s"] == pytest.approx([0.0, shortest_s])
    said = " ".join(stdout.split())
    assert "48 requests simulated, 48 measured" in said, said
    row = next(ln.split() for ln in stdout.splitlines() if ln.startswith("e2e_p50_s"))
    assert float(row[-2]) == pytest.approx(by_hand()["e2e_p50_s"], rel=5e-3)


def test_validate_simulates_the_traces_shared_prefixes(tmp_path: Path) -> None:
    """Requests whose replay.input_sequence_hashes begin alike share those blocks in the
    simulated prefix cache; the real trace's prompts (each its own one partial block) share
    none."""
    docs = [json.loads(line) for line in TRACE.read_text().splitlines()]
    for k, d in enumerate(docs):
        req = d["event"]["request"]
        req["input_tokens"] = req["replay"]["input_length"] = 200
        req["replay"]["input_sequence_hashes"] = [11, 12, 10 * k + 100, 10 * k + 101]
    shared = tmp_path / "shared.jsonl"
    shared.write_text("".join(json.dumps(d) + "\n" for d in docs))
    hits = {}
    for name, path in (("real", TRACE), ("shared", shared)):
        code, _, stderr = run("validate", "--records", path, *MODEL, "--out", tmp_path / name)
        assert code == 0, stderr
        summary = json.loads((tmp_path / name / "sim" / "summary.json").read_text())
        hits[name] = summary["engine"]["prefix_cache_hit_tokens"]
    assert hits["real"] == 0
    # the first request prefills the two shared 64-token blocks; at most 47 others reuse them
    assert 0 < hits["shared"] <= 128 * (len(docs) - 1), hits


SHARED = TRACE.with_name("trace_two_workers_shared_prefix.jsonl")


def test_two_workers_and_their_shared_system_prompt_are_simulated(tmp_path: Path) -> None:
    """The trace of Dynamo's frontend in front of a mocker of two engines (--num-workers 2),
    24 chats beginning with one system prompt: simulated on two replicas behind round robin
    (the frontend's default router, said as assumed), the prompt's shared leading blocks served
    from the simulated prefix cache; the workers' own cache hits (cached_tokens) said."""
    docs = [json.loads(line)["event"]["request"] for line in SHARED.read_text().splitlines()]
    engines = {d["worker"]["decode_worker_id"] for d in docs}
    assert len(engines) == 2 and all(
        d["worker"]["prefill_worker_id"] == d["worker"]["decode_worker_id"] for d in docs
    )
    code, stdout, stderr = run("validate", "--records", SHARED, *MODEL, "--out", tmp_path / "v")
    assert code == 0, stderr
    said = " ".join((stdout + stderr).split())
    assert "2 replicas (round_robin)" in said, said
    assert (
        "simulated as 2 replicas behind round_robin (ASSUMED: Dynamo's frontend's default" in said
    )
    cached = sum(d["cached_tokens"] for d in docs)
    prompt = sum(d["input_tokens"] for d in docs)
    assert f"the server served {cached:,} of the {prompt:,} prompt tokens" in said, said
    summary = json.loads((tmp_path / "v" / "sim" / "summary.json").read_text())
    # each replica prefills the shared blocks once; the other requests find them: at least
    # the 64-token blocks every prompt begins with, less the engine's last-token recompute
    shared_blocks = min(
        next(
            i
            for i, h in enumerate(d["replay"]["input_sequence_hashes"])
            if any(h != e["replay"]["input_sequence_hashes"][i] for e in docs)
        )
        for d in docs
    )
    # the figures docs/recordings.md quotes: twelve shared 64-token blocks, and each worker's
    # cache served 768 tokens of every request after its first
    assert shared_blocks == 12
    assert sorted(d["cached_tokens"] for d in docs) == [0, 0] + [768] * (len(docs) - 2)
    hits = summary["engine"]["prefix_cache_hit_tokens"]
    assert hits >= (len(docs) - 2) * (shared_blocks * 64 - 16), (hits, shared_blocks)


def test_one_named_engine_is_not_said_assumed(tmp_path: Path) -> None:
    """Every record of the real trace names one worker: one server, known, not 'ASSUMED'; a copy
    whose records name none is simulated on one server said as assumed."""
    code, stdout, stderr = run("validate", "--records", TRACE, *MODEL, "--out", tmp_path / "a")
    assert code == 0, stderr
    said = " ".join((stdout + stderr).split())
    assert "num_servers=1" in said and "one server (ASSUMED" not in said, said
    docs = [json.loads(line) for line in TRACE.read_text().splitlines()]
    for d in docs:
        del d["event"]["request"]["worker"]
    bare = tmp_path / "bare.jsonl"
    bare.write_text("".join(json.dumps(d) + "\n" for d in docs))
    code, stdout, stderr = run("validate", "--records", bare, *MODEL, "--out", tmp_path / "b")
    assert code == 0, stderr
    assert "one server (ASSUMED" in " ".join((stdout + stderr).split())


def test_the_way_to_a_trace_it_names_works(tmp_path: Path) -> None:
    """simulate --trace of the trace names trace convert to a file that keeps its 64-token
    prefix blocks (a CSV's hash_ids are Mooncake's 512-token blocks: trace convert refuses
    one), and that command, then simulate --trace of its output, run."""
    code, stdout, stderr = run("simulate", "--trace", SHARED, *MODEL)
    assert code == 2
    said = " ".join((stdout + stderr).split())
    assert f"kvbudget trace convert {SHARED} --out T.parquet" in said, said
    out = tmp_path / "T.parquet"
    code, _, stderr = run("trace", "convert", SHARED, "--out", out)
    assert code == 0, stderr
    code, _, stderr = run("simulate", "--trace", out, *MODEL, "--out", tmp_path / "sim")
    assert code == 0, stderr
    summary = json.loads((tmp_path / "sim" / "summary.json").read_text())
    assert summary["engine"]["prefix_cache_hit_tokens"] > 0
    # a recording without prefix blocks: a CSV
    plain = TRACE.parents[1] / "guidellm-0.8.1" / "benchmarks.json"
    code, stdout, stderr = run("simulate", "--trace", plain, *MODEL)
    assert code == 2 and "--out T.csv" in " ".join((stdout + stderr).split())
