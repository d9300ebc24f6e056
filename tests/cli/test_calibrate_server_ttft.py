"""``calibrate --records F --holdout ...`` printed its held-out comparison without the
server-side TTFT table ``validate --records`` prints for a file with the server's own figures
(``vllm bench serve`` 0.33 and later: ``server_queue_times``, ``server_ttfts``), so a fit's
held-out check named only the client's TTFT, its front end in it. It now prints the same table
from the same function (:func:`kvbudget.studies.server_ttft.server_ttft_table`), over the
held-out requests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
TINY = {  # tests/live/tiny_model.py: the model the fixtures' CPU vLLM served
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 512,
    "max_position_embeddings": 2048, "tie_word_embeddings": False, "torch_dtype": "float32",
}
FLAGS = ["--gpu", "H100-SXM", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048",
         "--block-size", "128", "--num-gpu-blocks", "9", "--set", "engine.async_scheduling=false",
         "--set", "frontend=none", "--max-evals", "3", "--allow-small-fit", "--holdout", "0.5"]
HEAD = "server-side TTFT ("


def calibrate(path: Path, tmp_path: Path) -> list[str]:
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps(TINY))
    res = CliRunner().invoke(app, ["calibrate", "--records", str(path), "--model", str(model),
                                   *FLAGS, "--out", str(tmp_path / "cost.json")])
    assert res.exit_code == 0, res.output
    return res.stdout.replace("\n  ", " ").splitlines()


@pytest.mark.parametrize("name", ["vllm-bench-0.33.0/metrics_rate8.json",
                                  "vllm-bench-0.34.0/metrics_chat_c4.json"])
def test_calibrate_holdout_prints_the_servers_ttft_over_the_held_out_part(
        name: str, tmp_path: Path) -> None:
    said = calibrate(FIXTURES / name, tmp_path)
    head = next((i for i, ln in enumerate(said) if ln.startswith(HEAD)), None)
    assert head is not None, said
    assert said[head + 1].split() == [
        "metric", "simulated", "measured", "rel.", "error", "client's", "rel.", "error"]
    rows = {ln.split()[0]: ln.split() for ln in said[head + 3:head + 7]}
    # the measured column: the server's queue time plus TTFT over the held-out requests
    recording = read_recording(FIXTURES / name)
    m = recording.measured
    server = (m["server_queue_s"] + m["server_ttft_s"]).to_numpy(dtype=np.float64)
    keep = (~recording.fit_rows(0.5)) & m["usable"].to_numpy(dtype=bool) & np.isfinite(server)
    assert said[head].startswith(f"{HEAD}{int(keep.sum())} requests)"), said[head]
    held = server[keep]
    for stat, value in (("mean", held.mean()), ("p50", np.percentile(held, 50)),
                        ("p90", np.percentile(held, 90)), ("p99", np.percentile(held, 99))):
        assert float(rows[f"server_ttft_{stat}_s"][2]) == pytest.approx(value, rel=5e-3), rows


def test_calibrate_holdout_prints_none_for_a_file_without_the_servers_figures(
        tmp_path: Path) -> None:
    said = calibrate(FIXTURES / "vllm-bench-0.33.0" / "rate8.json", tmp_path)
    assert any(ln.startswith("held out (the last 0.5") for ln in said), said
    assert not any(ln.startswith(HEAD) for ln in said), said
