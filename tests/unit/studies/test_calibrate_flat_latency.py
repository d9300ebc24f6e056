"""``calibrate --records`` of a recording made against a server simulator: its TPOT does not
grow with the batch as any GPU's decode step does, and the calibration says so in one warning
line, keeping the fit.

github.com/rsevilla87/guidellm-results-parser 0e467bc ``example_output/benchmarks.json``
(Apache-2.0, excerpt in tests/fixtures/recordings/published/): GuideLLM 0.3 against
Qwen/Qwen3-0.6B "behind llm-d", every request's TTFT 1.005 to 1.020 s and TPOT 10.31 to 10.56
ms while 7 to 30 requests were in flight: the fixed times of llm-d's inference-sim
(``--time-to-first-token``, ``--inter-token-latency``), which the calibration fitted as a GPU's
costs (a front-end term of 978 ms) with nothing said of it. The real vLLM recordings (the CPU
vLLM's, inference-sim's published ground truth of vLLM 0.11 on a GPU) are not flagged."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.calibrate import calibrate_recording
from kvbudget.studies.flat_latency import flat_latency_said
from tests.unit.results.excerpts import excerpt_copy

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SIMULATED = RECORDINGS / "published" / "guidellm-results-parser-qwen3-0.6b-constant10-excerpt.json"


def test_a_calibration_of_a_simulators_recording_says_its_tpot_is_flat(tmp_path: Path) -> None:
    rec = read_recording(excerpt_copy(SIMULATED, tmp_path))
    config = SimConfig(gpu="H100-80GB", model="Qwen3-8B")
    cal = calibrate_recording(
        rec, config, config.resolved_cost_model(), max_evals=8, model_chosen=True
    )
    flat = [w for w in cal.warnings() if "as no GPU's do" in w]
    assert len(flat) == 1, cal.warnings()
    assert flat[0].startswith(
        "the TPOT does not grow with the batch (7 to 30 requests in "
        "flight: -4.3 to +2.47 us a request, 95 %, where the fitted GPU's "
        "decode step takes "
    ), flat[0]
    assert "the server may be a simulator (llm-d's inference-sim" in flat[0]
    assert "TTFT does not grow" not in flat[0]  # 112 to 128 tokens: too narrow to tell
    assert cal.fitted  # the fit is kept


@pytest.mark.parametrize(
    "name",
    [
        "published/inference-sim-jan20-codellama-prefill-1-excerpt.json",
        "vllm-bench-0.32.0/options/range05_rate8.json",
        "vllm-bench-0.32.0/concurrency4.json",
        "aiperf-0.13.0/concurrency4.jsonl",
        "guidellm-0.8.1/sweep.json",
        # TTFT falling with the prompt (load rising as shorter prompts came): not flat
        "published/llm-load-test-v2-draft-caikit-excerpt.json",
    ],
)
def test_recordings_of_real_servers_are_not_flagged(name: str) -> None:
    start = SimConfig(gpu="H100-80GB", model="Qwen3-8B").resolved_cost_model()
    assert flat_latency_said(start, read_recording(RECORDINGS / name).records()) is None


def test_a_flat_ttft_over_a_wide_prompt_range_is_named(tmp_path: Path) -> None:
    # hand-made from the published excerpt: its prompts spread 100 to 4,130 tokens (in an
    # order unrelated to its sends), its TTFTs kept (1.005 to 1.020 s): a GPU's prefill of
    # 4,000 more tokens would take far longer
    rec = read_recording(excerpt_copy(SIMULATED, tmp_path))
    measured = rec.records()
    n = len(measured)
    wide = measured.assign(prompt_tokens=[100 + 130 * (7 * k % n) for k in range(n)])
    start = SimConfig(gpu="H100-80GB", model="Qwen3-8B").resolved_cost_model()
    said = flat_latency_said(start, wide)
    assert said is not None and said.startswith("the TTFT does not grow with the prompt (")
    assert " and the TPOT does not grow with the batch (" in said
