"""Files of benchmarks that time no served request, as people publish them, each reproduced in a
minimal hand-made file with the published file's own keys, lines or columns (the published
files are not copied in: their sources are cited beside each test).

Each was refused in a line that named neither the tool nor what to do: ``trtllm-bench``'s
printed report as "line 1: not valid JSON", its ``--report_json`` and ``--request_json`` as
"cannot tell the recording format ... pass a format (records, run, vllm-bench, ...)", as if
naming a format would read them, and a serving benchmark's results flattened to a CSV table as
"missing column 'prompt_tokens' needed by the generic format"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

REPO = Path(__file__).resolve().parents[3]
AS_RECORDS = (r"write it as the generic records format \(start_timestamp / 1e9 as arrival_s, "
              r"num_input_tokens as prompt_tokens, output_tokens as output_tokens, "
              r"time_to_first_token / 1e9 as ttft_s .* end_to_end_latency / 1e9 as e2e_s: "
              r"docs/recordings.md\) and pass --engine trtllm")


def refused(path: Path) -> str:
    """The one line ``path`` is refused with."""
    with pytest.raises(TraceError) as info:
        read_recording(path)
    message = str(info.value)
    assert "\n" not in message
    return message.removeprefix(f"{path}: ")


# github.com/shaamil101-etched/trtllm-benchmarks, results/result_1024_128_7500.txt at fd58c28a:
# what `trtllm-bench ... throughput` printed (TensorRT-LLM 0.16.0, Llama-3.1-70B, TP 8, 7500
# requests), its report's banners as tensorrt_llm/bench/dataclasses/reporting.py prints them.
TRTLLM_PRINTED = """[TensorRT-LLM] TensorRT-LLM version: 0.16.0
[07/11/2025-07:56:42] [TRT-LLM] [I] Preparing to run throughput benchmark...
[07/11/2025-07:56:44] [TRT-LLM] [I] Initializing Throughput Benchmark. [rate=-1 req/s]
[TensorRT-LLM][INFO] Capacity Scheduler Policy: GUARANTEED_NO_EVICT
===========================================================
= ENGINE DETAILS
===========================================================
Model:\t\t\tmeta-llama/Llama-3.1-70B-Instruct
Engine Directory:\t/tmp/meta-llama/Llama-3.1-70B-Instruct/tp_8_pp_1
TensorRT-LLM Version:\t0.16.0
===========================================================
= WORLD + RUNTIME INFORMATION
===========================================================
TP Size:\t\t8
PP Size:\t\t1
===========================================================
= REQUEST DETAILS
===========================================================
Number of requests:             7500
Average Input Length (tokens):  1024.0000
Average Output Length (tokens): 128.0000
===========================================================
= PERFORMANCE OVERVIEW
===========================================================
Request Throughput (req/sec):\t27.9325
Total Latency (ms):\t\t268504.5182
"""


def test_trtllm_bench_printed_report_is_named(tmp_path: Path) -> None:
    path = tmp_path / "result_1024_128_7500.txt"
    path.write_text(TRTLLM_PRINTED)
    message = refused(path)
    assert message.startswith("is trtllm-bench's printed report (TensorRT-LLM 0.16.0, TP 8, "
                              "7500 requests): the settings and aggregates of a run of the "
                              "engine inside the benchmark's own process")
    assert "rerun it with --request_json FILE" in message


def test_a_json_list_opening_like_the_log_is_not_taken_for_it(tmp_path: Path) -> None:
    """A JSON list is never the printed report, even with its banner inside a string."""
    path = tmp_path / "other.json"
    path.write_text(json.dumps([{"note": "= PERFORMANCE OVERVIEW"}]))
    assert "trtllm-bench" not in refused(path)


def trtllm_report() -> dict[str, object]:
    """`trtllm-bench throughput --report_json`'s sections (ReportUtility.get_statistics_dict,
    TensorRT-LLM reporting.py), with the published run's figures."""
    return {
        "engine": {"model": "meta-llama/Llama-3.1-70B-Instruct", "model_path": "None",
                   "engine_dir": "/tmp/meta-llama/Llama-3.1-70B-Instruct/tp_8_pp_1",
                   "version": "0.16.0", "backend": "TRT", "dtype": "bfloat16"},
        "world_info": {"tp_size": 8, "pp_size": 1, "ep_size": None, "world_size": 8,
                       "max_batch_size": 2048, "max_num_tokens": 8192},
        "request_info": {"num_requests": 7500, "avg_input_length": 1024.0,
                         "avg_output_length": 128.0},
        "performance": {"total_latency_ms": 268504.5182, "request_throughput_req_s": 27.9325},
    }


def test_trtllm_bench_report_json_is_named(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    path.write_text(json.dumps(trtllm_report(), indent=2))
    message = refused(path)
    assert message.startswith("is trtllm-bench's report (--report_json: TensorRT-LLM 0.16.0, "
                              "meta-llama/Llama-3.1-70B-Instruct, TP 8, 7500 requests): "
                              "aggregates of a run of the engine inside the benchmark's own "
                              "process")
    assert "cannot tell the recording format" not in message


def test_trtllm_bench_request_json_is_named_with_the_columns_to_write(tmp_path: Path) -> None:
    """`--request_json`: ReportUtility.get_request_info, a RequestRecord dump a request
    (statistics.py) less its tokens, plus its output and output_tokens."""
    record = {"id": 0, "num_input_tokens": 1024, "error_tokens": 0,
              "start_timestamp": 5_000_000_000, "first_token_timestamp": 5_120_000_000,
              "end_timestamp": 7_000_000_000, "decode_iteration": 127,
              "num_output_tokens": 128, "num_generated_tokens": 127,
              "generation_time": 1_880_000_000, "time_to_first_token": 120_000_000,
              "intertoken_latency": 14_803_149.6, "end_to_end_latency": 2_000_000_000,
              "output": "", "output_tokens": 128}
    path = tmp_path / "requests.json"
    path.write_text(json.dumps([record, dict(record, id=1)]))
    with pytest.raises(TraceError, match=r"is trtllm-bench's per-request file \(--request_json, "
                       r"2 requests of a run of the engine inside the benchmark's own process.*"
                       + AS_RECORDS):
        read_recording(path)


# github.com/moguizhizi/learning_project, benchmarks/output/qwen2_5_vl_72B/differ/*.csv at
# 9239dfc6: a benchmark_serving.py fork's result keys written as a CSV row beside each JSON.
SERVING_TABLE = (
    "date,backend,hardware,model_name,model_id,tokenizer_id,num_prompts,request_rate,burstiness,"
    "max_concurrency,duration,completed,total_input_tokens,total_output_tokens,"
    "request_throughput,output_throughput,mean_ttft_ms,median_ttft_ms,p99_ttft_ms,"
    "mean_tpot_ms\n"
    "20250923-143003,openai-chat,A6000,Qwen2.5-VL-72B-Instruct,/m/Qwen2.5-VL-72B-Instruct,"
    "/m/Qwen2.5-VL-72B-Instruct,1,inf,1.0,,12.57,1,4247,139,0.0796,11.06,3418.08,3418.08,"
    "3418.08,66.28\n")


def test_a_table_of_serving_benchmark_summaries_is_named(tmp_path: Path) -> None:
    path = tmp_path / "openai-chat-infqps-20250923-143003.csv"
    path.write_text(SERVING_TABLE)
    assert refused(path).startswith("is a table of serving-benchmark summaries, one row a run "
                                    "(vllm bench serve's or SGLang's bench_serving result keys "
                                    "as columns")


def test_a_records_table_with_a_summary_column_is_still_read(tmp_path: Path) -> None:
    """A records file that also carries a run's mean is a records file."""
    path = tmp_path / "requests.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s,mean_ttft_ms,completed\n"
                    "0.0,100,10,0.05,0.5,50,1\n1.0,100,10,0.05,0.5,50,1\n")
    assert len(read_recording(path)) == 2


@pytest.mark.parametrize(("text", "said"), [
    ("[TensorRT-LLM] TensorRT-LLM version: 1.0.0\n"
     "[08/01/2025-10:00:00] [TRT-LLM] [I] Using LLM with PyTorch backend\n"
     "INFO:     Started server process [1234]\n", "is a TensorRT-LLM 1.0.0 log (trtllm-serve's"),
    ("[08/01/2025-10:00:00] [TRT-LLM] [I] Using LLM with PyTorch backend\n",
     "is a TensorRT-LLM log (trtllm-serve's"),
])
def test_a_tensorrt_llm_log_is_named_not_read_as_json(tmp_path: Path, text: str,
                                                     said: str) -> None:
    """trtllm-serve's log opens as the published report does; it was "not valid JSON"."""
    path = tmp_path / "server.log"
    path.write_text(text)
    assert refused(path).startswith(said)


# github.com/shaamil101-etched/trtllm-benchmarks, llama-8b-results/analysis/throughput_summary.csv
# at fd58c28a: the person's own table of trtllm-bench runs, one row a run.
OWN_TABLE = ("ISL,OSL,Requests,Token_Throughput,Request_Throughput,Avg_Input_Len,Avg_Output_Len\n"
             "1024,1024,3000,10893.8728,10.6385,1024.0000,1024.0000\n")
NAMED = """
import sys
from kvbudget.results.recordings import read_recording
try:
    read_recording(sys.argv[1])
except Exception as exc:
    print(exc)
"""


@pytest.mark.parametrize(("text", "expected"), [
    # the person's own table: a run's figures, said as such (it was "missing column ...")
    (OWN_TABLE, "holds aggregate figures, one row a run or a metric (Token_Throughput, "
                "Request_Throughput, Avg_Input_Len, ...), not per-request records"),
    ("Requests,ttft_s,e2e_s\n3000,0.1,0.5\n",
     "missing column 'prompt_tokens' needed by the generic format"),
])
def test_a_table_missing_the_generic_columns_is_refused_the_same_in_every_process(
        tmp_path: Path, text: str, expected: str) -> None:
    """The column named missing was the first of a set, whose order changes with the process
    (PYTHONHASHSEED): one run said 'prompt_tokens', the next 'output_tokens'."""
    path = tmp_path / "throughput_summary.csv"
    path.write_text(text)
    said = {subprocess.run([sys.executable, "-c", NAMED, str(path)], capture_output=True,
                           text=True, check=True, cwd=REPO,
                           env={**os.environ, "PYTHONHASHSEED": seed}).stdout
            for seed in ("0", "1", "2")}
    assert len(said) == 1
    assert expected in said.pop()
