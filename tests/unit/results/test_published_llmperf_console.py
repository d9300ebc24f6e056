"""LLMPerf's console output passed to ``--records``.

github.com/HongxuanZhang/LLMPerf at 568887d3 committed what ``token_benchmark_ray.py`` printed
(``result_outputs/GPU2_TP2/requests_16_tokens_550.txt`` and 44 more: Ray's log lines, tqdm's
bar, ``\\Results for token benchmark for llama2-7b-chat queried with the openai api.``, each
metric's quantiles, ``Number Of Completed Requests: 64``). Such a file was read as a generic
records CSV and refused with "line 1: field 'prompt_tokens': missing column 'prompt_tokens'
needed by the generic format (the header has: You are using the default legacy behaviour
...)", which named neither the tool nor why. The text here is what
github.com/ray-project/llmperf at f1d6bed ``token_benchmark_ray.py`` ``metrics_summary``
prints, cut to a few lines (LLMPerf needs Ray and a server to run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

PRINTED = (
    "2024-09-24 20:19:49,595\tINFO worker.py:1786 -- Started a local Ray instance.\n"
    "  0%|          | 0/64 [00:00<?, ?it/s]100%|##########| 64/64 [00:16<00:00,  3.91it/s]\n"
    "\\Results for token benchmark for llama2-7b-chat queried with the openai api.\n\n"
    "inter_token_latency_s\n    p25 = 0.0219\n    p50 = 0.0222\n    mean = 0.0223\n"
    "Number Of Errored Requests: 0\n"
    "Overall Output Throughput: 585.3750723512259\n"
    "Number Of Completed Requests: 64\n"
    "Completed Requests Per Minute: 235.00682465537972\n")


@pytest.mark.parametrize("text", [PRINTED, PRINTED.split("\\Results")[0] + "inter_token\n"
                                  "Number Of Completed Requests: 64\n"])
def test_llmperf_console_output_is_named(tmp_path: Path, text: str) -> None:
    path = tmp_path / "requests_16_tokens_550.txt"
    path.write_text(text)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    said = str(info.value)
    assert said.startswith(f"{path}: is LLMPerf's console output (token_benchmark_ray.py, as "
                           "printed")
    assert ("for llama2-7b-chat through its openai client" in said) is ("\\Results" in text)
    assert "prompt_tokens" not in said and "\n" not in said

