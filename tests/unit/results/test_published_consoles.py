"""Logs that are no recording, named for what they are: GuideLLM's console output.

The published excerpt is tests/fixtures/recordings/published/guidellm-bench-gpt-oss-20b-console-
excerpt.log (github.com/danielkorat/guidellm-bench 8f24116d, Apache-2.0 by its pyproject.toml;
README.md there says how it was cut). Without the reader's check it was read as a CSV of
generic records: "line 1: field 'prompt_tokens': missing column 'prompt_tokens' needed by the
generic format (the header has: :: initializing oneAPI environment ...): if a column holds
it, map it".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.results import recorded_consoles
from kvbudget.results.recordings import detect_recording_format, read_recording
from kvbudget.workloads.errors import TraceError

PUBLISHED = Path(__file__).parents[2] / "fixtures" / "recordings" / "published"
CONSOLE = PUBLISHED / "guidellm-bench-gpt-oss-20b-console-excerpt.log"

# GuideLLM 0.3.1's console lines (github.com/vllm-project/guidellm v0.3.1,
# src/guidellm/benchmark/output.py print_section_header: the title and a colon;
# benchmark/entrypoints.py: "Benchmarks report saved to PATH", "Benchmarking complete.").
# Hand-made beside the published 0.5 excerpt: no 0.3 log was found published.
GUIDELLM_0_3 = """Creating backend...
Backend openai_http connected to http://localhost:8000 for model Qwen/Qwen3-0.6B.
Creating request loader...


Benchmarks Metadata:
    Run id:43b1bcf7-6a92-4a81-a7a6-0a6b3a0b84e4


Benchmarks Info:
===========================================================
Metadata                                    |||| Requests Made  ||| Prompt Tok/Req ||


Benchmarks Stats:
===========================================================
Metadata                     | Request Stats         || Out Tok/sec| Tot Tok/sec| Req Latency (sec)

Saving benchmarks report...
Benchmarks report saved to /results/benchmarks.json

Benchmarking complete.
"""


def test_guidellms_published_console_output_is_named_with_its_report() -> None:
    with pytest.raises(TraceError) as info:
        read_recording(CONSOLE)
    said = str(info.value)
    assert said.startswith(f"{CONSOLE}: is GuideLLM's console output"), said
    assert "1 benchmark, its report written to /tmp/guidellm_out_tmp/benchmarks.json" in said
    assert "benchmarks.html" not in said  # a page kvbudget does not read is not offered
    assert "missing column" not in said


def test_trace_convert_is_told_the_same(tmp_path: Path) -> None:
    # trace convert asks detect_recording_format first; it got the same generic-format refusal
    with pytest.raises(TraceError, match="is GuideLLM's console output"):
        detect_recording_format(CONSOLE, usage="kvbudget trace convert {} --out t.csv")


def test_guidellm_0_3s_console_output_is_named(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    path.write_text(GUIDELLM_0_3)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert (
        "is GuideLLM's console output (guidellm benchmark, as printed: its report written "
        "to /results/benchmarks.json)"
    ) in said, said


def test_a_log_without_a_report_path_is_told_the_flags(tmp_path: Path) -> None:
    path = tmp_path / "run.log"
    path.write_text(
        "\n".join(
            line for line in CONSOLE.read_text().splitlines() if not line.startswith("\u2026")
        )
    )
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert (
        "(--output-path FILE.json in GuideLLM 0.2 and 0.3, --outputs json in 0.4 and later)"
        in str(info.value)
    )


def test_a_long_log_of_several_runs_is_counted_to_its_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a wrapper's log of several runs, each the server's log then GuideLLM's output (the
    # repository's guidellm_results/20260302_1917/bench.log, 230 KB, 4 runs): runs past the
    # first 64 KiB are counted, and one whose line straddles two pieces is counted once
    monkeypatch.setattr(recorded_consoles, "CHUNK", 4096)
    run = CONSOLE.read_bytes()
    filler = b"".join(
        f"(APIServer pid=4912) INFO 03-02 17:19:{i % 60:02d} [loggers.py:248] "
        f"Engine 000: Avg prompt throughput: {i}.0 tokens/s\n".encode()
        for i in range(700)
    )
    text = filler + run + filler
    done = run.index(b"Benchmarking complete")  # the second run's line cut by a piece's end
    text += b"#" * (-(len(text) + 1 + done + 10) % 4096) + b"\n" + run + filler + run
    assert text.count(b"Benchmarking complete") == 3
    assert (text.index(b"Benchmarking complete", len(filler) + len(run)) + 10) % 4096 == 0
    path = tmp_path / "bench.log"
    path.write_bytes(text)
    assert len(path.read_bytes()) > 1 << 16
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert "as printed: 3 runs, 3 benchmarks, its report written to " in str(info.value)


def test_other_text_is_not_called_guidellms(tmp_path: Path) -> None:
    path = tmp_path / "notes.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,10,5,0.1,0.5\n")
    assert detect_recording_format(path) == "records"
    assert recorded_consoles.guidellm_console_refusal(b"guidellm benchmark --target x\n") is None


SERVER_LOG = PUBLISHED / "guidellm-bench-gpt-oss-20b-server-log-excerpt.log"


def test_a_server_log_behind_another_programs_lines_is_named() -> None:
    # the same run's vLLM log (its lines coloured, after oneAPI's setvars lines and a PyTorch
    # warning): it got "line 1: field 'prompt_tokens': missing column 'prompt_tokens' needed
    # by the generic format (the header has: :: initializing oneAPI environment ...)"
    with pytest.raises(TraceError) as info:
        read_recording(SERVER_LOG)
    assert str(info.value).startswith(f"{SERVER_LOG}: is a vLLM server log"), str(info.value)


def test_vllms_coloured_log_lines_are_a_server_logs(tmp_path: Path) -> None:
    # vLLM 0.32.0's ColoredFormatter (vllm/logging_utils/formatter.py) colours the process
    # prefix, the level and the time: a log tee'd from a terminal keeps the codes
    path = tmp_path / "vllm.log"
    path.write_bytes(
        b"\x1b[0;36m(APIServer pid=7)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m12-06 05:01:05 "
        b"[api_server.py:1050]\x1b[0m Starting vLLM API server 0 on http://0.0.0.0:8000\n"
    )
    with pytest.raises(TraceError, match="is a vLLM server log"):
        read_recording(path)


def test_records_and_documents_are_not_server_logs(tmp_path: Path) -> None:
    doc = tmp_path / "note.json"  # a document quoting a log line is no log
    doc.write_text('{"log": "x",\n"line":\n"INFO 08-21 10:11:12 [a.py:1] y"}\n')
    assert recorded_consoles.server_log_refusal(doc.read_bytes()) is None
    records = tmp_path / "records.csv"
    records.write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,10,5,0.1,0.5\n")
    assert detect_recording_format(records) == "records"


# github.com/BennielAllan/benchmark ppio/reasoning_result.txt at aed2fec (no licence: its shape,
# not its text): what a copy of vLLM's benchmark_serving.py printed, its arguments echoed first
# (print(args): save_result=False and no save_detailed, a script from before vLLM PR #14879),
# then the prompts' lengths, the load and the summary. It was told to rerun with --save-result
# --save-detailed, which that script refuses; its --save-result saves each request itself.
OLD_SCRIPT_CONSOLE = (
    "Namespace(backend='vllm', base_url=None, host='127.0.0.1', port=8000, "
    "endpoint='/v1/completions', dataset_name='random', max_concurrency=16, model='m', "
    "num_prompts=32, request_rate=inf, burstiness=1.0, seed=42, save_result=False, "
    "metadata=None, result_dir=None, ignore_eos=True, random_input_len=5734)\n"
    "5961\n5968\nTraffic request rate: inf\nBurstiness factor: 1.0 (Poisson process)\n"
    "Maximum request concurrency: 16\n"
    "============ Serving Benchmark Result ============\n"
    "Successful requests:                     32        \n"
    "Benchmark duration (s):                  280.37    \n"
)


def test_a_console_of_a_script_before_save_detailed_is_told_its_own_flag(
    tmp_path: Path,
) -> None:
    path = tmp_path / "reasoning_result.txt"
    path.write_text(OLD_SCRIPT_CONSOLE)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert said.startswith(
        f"{path}: is a serving benchmark's console output (vllm bench serve, or SGLang's or "
        "TensorRT-LLM's benchmark_serving, as printed: request rate inf, max concurrency 16, "
        "successful requests 32): its settings and summary, no request; rerun it with "
        "--save-result and pass the JSON it writes"
    ), said
    assert "from before vLLM PR #14879" in said and "--save-detailed (SGLang" not in said
    # a script that echoes save_detailed has the flag: told to pass it
    path.write_text(
        OLD_SCRIPT_CONSOLE.replace("save_result=False,", "save_result=False, save_detailed=False,")
    )
    with pytest.raises(TraceError, match="rerun it with --save-result --save-detailed"):
        read_recording(path)
