"""genai-bench's experiment folder (``tests/fixtures/recordings/genai-bench-0.0.5/``, made by
``scripts/make_recording_fixtures.sh genai-bench`` against the CPU vLLM of the live tests):
read to genai-bench's own ``aggregated_metrics`` of each run, each run a closed-loop stage in
the order genai-bench ran them; what cannot be replayed refused in one line. The hand-made
cases change a copy of a real run the way genai-bench 0.0.5 writes them
(``genai_bench/metrics/aggregated_metrics_collector.py`` ``save``, ``protocol.py``
``ExperimentMetadata``)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import RecordedStage, detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "genai-bench-0.0.5"
CLOSED = FIXTURES / "closed"
OPTIONS = FIXTURES / "options"
ONE = CLOSED / "D32_128_text-to-text_num_concurrency_1_time_4s.json"
TWO = CLOSED / "D32_128_text-to-text_num_concurrency_2_time_3s.json"
DRAWN = OPTIONS / "N32_4_128_16_text-to-text_num_concurrency_2_time_3s.json"
LABELS = ("D(32,128) concurrency 1", "D(32,128) concurrency 2")


def _doc(path: Path) -> dict[str, Any]:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict)
    return doc


def _copy(tmp_path: Path) -> Path:
    dest = tmp_path / "closed"
    shutil.copytree(CLOSED, dest)
    return dest


def _edit(path: Path, change: Any) -> None:
    doc = _doc(path)
    change(doc)
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("path", [CLOSED, CLOSED / "experiment_metadata.json"])
def test_an_experiment_reads_to_genai_benchs_own_aggregates(path: Path) -> None:
    assert detect_recording_format(path) == "genai-bench"
    rec = read_recording(path)
    assert rec.tool == "genai-bench 0.0.5"
    # stopped where genai-bench's run_duration ends (its users killed then, in flight ones
    # unrecorded), the second run a second after the first's
    runs = [_doc(p)["aggregated_metrics"]["run_duration"] for p in (ONE, TWO)]
    starts = (0.0, runs[0] + 1.0)
    assert rec.stages == tuple(
        RecordedStage(label, "closed", None, users, send_times="rebuilt",
                      time_limit_end_s=start + run_s, grace_s=0.0)
        for label, users, start, run_s in zip(LABELS, (1, 2), starts, runs, strict=True))
    m = rec.measured
    for label, run in zip(LABELS, (ONE, TWO), strict=True):
        agg = _doc(run)["aggregated_metrics"]
        stats = agg["stats"]
        part = m[m["stage"] == label]
        assert len(part) == agg["num_completed_requests"] == agg["num_requests"]
        assert float(part["ttft_s"].mean()) == pytest.approx(stats["ttft"]["mean"], rel=1e-12)
        assert float(part["e2e_s"].mean()) == pytest.approx(stats["e2e_latency"]["mean"],
                                                            rel=1e-12)
        assert float(part["prompt_tokens"].sum()) == stats["num_input_tokens"]["sum"]
        assert float(part["output_tokens"].sum()) == stats["num_output_tokens"]["sum"]
        assert float(part["e2e_s"].max()) == stats["e2e_latency"]["max"]
    # D(32,128) on --api-backend vllm: max_tokens 128 with ignore_eos, as sent
    assert rec.workload.max_output_tokens.tolist() == [128] * len(m)
    tokenizer = json.loads((path if path.is_dir() else path.parent).joinpath(
        "experiment_metadata.json").read_text())["server_model_tokenizer"]
    assert rec.config == {"model": "tiny", "api_backend": "vllm", "task": "text-to-text",
                          "tokenizer": tokenizer, "server_engine": "vllm",  # --server-engine vLLM
                          "max_tokens": 128, "ignore_eos": True}
    assert rec.counts["num_measured"] == len(m) and rec.counts["num_failed"] == 0
    assert any(n.startswith("no send time in the files") for n in rec.notes)


def test_the_sends_are_the_closed_loop_of_its_users_in_the_files_order() -> None:
    rec = read_recording(CLOSED)
    m = rec.measured
    one, two = (m[m["stage"] == label] for label in LABELS)
    e2e_one = [r["e2e_latency"] for r in _doc(ONE)["individual_request_metrics"]]
    # one user: each request sent when the one before it ended, in the file's order
    assert one["e2e_s"].tolist() == e2e_one
    assert np.allclose(one["arrival_s"].to_numpy(), np.concatenate([[0.0],
                                                                    np.cumsum(e2e_one)[:-1]]))
    # the second run starts after the first's run_duration and genai-bench's 1 s sleep
    run_s = _doc(ONE)["aggregated_metrics"]["run_duration"]
    assert two["arrival_s"].min() == pytest.approx(run_s + 1.0)
    # two users: both send at once, then each request when the first user is free
    sends = two["arrival_s"].to_numpy() - two["arrival_s"].min()
    assert sends[:2].tolist() == [0.0, 0.0] and np.all(np.diff(sends) >= 0)
    busy = float(two["e2e_s"].sum())
    assert busy / 2 <= (two["arrival_s"] + two["e2e_s"]).max() - two["arrival_s"].min() <= busy


def test_one_runs_file_is_one_stage_with_the_metadata_beside_it() -> None:
    assert detect_recording_format(TWO) == "genai-bench"
    rec = read_recording(TWO)
    assert [st.label for st in rec.stages] == [LABELS[1]]
    assert rec.config["max_concurrency"] == 2 and rec.config["model"] == "tiny"
    assert len(rec.measured) == _doc(TWO)["aggregated_metrics"]["num_completed_requests"]
    run_s = _doc(TWO)["aggregated_metrics"]["run_duration"]
    assert any(n.startswith(f"stage '{LABELS[1]}' was stopped by its {run_s:g} s time limit "
                            "(genai-bench's run_duration, from before its users started to "
                            "after it stopped them at its check 3 (time_3s), when "
                            "max_requests_per_run 8 had returned, killing those in flight")
               for n in rec.notes)
    assert rec.stages[0].time_limit_end_s == pytest.approx(run_s)


def test_every_request_failed_is_refused_with_its_error() -> None:
    run = FIXTURES / "all_failed"
    doc = _doc(run / "debug_for_run_D32_128_2.json")
    n = len(doc["individual_request_metrics"])
    assert doc["aggregated_metrics"]["error_codes_frequency"] == {"503": n}
    with pytest.raises(TraceError) as info:
        read_recording(run)
    text = str(info.value)
    assert f"every one of its {n} requests failed ({n} error (503): \"Connection error: " in text
    assert "\n" not in text


def test_a_failed_request_is_counted_with_its_reason_and_dropped(tmp_path: Path) -> None:
    exp = _copy(tmp_path)

    def fail(doc: dict[str, Any]) -> None:
        doc["individual_request_metrics"][3] = {
            **{k: None for k in doc["individual_request_metrics"][3]},
            "error_code": 500, "error_message": "engine died"}
    _edit(exp / TWO.name, fail)
    rec = read_recording(exp)
    total = sum(len(_doc(p)["individual_request_metrics"]) for p in (ONE, TWO))
    assert rec.counts["num_failed"] == 1 and rec.counts["num_rows_read"] == total
    assert len(rec.measured) == total - 1
    assert any(n.startswith('1 request failed (1 error (500): "engine died")') for n in rec.notes)


def test_a_run_in_ms_with_warmup_and_cooldown_reads_to_its_own_aggregates() -> None:
    # N(32,4)/(128,16) at 2 users, --metrics-time-unit ms, --warmup-ratio 0.2 --cooldown-ratio
    # 0.2: genai-bench's aggregates leave out the first and last int(n * 0.2) requests
    doc = _doc(DRAWN)
    assert doc["_time_unit"] == "ms"
    stats, n = doc["aggregated_metrics"]["stats"], len(doc["individual_request_metrics"])
    cut = int(n * 0.2)
    rec = read_recording(OPTIONS)
    m = rec.measured
    assert m["status"].tolist() == ["warmup"] * cut + ["completed"] * (n - 2 * cut) + \
        ["cooldown"] * cut
    assert rec.counts["num_warmup"] == rec.counts["num_cooldown"] == cut
    used = m[m["usable"]]
    assert len(used) == n - 2 * cut
    assert float(used["ttft_s"].mean()) * 1000 == pytest.approx(stats["ttft"]["mean"], rel=1e-12)
    assert float(used["e2e_s"].mean()) * 1000 == pytest.approx(stats["e2e_latency"]["mean"],
                                                               rel=1e-12)
    assert float(used["output_tokens"].sum()) == stats["num_output_tokens"]["sum"]
    # a drawn output length is not recorded: each request declares its realised output, which
    # ignore_eos (sent on the vllm backend) made what it asked for
    assert "max_tokens" not in rec.config and rec.config["ignore_eos"] is True
    assert rec.workload.max_output_tokens.tolist() == m["output_tokens"].tolist()
    assert any(n.startswith("max_tokens: its realised output length") for n in rec.notes)


@pytest.mark.parametrize(("change", "where", "needle"), [
    (lambda d: d.update(task="text-to-embeddings"), "experiment_metadata.json: field 'task'",
     "is an experiment of --task text-to-embeddings: its requests generate no text tokens"),
    (lambda d: d.update(task="image-text-to-text"), "experiment_metadata.json: field 'task'",
     "its requests carry images, which kvbudget does not simulate"),
    (lambda d: d.update(cmd=d["cmd"] + " --prefix-len 16"), "experiment_metadata.json: field 'cmd'",
     "ran with --prefix-len 16: it shares one prompt prefix across every request"),
    (lambda d: d.update(cmd=d["cmd"] + " --spawn-rate 1"), "experiment_metadata.json: field 'cmd'",
     "ran with --spawn-rate 1: Locust started the 2 users of D(32,128) concurrency 2 1 at a "
     "time, the last 1 s after the first"),
])
def test_what_cannot_be_replayed_is_refused_naming_the_field(
        tmp_path: Path, change: Any, where: str, needle: str) -> None:
    exp = _copy(tmp_path)
    _edit(exp / "experiment_metadata.json", change)
    with pytest.raises(TraceError) as info:
        read_recording(exp)
    text = str(info.value)
    assert where in text and needle in text and "\n" not in text


@pytest.mark.parametrize(("damage", "said"), [
    (lambda t: t[: len(t) // 2], f"{TWO.name}: line "),
    (lambda t: json.dumps({**json.loads(t), "individual_request_metrics": [
        {k: v for k, v in r.items() if not (i == 3 and k == "e2e_latency")}
        for i, r in enumerate(json.loads(t)["individual_request_metrics"])]}),
     "field 'individual_request_metrics[3].e2e_latency': missing in a request without error_code"),
    (lambda t: json.dumps({**json.loads(t), "individual_request_metrics": [
        {**r, "ttft": "fast"} for r in json.loads(t)["individual_request_metrics"]]}),
     "field 'individual_request_metrics[0].ttft': not a number: 'fast'"),
    (lambda t: json.dumps({**json.loads(t), "_time_unit": "us"}),
     "field '_time_unit': must be s or ms, got 'us'"),
    (lambda t: json.dumps({**json.loads(t), "aggregated_metrics": {
        **json.loads(t)["aggregated_metrics"], "num_concurrency": 0}}),
     "field 'aggregated_metrics.num_concurrency': must be a whole number >= 1, got 0"),
])
def test_a_damaged_run_names_the_file_and_field(tmp_path: Path, damage: Any, said: str) -> None:
    exp = _copy(tmp_path)
    (exp / TWO.name).write_text(damage((exp / TWO.name).read_text()))
    with pytest.raises(TraceError) as info:
        read_recording(exp)
    assert str(info.value).startswith(str(exp / TWO.name)) and said in str(info.value)


def test_a_run_file_alone_is_refused_by_the_task_in_its_name(tmp_path: Path) -> None:
    path = tmp_path / "E128_text-to-embeddings_num_concurrency_2_time_1s.json"
    path.write_text(TWO.read_text())
    with pytest.raises(TraceError, match="is an experiment of --task text-to-embeddings"):
        read_recording(path)


def test_max_tokens_in_the_additional_request_params_is_what_was_sent(tmp_path: Path) -> None:
    # --additional-request-params '{"max_tokens": 200}' is spread over the scenario's 128
    exp = _copy(tmp_path)
    _edit(exp / "experiment_metadata.json",
          lambda d: d.update(additional_request_params={"max_tokens": 200}))
    rec = read_recording(exp)
    assert rec.config["max_tokens"] == 200
    assert set(rec.workload.max_output_tokens.tolist()) == {200}
    _edit(exp / "experiment_metadata.json",
          lambda d: d.update(additional_request_params={"max_tokens": "lots"}))
    with pytest.raises(TraceError, match=re.escape(
            "field 'additional_request_params.max_tokens': not a number: 'lots'")):
        read_recording(exp)


def test_a_planned_run_without_its_file_is_said(tmp_path: Path) -> None:
    exp = _copy(tmp_path)
    _edit(exp / "experiment_metadata.json", lambda d: d.update(num_concurrency=[1, 2, 4]))
    rec = read_recording(exp)
    assert len(rec.stages) == 2
    assert "experiment_metadata.json plans 1 run with no result file (D(32,128) concurrency " \
        "4): not run, or the experiment stopped before them; read without them" in rec.notes


def test_a_metadata_file_alone_names_what_is_missing(tmp_path: Path) -> None:
    shutil.copy(CLOSED / "experiment_metadata.json", tmp_path)
    with pytest.raises(TraceError, match="holds no genai-bench run result"):
        read_recording(tmp_path / "experiment_metadata.json")


def test_the_folder_above_experiments_names_them() -> None:
    # --experiment-base-dir holds one folder an experiment
    assert detect_recording_format(FIXTURES) == "genai-bench"
    with pytest.raises(TraceError, match="its experiments are all_failed, closed, options, "
                       "two_scenarios: pass one"):
        read_recording(FIXTURES)


def test_validate_reads_an_experiment_end_to_end(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", "--records", str(CLOSED), "--model",
                                   "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    assert res.exit_code == 0, res.stderr
    out = " ".join(res.stdout.split())
    assert "stage 'D(32,128) concurrency 2': closed loop of 2 users, sending until its time " \
        "limit at" in out
    assert "replayed as closed loop, 2 users, time-limited (nothing sent after the tool's time " \
        "limit)" in out
    sizes = [len(_doc(p)["individual_request_metrics"]) for p in (ONE, TWO)]
    assert f"D(32,128) concurrency 1 {sizes[0]}" in out
    assert f"D(32,128) concurrency 2 {sizes[1]}" in out
    table = json.loads((tmp_path / "v" / "validation.json").read_text())
    assert table["counts"]["num_measured"] == sum(sizes)
    # forced by name, one run's file
    res = CliRunner().invoke(app, ["validate", "--records", str(DRAWN), "--records-format",
                                   "genai-bench", "--model", "Llama-3.1-8B", "--out",
                                   str(tmp_path / "w")])
    assert res.exit_code == 0, res.stderr


def test_validate_refuses_an_all_failed_run_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["validate", "--records", str(FIXTURES / "all_failed"),
                                   "--model", "Llama-3.1-8B", "--out", str(tmp_path / "v")])
    assert res.exit_code == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "requests failed" in res.stderr and not (tmp_path / "v").exists()
