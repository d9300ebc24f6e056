"""A trace to simulate, as a user's copy arrives: read as the original whatever its encoding.

``validate --records`` read a load tool's file in UTF-16 (Windows PowerShell 5's ``>`` and
``Out-File`` write UTF-16 LE with its byte-order mark) through
:mod:`kvbudget.workloads.text_files`, while ``simulate --trace`` (and every command that loads a
trace: ``trace stats``, ``replay --trace``, a scenario's ``[workload] trace``) refused the same
text: "is UTF-16 LE text ...: the trace formats read UTF-8; convert it (iconv ...)". The trace
loader now reads it the same way and says it in one line ("read burst.csv as UTF-16 LE text (the
byte-order mark it starts with)"); a UTF-8 mark or CRLF line ends change nothing and say
nothing. Every trace under ``../shared/traces`` (each published format: Azure, BurstGPT,
Mooncake, the ShareGPT lengths table, a ServeGen folder) and the traces ``kvbudget trace
convert`` writes from the project's recording fixtures (CSV and JSON lines) are read here.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces import LoadedTrace, TraceOptions, load_trace
from kvbudget.workloads.traces.load import detect_format

TESTS = Path(__file__).resolve().parents[2]
RECORDINGS = TESTS / "fixtures" / "recordings"
TRACES = TESTS.parent.parent / "shared" / "traces"  # beside the checkout (tests/conftest.py)

Transform = Callable[[bytes], bytes]


def crlf(raw: bytes) -> bytes:
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


ENCODED: dict[str, Transform] = {
    "utf-8-bom": lambda raw: b"\xef\xbb\xbf" + raw,
    "utf-16-le": lambda raw: b"\xff\xfe" + raw.decode("utf-8").encode("utf-16-le"),
    "utf-16-be": lambda raw: b"\xfe\xff" + raw.decode("utf-8").encode("utf-16-be"),
    "crlf": crlf,
    "utf-16-le-crlf": lambda raw: b"\xff\xfe" + crlf(raw).decode("utf-8").encode("utf-16-le"),
}
SAID = {"utf-16-le": "UTF-16 LE", "utf-16-be": "UTF-16 BE", "utf-16-le-crlf": "UTF-16 LE"}

SHARED = {
    "azure-code": TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv",
    "burstgpt": TRACES / "burstgpt" / "burstgpt_slice.csv",
    "burstgpt3": TRACES / "burstgpt" / "burstgpt3_slice.csv",
    "mooncake": TRACES / "mooncake" / "synthetic_trace.jsonl",
    "sharegpt-lengths": TRACES
    / "sharegpt_lengths"
    / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
    "servegen": TRACES / "servegen" / "language" / "m-large",
}
CONVERTED = {
    "converted-csv": (RECORDINGS / "vllm-bench-0.32.0" / "burst05.json", "trace.csv"),
    "converted-jsonl": (RECORDINGS / "aiperf-0.13.0" / "rate8.jsonl", "trace.jsonl"),
}
OPTIONS = {"servegen": TraceOptions(tier_map={}, window=(0.0, 120.0))}


def source(kind: str, tmp: Path) -> Path:
    """The trace of ``kind``: a shared one, or one ``trace convert`` writes from a fixture."""
    if kind in SHARED:
        if not SHARED[kind].exists():
            pytest.skip(f"{SHARED[kind]} is not there")
        return SHARED[kind]
    recording, name = CONVERTED[kind]
    out = tmp / "converted" / kind / name
    out.parent.mkdir(parents=True)
    res = CliRunner().invoke(app, ["trace", "convert", str(recording), "--out", str(out)])
    assert res.exit_code == 0, res.output
    return out


def copy_of(src: Path, tmp: Path, change: Transform) -> Path:
    """``src`` (a file, or a ServeGen folder's chunks) copied into ``tmp`` under its own name,
    ``change`` applied to each file."""
    tmp.mkdir(parents=True)
    if src.is_dir():
        out = tmp / src.name
        shutil.copytree(src, out)
        files = sorted(p for p in out.iterdir() if p.is_file())
    else:
        out = tmp / src.name
        files = [out]
        shutil.copy(src, out)
    for path in files:
        path.write_bytes(change(path.read_bytes()))
    return out


def signature(loaded: LoadedTrace) -> tuple[Any, ...]:
    """Everything loaded but the path and what is said of the encoding."""
    w, r = loaded.workload, loaded.report
    return (
        r.format,
        r.rows_read,
        r.rows_loaded,
        r.dropped,
        r.warnings,
        r.timed,
        w.name,
        w.arrival_s.tolist(),
        w.prompt_tokens.tolist(),
        w.output_tokens.tolist(),
        w.max_output_tokens.tolist(),
        w.tier.tolist(),
        w.tier_names,
        None if w.prefix_hashes is None else w.prefix_hashes.tolist(),
        None if w.prefix_offsets is None else w.prefix_offsets.tolist(),
        w.deadline_s.tobytes(),  # NaN where none (not equal to itself in a list)
    )


@pytest.mark.parametrize("variant", list(ENCODED))
@pytest.mark.parametrize("kind", [*SHARED, *CONVERTED])
def test_a_trace_encoded_otherwise_loads_as_the_original(
    tmp_path: Path, kind: str, variant: str
) -> None:
    src = source(kind, tmp_path)
    options = OPTIONS.get(kind, TraceOptions())
    before = load_trace(copy_of(src, tmp_path / "original", lambda raw: raw), options)
    path = copy_of(src, tmp_path / variant, ENCODED[variant])
    loaded = load_trace(path, options)
    assert signature(loaded) == signature(before)
    assert loaded.report.path == str(path)
    assert loaded.workload.meta["source"] == str(path)
    said = [a for a in loaded.report.assumed if a not in before.report.assumed]
    assert loaded.workload.meta["assumed"] == loaded.report.assumed
    if variant not in SAID:
        assert said == [], said  # the same text: nothing assumed
        return
    assert len(said) == 1, said
    # a ServeGen folder's files in the order read: by client, its trace then its dataset
    named = (
        "chunk-34-trace.csv, chunk-34-dataset.json, chunk-143-trace.csv, chunk-143-dataset.json"
        if path.is_dir()
        else path.name
    )
    assert said[0] == (
        f"read {named} as {SAID[variant]} text (the byte-order mark "
        f"{'they start' if path.is_dir() else 'it starts'} with)"
    )
    if not path.is_dir():
        assert detect_format(path) == detect_format(src)


def test_simulate_reads_a_utf16_trace_as_the_original_and_says_so_once(tmp_path: Path) -> None:
    """The found case end to end: the BurstGPT slice through PowerShell's ``>``."""
    src = source("burstgpt", tmp_path)
    outputs = []
    for variant in ("original", "utf-16-le"):
        path = copy_of(src, tmp_path / variant, ENCODED.get(variant, lambda raw: raw))
        res = CliRunner().invoke(app, ["simulate", "--trace", str(path)])
        assert res.exit_code == 0, res.output
        outputs.append(" ".join(res.output.split()))
    line = "assumed: read burstgpt_slice.csv as UTF-16 LE text (the byte-order mark it starts with)"
    assert line not in outputs[0]
    assert outputs[1].count(line) == 1, outputs[1]
    # the same but for that line and the folder of the file it names (the workload's line)
    assert outputs[1].replace(line + " ", "").replace("/utf-16-le/", "/original/") == outputs[0]


def test_a_utf16_trace_cut_mid_character_is_refused_naming_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(ENCODED["utf-16-le"](b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n")[:-1])
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert info.value.path == str(path)
    assert info.value.problem == (
        "is UTF-16 LE text (its byte-order mark) but ends in the middle of a character (cut "
        f"short) at byte {path.stat().st_size - 1}"
    )


def test_an_error_in_a_utf16_trace_names_the_users_file_and_line(tmp_path: Path) -> None:
    """The loader reads a UTF-8 copy; its errors name the user's file (the lines are the
    same)."""
    path = tmp_path / "trace.csv"
    text = b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,ten,5\n2,10,5\n"
    path.write_bytes(ENCODED["utf-16-le"](text))
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert info.value.path == str(path)
    assert info.value.line == 3, str(info.value)
