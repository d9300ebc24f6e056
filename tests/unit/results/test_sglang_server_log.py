"""An SGLang server's log passed where a recording is meant.

A published log (github.com/jethac/dgx-spark-hijinks 29166059, ``results/
sglang_bench_20260607T120315Z_server.log``: SGLang 0.5.11 in NVIDIA's container on a DGX Spark;
no licence, so not kept here) was read as a CSV of generic records and told to map its
'prompt_tokens' column, "the header has: ============" (the container's banner). Its scheduler
logs each step's batch, not each request (sglang 0.5.9 ``srt/managers/
scheduler_metrics_mixin.py``; the line format of ``srt/utils/common.py`` ``configure_logger``).
The lines below are written by hand in that log's shape.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recorded_consoles import sglang_server_log_refusal

BANNER = "\n============\n== SGLang ==\n============\n\nNVIDIA Release 26.05\nSGLang Version 0.5.11+05fb6a52\n"
ARGS = "[2026-06-07 12:04:18] server_args=ServerArgs(model_path='Qwen/Qwen2.5-1.5B-Instruct', tp_size=1)"
PREFILL = (
    "[2026-06-07 12:04:37] Prefill batch, #new-seq: 1, #new-token: 44, #cached-token: 0, token "
    "usage: 0.07, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: True, input "
    "throughput (token/s): 26.40"
)
DECODE = (
    "[2026-06-07 12:04:38 DP0 TP1] Decode batch, #running-req: 1, #token: 76, token usage: 0.11, "
    "cuda graph: True, gen throughput (token/s): 0.62, #queue-req: 0"
)


def test_a_containers_sglang_log_is_named_not_read_as_a_csv(tmp_path: Path) -> None:
    log = tmp_path / "sglang_bench_server.log"
    log.write_text(
        "\n".join([BANNER, ARGS, "[2026-06-07 12:04:28] INFO:     Started server", PREFILL, DECODE])
    )
    res = CliRunner().invoke(app, ["validate", "--records", str(log)])
    assert res.exit_code == 2, res.stderr
    said = " ".join(res.stderr.split())
    assert "is an SGLang server log (SGLang 0.5.11+05fb6a52): its scheduler's batch" in said
    assert "--output-file F --output-details" in said
    assert "--column" not in said and "prompt_tokens" not in said


def test_a_log_opening_on_its_own_lines_is_named_and_json_is_not() -> None:
    said = sglang_server_log_refusal(f"{PREFILL}\n{DECODE}\n".encode())
    assert said is not None and said.startswith("is an SGLang server log: ")
    assert sglang_server_log_refusal(f"[2026-06-07 12:04:28] Warning\n{DECODE}\n".encode())
    assert sglang_server_log_refusal(b'[{"ttft": 0.1}]\n') is None
    assert (
        sglang_server_log_refusal(b"(EngineCore_DP0 pid=1) INFO 06-07 12:04:38 [x.py:1] y\n")
        is None
    )
    # the bench_serving client prints no such line: its console is another refusal's
    assert (
        sglang_server_log_refusal(b"============ Serving Benchmark Result ============\n") is None
    )
