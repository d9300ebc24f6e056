"""A serving benchmark's result whose ``--metadata`` says its requests went through a gateway.

github.com/dariustanrd/tokenkaki (no licence found, so no excerpt: the real vllm bench 0.32.0
fixture here with the pairs added as ``--metadata`` writes them, each a top-level string, vLLM
0.32.0 ``vllm/benchmarks/serve.py``: ``result_json[kvstring[0].strip()] = kvstring[1].strip()``)
benchmarks Qwen3-8B on vLLM 0.19.1 both straight to the server and through its own gateway,
saved with ``--save-detailed``: ``experiments/2_vllm_0.19_Qwen3-8B/4_gateway_serve/
vllm-gateway-serving-qwen3-8b-a100-detailed.json`` at 0781746d carries
``benchmark_target=gateway``, ``gateway_base_url=http://127.0.0.1:18000`` and
``vllm_base_url=http://172.17.0.1:8001`` (its TTFTs 52-157 ms; the direct run of the same
100 requests at 5 req/s, ``experiments/1_vllm_v0.19.1_Qwen3-8B/3_direct_vllm_serve/
vllm-direct-serving-qwen3-8b-a100-detailed.json`` at 02862f7e, ``benchmark_target=vllm``,
measured 27-72 ms). ``kvbudget validate --records`` said of it
"no gateway size limit (the recording's requests went straight to the server ...)", the
opposite of what the file says; the pairs now make that line say no gateway is simulated, as
assumed, and why the measured times hold one."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_vllm_metadata import GATEWAY_KEY, gateway_pairs
from kvbudget.results.recordings import read_recording
from tests.conftest import unwrapped

FIXTURE = Path(__file__).parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0" / "rate8.json"

GATEWAY = {
    "benchmark_target": "gateway",
    "benchmark_path": "gateway_detailed",
    "base_url": "http://127.0.0.1:18000",
    "gateway_base_url": "http://127.0.0.1:18000",
    "vllm_base_url": "http://172.17.0.1:8001",
    "benchmark_runner": "same-host",
}
"""tokenkaki's gateway run's ``--metadata`` pairs (some of them), as published."""

DIRECT = {
    "benchmark_target": "vllm",
    "benchmark_path": "direct_vllm_detailed",
    "base_url": "http://172.17.0.1:8001",
    "benchmark_runner": "same-host",
}
"""Its direct run's, beside it."""


def _with_metadata(tmp_path: Path, pairs: dict[str, str]) -> Path:
    doc = json.loads(FIXTURE.read_text())
    doc.update(pairs)
    path = tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    return path


def _settings(tmp_path: Path, path: Path) -> str:
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(path),
            "--model",
            "Qwen3-8B",
            "--gpu",
            "A100-80GB",
            "--out",
            str(tmp_path / "v"),
        ],
    )
    assert res.exit_code == 0, res.stderr
    return next(line for line in unwrapped(res.stderr) if line.startswith("settings:"))


def test_a_run_whose_metadata_names_a_gateway_is_not_said_to_go_straight_to_the_server(
    tmp_path: Path,
) -> None:
    path = _with_metadata(tmp_path, GATEWAY)
    assert read_recording(path).config[GATEWAY_KEY] == [
        "benchmark_target=gateway",
        "benchmark_path=gateway_detailed",
        "gateway_base_url=http://127.0.0.1:18000",
    ]
    said = _settings(tmp_path, path)
    assert "went straight to the server" not in said
    assert (
        "no gateway (ASSUMED: the file's --metadata says its requests went through one "
        "(benchmark_target=gateway, benchmark_path=gateway_detailed, "
        "gateway_base_url=http://127.0.0.1:18000), which the recording does not describe: "
        "the default tiers' max_sequence_tokens not applied, and its time on each request, "
        "in the measured TTFT and E2E, not simulated; pass --policy or --scenario to "
        "simulate a gateway)"
    ) in said


def test_the_direct_run_beside_it_still_went_straight_to_the_server(tmp_path: Path) -> None:
    path = _with_metadata(tmp_path, DIRECT)
    assert GATEWAY_KEY not in read_recording(path).config
    said = _settings(tmp_path, path)
    assert "no gateway size limit (the recording's requests went straight to the server" in said


DIRECT_BESIDE_A_GATEWAY = {
    "benchmark_target": "vllm",
    "benchmark_path": "direct_vllm",
    "base_url": "http://172.17.0.1:8001",
    "gateway_base_url": "http://127.0.0.1:8000",
    "vllm_base_url": "http://172.17.0.1:8001",
    "benchmark_runner": "same-host",
}
"""tokenkaki's earlier direct runs (``experiments/1_vllm_baseline_Qwen3-8B/3_direct_vllm_serve/
vllm-direct-serving-qwen3-8b-a100.json`` at 676d474e, the 0.9.2 archive's at 02862f7e): its
``benchmarks/vllm-serving-bench.sh`` (05d758c8) records the gateway's URL on every run, the one
it sent to as ``base_url``. Those two were saved without ``--save-detailed`` (refused for no
per-request data); the same script with it was said to have gone through the gateway."""


def test_a_direct_run_that_records_the_gateways_url_went_straight_to_the_server(
    tmp_path: Path,
) -> None:
    path = _with_metadata(tmp_path, DIRECT_BESIDE_A_GATEWAY)
    assert GATEWAY_KEY not in read_recording(path).config
    said = _settings(tmp_path, path)
    assert "no gateway size limit (the recording's requests went straight to the server" in said
    # the gateway's run records its URL as the one it sent to, and went through it
    assert gateway_pairs(
        {
            **DIRECT_BESIDE_A_GATEWAY,
            "benchmark_target": "gateway",
            "base_url": "http://127.0.0.1:8000/",
        }
    ) == ["benchmark_target=gateway", "gateway_base_url=http://127.0.0.1:8000"]
    # without a base_url pair, a gateway's URL still names a hop
    assert gateway_pairs({"gateway_base_url": "http://127.0.0.1:18000"}) == [
        "gateway_base_url=http://127.0.0.1:18000"
    ]


def test_only_pairs_that_name_a_hop_count() -> None:
    # a key naming one whose value denies it, the client's own proxy settings, and the
    # result's own text keys (a model may be called anything) name none
    assert (
        gateway_pairs(
            {
                "gateway": "none",
                "router": "false",
                "no_proxy": "localhost",
                "https_proxy": "http://corp-proxy:3128",
                "model_id": "router-7b",
                "label": "proxy test",
                "gpu": "A100",
            }
        )
        == []
    )
    assert gateway_pairs(
        {
            "router_url": "http://10.0.0.5:8080",
            "target": "llm-d-gateway",
            "endpoint": "http://my.proxy.internal:8000/v1",
            "replicas": 4,
        }
    ) == [
        "router_url=http://10.0.0.5:8080",
        "target=llm-d-gateway",
        "endpoint=http://my.proxy.internal:8000/v1",
    ]
