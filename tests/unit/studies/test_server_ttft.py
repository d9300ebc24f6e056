"""The server's own per-request TTFT in a calibration and a validation (``studies.server_ttft``).

``vllm bench serve`` 0.33 and later saves a vLLM server's per-request queue time and TTFT
(``server_queue_times``, ``server_ttfts``) where the server sends them: its TTFT runs from the
step that first scheduled the request to the outputs of the step that made its first token, its
queue time from the scheduler's queueing to that scheduling (0.32.0-0.34.0
vllm/entrypoints/generate/base/serving.py ``build_per_request_timing_metrics``; 0.34.0 lines 67
and 73). The client's TTFT less both is the time outside them, which a calibration took as one
fitted constant bounded by the shortest measured TTFT: on all four real files it came out at
that bound. Now it is the measured difference's mean, and validate compares the server's TTFT
with the simulated engine's.

Known answer: a recording the simulator made itself with no front end, each request's TTFT and
E2E given a front-end time of its own (4 to 28 ms), its server figures the simulated engine's
part: the term must come out as their mean exactly, and validate's server-side errors 0.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.policies import make_policy
from kvbudget.results.recordings import Recording, read_recording
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.studies.calibrate import OVERHEAD, calibrate_recording
from kvbudget.studies.first_token import fixed_term_bounds
from kvbudget.studies.server_ttft import MeasuredFrontEnd, measured_front_end
from kvbudget.studies.validate import validate_recording
from tests.conftest import make_workload

ENGINE = EngineConfig(max_num_seqs=64, max_num_batched_tokens=2048, async_scheduling=True)
CONFIG = SimConfig(gpu="H100-SXM", model="Llama-3.1-8B", engine=ENGINE, frontend="none")
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
METRICS_FILES = [
    FIXTURES / f"vllm-bench-{v}" / f"{name}.json"
    for v in ("0.33.0", "0.34.0")
    for name in ("metrics_rate8", "metrics_chat_c4")
]
TINY = {  # tests/live/tiny_model.py: the model the fixtures' CPU vLLM 0.32.0 served
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 512,
    "max_position_embeddings": 2048,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
}


def known_split(
    tmp_path: Path, n: int = 60, rate: float = 4.0, seed: int = 5
) -> tuple[Recording, np.ndarray[Any, Any]]:
    """The simulator's own run (no front end) as a recording whose requests each carry a
    front-end time of their own (uniform 4-28 ms) in their TTFT and E2E, and whose server
    figures are the simulated engine's part (a third of it queue time): ``(recording, the
    front-end times)``."""
    rng = np.random.default_rng(seed)
    gaps = rng.exponential(1 / rate, n)
    arrival = np.cumsum(gaps) - gaps[0]
    prompt, output = rng.integers(200, 1200, n), rng.integers(40, 160, n)
    workload = make_workload(arrival, prompt, output, max_output_tokens=output)
    sim = simulate(workload, make_policy("unlimited"), CONFIG).records.sort_values("request_id")
    engine = sim["ttft_s"].to_numpy()
    front = rng.uniform(0.004, 0.028, n)
    path = tmp_path / "split.csv"
    pd.DataFrame(
        {
            "arrival_s": arrival,
            "prompt_tokens": prompt,
            "output_tokens": output,
            "max_output_tokens": output,
            "ttft_s": engine + front,
            "e2e_s": sim["e2e_s"].to_numpy() + front,
        }
    ).to_csv(path, index=False)
    rec = read_recording(path)
    order = rec.measured["request_id"].to_numpy()  # the recording's rows, by request id
    measured = rec.measured.assign(
        server_queue_s=engine[order] / 3, server_ttft_s=engine[order] * 2 / 3
    )
    return dataclasses.replace(rec, measured=measured), front[order]


def test_a_known_front_end_is_the_term_and_the_servers_ttft_is_matched_exactly(
    tmp_path: Path,
) -> None:
    rec, front = known_split(tmp_path)
    start = CONFIG.resolved_cost_model()
    cal = calibrate_recording(rec, CONFIG, start, max_evals=8, uncertainty=False)
    # measured, not fitted: the mean of client TTFT - server queue - server TTFT
    assert cal.frontend_overhead_s == pytest.approx(float(front.mean()), abs=1e-12)
    assert isinstance(cal.front_end, MeasuredFrontEnd) and cal.term is None
    assert cal.front_end.num_requests == len(front)
    assert cal.front_end.min_s == pytest.approx(float(front.min()), abs=1e-12)
    assert OVERHEAD not in cal.fitted
    split = cal.first_token(CONFIG)
    assert split["fixed_part_fitted"] is False
    assert split["fixed_part_measured"]["value_s"] == cal.frontend_overhead_s
    assert not any("frontend_overhead_s" in w for w in cal.warnings())
    assert f"front-end term {1e3 * cal.frontend_overhead_s:.2f} ms, measured" in repr(cal)
    # validate with the engine that made it: the server's own TTFT is the simulated TTFT less
    # the term, request by request, so every statistic's error is 0
    val = validate_recording(
        rec, CONFIG, cost_model=start, frontend_overhead_s=cal.frontend_overhead_s
    )
    assert val.server_ttft is not None and val.server_ttft.num_requests == len(front)
    assert np.allclose(val.server_ttft.table["rel_error"], 0.0, atol=1e-9)
    assert val.to_dict()["server_ttft"]["num_requests"] == len(front)
    # the same recording without the server's figures: the term is fitted, as before
    plain = dataclasses.replace(
        rec, measured=rec.measured.drop(columns=["server_queue_s", "server_ttft_s"])
    )
    before = calibrate_recording(plain, CONFIG, start, max_evals=8, uncertainty=False)
    assert before.front_end is None and before.term is not None and OVERHEAD in before.fitted
    assert validate_recording(plain, CONFIG, cost_model=start).server_ttft is None


def test_server_figures_longer_than_the_clients_ttft_are_refused_and_the_term_fitted(
    tmp_path: Path,
) -> None:
    rec, _ = known_split(tmp_path, n=30)
    m = rec.measured.copy()
    m.loc[4, "server_ttft_s"] = m.loc[4, "ttft_s"] + 0.001  # not the same request's figures
    bad = dataclasses.replace(rec, measured=m)
    said = measured_front_end(bad)
    assert isinstance(said, str)
    assert f"request {int(m.loc[4, 'request_id'])}" in said and "not used" in said
    cal = calibrate_recording(
        bad, CONFIG, CONFIG.resolved_cost_model(), max_evals=4, uncertainty=False
    )
    assert cal.front_end == said and cal.term is not None and said in cal.warnings()
    assert cal.first_token(CONFIG)["server_figures_unused"] == said


def test_without_fit_overhead_the_servers_figures_set_no_term(tmp_path: Path) -> None:
    rec, _ = known_split(tmp_path, n=30)
    cal = calibrate_recording(
        rec,
        CONFIG,
        CONFIG.resolved_cost_model(),
        max_evals=3,
        uncertainty=False,
        fit_overhead=False,
    )
    assert cal.frontend_overhead_s == 0.0 and cal.front_end is None and cal.term is None


def _tiny(tmp_path: Path) -> SimConfig:
    """The fixtures' server (scripts/make_recording_fixtures.sh): 8 sequences, 2,048 batched
    tokens, 9 usable blocks of 128 tokens, async scheduling off (vLLM forces it off on CPU)."""
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    return SimConfig(
        gpu="H100-SXM",
        model=str(path),
        frontend="none",
        engine=EngineConfig(
            max_num_seqs=8,
            max_num_batched_tokens=2048,
            block_size=128,
            num_gpu_blocks=9,
            async_scheduling=False,
        ),
    )


@pytest.mark.parametrize("path", METRICS_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_real_files_front_end_term_is_measured_not_at_its_bound(
    tmp_path: Path, path: Path
) -> None:
    # before, the term was fitted and came out at its upper bound, the shortest measured TTFT,
    # on each of these files; the mean front-end time they measure is above that TTFT: the
    # front end's time varies by request (4 to 83 ms here), so no constant below the shortest
    # TTFT fits it
    doc = json.loads(path.read_text())
    rec = read_recording(path)
    client = rec.records()["ttft_s"].to_numpy()  # the whole-answer requests' left out
    by_id = (
        np.array(doc["ttfts"]) - np.array(doc["server_queue_times"]) - np.array(doc["server_ttfts"])
    )
    gap = by_id[rec.measured["request_id"].to_numpy()][np.isfinite(client)]
    cal = calibrate_recording(
        rec,
        _tiny(tmp_path),
        _tiny(tmp_path).resolved_cost_model(),
        max_evals=3,
        uncertainty=False,
        model_chosen=True,
    )
    assert isinstance(cal.front_end, MeasuredFrontEnd) and cal.term is None
    assert cal.frontend_overhead_s == pytest.approx(float(gap.mean()), abs=1e-12)
    assert cal.front_end.num_requests == gap.size
    assert not any("frontend_overhead_s came out" in w for w in cal.warnings())
    shortest = fixed_term_bounds(rec.records()).upper_s
    assert cal.frontend_overhead_s > shortest  # the old bound: no fit could reach it
    # without the server's figures the term is fitted as it was: to that bound, and said
    plain = dataclasses.replace(
        rec, measured=rec.measured.drop(columns=["server_queue_s", "server_ttft_s"])
    )
    before = calibrate_recording(
        plain, _tiny(tmp_path), _tiny(tmp_path).resolved_cost_model(), model_chosen=True
    )
    assert before.term is not None and before.front_end is None
    assert before.frontend_overhead_s == pytest.approx(shortest, abs=1e-6)
    assert any("frontend_overhead_s came out at its upper bound" in w for w in before.warnings())
    # the server queued none of them (a CPU server at 8 req/s or 4 users, 8 sequences)
    assert cal.front_end.queue_max_s < 1e-4


DOC = Path(__file__).resolve().parents[3] / "docs" / "recordings.md"
TINY_FLAGS = [
    "--gpu",
    "H100-SXM",
    "--max-num-seqs",
    "8",
    "--max-num-batched-tokens",
    "2048",
    "--block-size",
    "128",
    "--num-gpu-blocks",
    "9",
    "--set",
    "engine.async_scheduling=false",
    "--set",
    "frontend=none",
]


def _doc_section() -> str:
    text = DOC.read_text()
    return text[
        text.index("**The server's own TTFT**") : text.index(
            "`cost.json` says what it was fitted on"
        )
    ]


def test_the_documented_figures_are_the_fixtures(tmp_path: Path) -> None:
    """docs/recordings.md's shortest TTFTs (the old bound), measured terms and range, in the
    order 0.33.0 rate8, 0.33.0 chat_c4, 0.34.0 rate8, 0.34.0 chat_c4."""
    shown = " ".join(_doc_section().split())
    recs = [read_recording(p) for p in METRICS_FILES]
    terms = [measured_front_end(r) for r in recs]
    assert all(isinstance(t, MeasuredFrontEnd) for t in terms)
    ms = lambda v: f"{1e3 * v:.2f}"  # noqa: E731
    bounds = ", ".join(ms(fixed_term_bounds(r.records()).upper_s) for r in recs[:3])
    assert f"{bounds} and {ms(fixed_term_bounds(recs[3].records()).upper_s)} ms" in shown
    values = [t.value_s for t in terms if isinstance(t, MeasuredFrontEnd)]
    assert f"({', '.join(ms(v) for v in values[:3])} and {ms(values[3])} ms)" in shown
    lows = [t.min_s for t in terms if isinstance(t, MeasuredFrontEnd)]
    highs = [t.max_s for t in terms if isinstance(t, MeasuredFrontEnd)]
    assert f"({ms(min(lows))} to {ms(max(highs))} ms on that CPU server" in shown


def test_calibrate_and_validate_say_it_as_the_docs_show(tmp_path: Path) -> None:
    blocks = [b.strip() for b in _doc_section().split("```")[1::2]]
    path = FIXTURES / "vllm-bench-0.33.0" / "metrics_rate8.json"
    model = tmp_path / "tiny.json"
    model.write_text(json.dumps(TINY))
    out = tmp_path / "cost.json"
    res = CliRunner().invoke(
        app,
        [
            "calibrate",
            "--records",
            str(path),
            "--model",
            str(model),
            *TINY_FLAGS,
            "--max-evals",
            "3",
            "--allow-small-fit",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert blocks[0] in res.stdout.splitlines()
    split = json.loads(out.read_text())["calibration"]["first_token"]
    assert split["fixed_part_fitted"] is False and split["fixed_part_measured"]["num_requests"] == 7
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(path),
            "--model",
            str(model),
            *TINY_FLAGS,
            "--cost-model",
            str(out),
            "--out",
            str(tmp_path / "val"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert blocks[1] in res.stdout
    saved = json.loads((tmp_path / "val" / "validation.json").read_text())["server_ttft"]
    assert saved["num_requests"] == 10 and len(saved["metrics"]) == 4
    # a file without the server's figures: no such table
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(FIXTURES / "vllm-bench-0.33.0" / "rate8.json"),
            "--model",
            str(model),
            *TINY_FLAGS,
            "--cost-model",
            str(out),
            "--out",
            str(tmp_path / "val2"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "server-side TTFT" not in res.stdout
