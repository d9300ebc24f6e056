"""Users' copies of the load tools' result files, as they arrive after other hands: each real
fixture (one of every tool and format) re-encoded, re-ended and damaged the ways users' copies
are.

An intact copy encoded otherwise reads exactly as the original (the same requests, figures,
settings and load stages): a UTF-8 byte-order mark (Windows PowerShell 5's ``Set-Content
-Encoding utf8``, Notepad's "UTF-8 with BOM", Excel's "CSV UTF-8"), UTF-16 LE or BE with its
mark (PowerShell 5's ``>`` and ``Out-File``), CRLF line ends (git's ``core.autocrlf``, Windows
editors), spaces and blank lines after the last line, no newline at the end. UTF-16 is said in
one line; the others change nothing and say nothing. A vLLM bench result with the UTF-8 mark
was refused as "holds aggregate figures, one line a run or a metric", UTF-16 copies as "a
binary file" or "cannot be read ('utf-8' codec can't decode byte 0xff)".

A damaged copy is refused in one line naming the file and the line: a JSON document or a
JSON-lines record cut short (the tool killed while it wrote; it was told "Expecting ','
delimiter" or "Unterminated string", as if a character were wrong), a GuideLLM YAML report
cut at a line's end, UTF-16 cut mid-character, an empty file, an empty folder or one with no
data file, a zip or tar.gz of a run folder. NaN and Infinity where the tools write them
(evalscope's percentiles of a run with no success, SGLang's ``request_rate: Infinity``) are in
the fixtures read here (tests/unit/results/test_recording_evalscope.py reads the first);
vLLM's ``serve.py`` writes none for an empty metric (``np.mean(ttfts or 0)``, vllm 0.32.0
``vllm/benchmarks/serve.py`` lines 753-776) and GuideLLM none at all (``model_dump(mode=
"json")``, guidellm 0.8.1 ``benchmark/schemas/report.py`` line 109: pydantic writes NaN as
null), so a NaN in a per-request time stays refused as damage (test_recording_damage.py)."""

from __future__ import annotations

import json
import shutil
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import Recording, read_recording
from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces.load import load_trace

TESTS = Path(__file__).resolve().parents[2]
FIXTURES = TESTS / "fixtures" / "recordings"
RUNS = TESTS / "fixtures" / "runs"
SHARED = TESTS.parent.parent / "shared"  # beside the checkout, as tests/conftest.py has it

HANDMADE_RECORDS = (
    "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s,status\n"
    "0.0,120,16,0.05,0.31,completed\n0.4,80,12,0.04,0.22,completed\n"
    "0.9,200,20,0.07,0.45,error\n1.3,64,8,0.03,0.15,completed\n"
)
"""A generic records CSV (docs/recordings.md), hand-made beside the tools' files."""
HANDMADE_RECORDS_JSONL = (
    '{"arrival_s": 0.0, "prompt_tokens": 120, "output_tokens": 16, "ttft_s": 0.05, "e2e_s": 0.31}\n'
    '{"arrival_s": 0.4, "prompt_tokens": 80, "output_tokens": 12, "ttft_s": 0.04, "e2e_s": 0.22}\n'
    '{"arrival_s": 0.9, "prompt_tokens": 200, "output_tokens": 20, "ttft_s": 0.07, "e2e_s": 0.45, '
    '"status": "error"}\n'
    '{"arrival_s": 1.3, "prompt_tokens": 64, "output_tokens": 8, "ttft_s": 0.03, "e2e_s": 0.15}\n'
)
"""The same records as JSON lines (the numbers as numbers)."""

KINDS: dict[str, tuple[Path, tuple[Path, ...]]] = {
    # kind: (the file or folder, files copied beside a file: what its reader reads there)
    "vllm-bench-json": (FIXTURES / "vllm-bench-0.32.0" / "burst05.json", ()),
    "vllm-bench-append-jsonl": (FIXTURES / "vllm-bench-0.32.0" / "append.jsonl", ()),
    "sglang-jsonl-infinity": (FIXTURES / "sglang-0.5.9" / "concurrency4.jsonl", ()),
    "guidellm-json": (FIXTURES / "guidellm-0.8.1" / "benchmarks.json", ()),
    "guidellm-yaml": (FIXTURES / "guidellm-0.8.1" / "benchmarks.yaml", ()),
    "aiperf-jsonl": (
        FIXTURES / "aiperf-0.13.0" / "rate8.jsonl",
        (FIXTURES / "aiperf-0.13.0" / "rate8_aiperf.json",),
    ),
    "inference-perf-json": (
        FIXTURES / "inference-perf-0.7.0" / "per_request_lifecycle_metrics.json",
        tuple(
            FIXTURES / "inference-perf-0.7.0" / n
            for n in (
                "stage_0_lifecycle_metrics.json",
                "stage_1_lifecycle_metrics.json",
                "summary_lifecycle_metrics.json",
                "validation.json",
            )
        ),
    ),
    "otel-jsonl": (FIXTURES / "vllm-otel-0.32.0" / "rate8.jsonl", ()),
    "genai-bench-folder": (FIXTURES / "genai-bench-0.0.5" / "closed", ()),
    "evalscope-folder": (FIXTURES / "evalscope-1.14.1" / "open" / "rate_8.0_number_16", ()),
    "kvbudget-run-parquet": (RUNS / "kvbudget-replay-vllm-0.32.0-dp2", ()),
    "records-csv-handmade": (Path("records.csv"), ()),
    "records-jsonl-handmade": (Path("records.jsonl"), ()),
    "records-csv-measured": (
        SHARED / "measured" / "llmservingsim_vllm019" / "RTX4090_Llama-3.1-8B" / "requests.csv",
        (),
    ),
}
DOCUMENTS = {
    "vllm-bench-json",
    "guidellm-json",
    "inference-perf-json",
    "genai-bench-folder",
    "evalscope-folder",
    "kvbudget-run-parquet",
}
"""Kinds whose text files are one JSON document each (cut anywhere: a record of JSON lines is
cut in its last line)."""
TEXT_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml", ".csv")

Transform = Callable[[bytes], bytes]


def crlf(raw: bytes) -> bytes:
    return raw.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")


ENCODED: dict[str, Transform] = {
    "utf-8-bom": lambda raw: b"\xef\xbb\xbf" + raw,
    "utf-16-le": lambda raw: b"\xff\xfe" + raw.decode("utf-8").encode("utf-16-le"),
    "utf-16-be": lambda raw: b"\xfe\xff" + raw.decode("utf-8").encode("utf-16-be"),
    "crlf": crlf,
    "trailing-blank-space": lambda raw: raw.rstrip() + b"  \n\n \n",
    "no-final-newline": lambda raw: raw.rstrip(b"\r\n"),
    "utf-16-le-crlf": lambda raw: b"\xff\xfe" + crlf(raw).decode("utf-8").encode("utf-16-le"),
}
SAID = {"utf-16-le": "UTF-16 LE", "utf-16-be": "UTF-16 BE", "utf-16-le-crlf": "UTF-16 LE"}


def source(kind: str, tmp: Path) -> Path:
    path = KINDS[kind][0]
    if kind.endswith("-handmade"):
        path = tmp / "handmade" / KINDS[kind][0].name
        path.parent.mkdir(exist_ok=True)
        path.write_text(HANDMADE_RECORDS if path.suffix == ".csv" else HANDMADE_RECORDS_JSONL)
    if not path.exists():
        pytest.skip(f"{path} is not there")
    return path


def copy_of(kind: str, tmp: Path, change: Transform) -> Path:
    """The kind's file (with what its reader reads beside it) or folder copied into ``tmp``,
    ``change`` applied to every text file of it."""
    src = source(kind, tmp)
    out = tmp / kind
    out.mkdir()
    if src.is_dir():
        shutil.copytree(src, out / src.name)
        texts = [p for p in (out / src.name).rglob("*") if p.suffix in TEXT_SUFFIXES]
        target = out / src.name
    else:
        for beside in KINDS[kind][1]:
            shutil.copy(beside, out / beside.name)
        shutil.copy(src, out / src.name)
        texts = [out / src.name]
        target = out / src.name
    for path in texts:
        path.write_bytes(change(path.read_bytes()))
    return target


def signature(rec: Recording) -> tuple[Any, ...]:
    """Everything read, but the path: the requests, the measured figures, the counts, the
    settings, the stages, the tool."""
    return (
        len(rec),
        rec.format,
        rec.tool,
        sorted(rec.counts.items()),
        rec.measured.to_csv(),
        rec.workload.arrival_s.tolist(),
        rec.workload.prompt_tokens.tolist(),
        rec.workload.output_tokens.tolist(),
        rec.workload.max_output_tokens.tolist(),
        json.dumps(rec.config, sort_keys=True, default=str),
        rec.stages,
    )


_ORIGINALS: dict[str, Recording] = {}


def original(kind: str, tmp: Path) -> Recording:
    if kind not in _ORIGINALS:
        _ORIGINALS[kind] = read_recording(copy_of(kind, tmp / "original", lambda raw: raw))
    return _ORIGINALS[kind]


@pytest.mark.parametrize("variant", list(ENCODED))
@pytest.mark.parametrize("kind", list(KINDS))
def test_an_intact_copy_encoded_otherwise_reads_as_the_original(
    tmp_path: Path, kind: str, variant: str
) -> None:
    (tmp_path / "original").mkdir()
    before = original(kind, tmp_path)
    path = copy_of(kind, tmp_path, ENCODED[variant])
    rec = read_recording(path)
    assert signature(rec) == signature(before)
    said = [note for note in rec.notes if note not in before.notes]
    if variant in SAID:
        assert len(said) == 1, said
        assert f"as {SAID[variant]} text (the byte-order mark" in said[0], said
    else:
        assert said == [], said  # the same text: nothing assumed


def test_guidellm_csv_copies_keep_their_refusal(tmp_path: Path) -> None:
    """The CSV report (aggregates only) is refused the same whatever its encoding: it was
    refused as "a binary file" in UTF-16."""
    src = FIXTURES / "guidellm-0.8.1" / "benchmarks.csv"
    with pytest.raises(TraceError) as want:
        read_recording(src)
    for variant, change in ENCODED.items():
        path = tmp_path / variant / "benchmarks.csv"
        path.parent.mkdir()
        path.write_bytes(change(src.read_bytes()))
        with pytest.raises(TraceError) as got:
            read_recording(path)
        assert got.value.problem == want.value.problem, variant


def cut(kind: str) -> Transform:
    """A copy cut where a killed tool leaves it: a JSON document 60% in; JSON lines and YAML
    inside their last line (a line a record)."""

    def change(raw: bytes) -> bytes:
        whole = raw.rstrip(b"\n")
        last = whole.rfind(b"\n")
        if kind in DOCUMENTS or last < 0:
            return whole[: len(whole) * 6 // 10]
        return whole[: last + 1 + (len(whole) - last) // 2]

    return change


CUT = list(KINDS)


@pytest.mark.parametrize("kind", CUT)
def test_a_copy_cut_short_is_refused_in_one_line_naming_the_file_and_line(
    tmp_path: Path, kind: str
) -> None:
    path = copy_of(kind, tmp_path, cut(kind))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(str(path)), text  # the file, or the file in the folder
    assert "line " in text, text
    assert "cut short (was the tool stopped while it wrote the file?)" in text, text


def test_json_lines_cut_in_their_last_record_say_how_many_whole_records_are_before_it(
    tmp_path: Path,
) -> None:
    """AIPerf writes a record a line as requests finish (a buffered JSON-lines writer): killed,
    the last line is cut and the requests still in flight have none. Read up to its last
    whole record, the run would look whole with its slowest requests missing: refused, with
    the count a user keeps by deleting the cut line."""
    path = copy_of("aiperf-jsonl", tmp_path, cut("aiperf-jsonl"))
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert info.value.line == 22
    assert "the file ends inside this record" in info.value.problem
    assert "delete line 22 to read the 21 whole records before it" in info.value.problem


@pytest.mark.parametrize(
    ("kind", "line", "whole"),
    [
        ("records-csv-handmade", 5, 3),
        ("records-jsonl-handmade", 4, 3),
        ("records-csv-measured", 0, 0),
    ],
)
def test_a_records_file_cut_in_its_last_line_is_refused_as_a_tools_is(
    tmp_path: Path, kind: str, line: int, whole: int
) -> None:
    """A records file (a user's script or k6 test writing a line a request as each finishes,
    or an export) cut in its last line was read with that line dropped and a warning, as a
    trace is: the requests after it (in flight, or the rest of the export) gone unsaid in the
    comparison. Refused now as AIPerf's cut JSON lines are; as a trace, the same file keeps
    the trace loader's rule (a trace only sends one request fewer)."""
    path = copy_of(kind, tmp_path, cut(kind))
    if not line:  # the shared file: its last line and the rows before it
        line = len(path.read_text().splitlines())
        whole = line - 2
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert info.value.line == line, str(info.value)
    assert info.value.problem.startswith(
        f"the file ends inside this {'row' if path.suffix == '.csv' else 'record'} (no line "
        "end after it, and it does not read as one), cut short (was the tool stopped while it "
        "wrote the file?)"
    ), str(info.value)
    assert info.value.problem.endswith(
        f"delete line {line} to read the {whole:,} whole records before it as they are"
    ), str(info.value)
    trace = load_trace(path)
    assert trace.report.dropped == (("truncated last line", 1),)
    assert len(trace.workload) == whole


def test_a_yaml_report_cut_at_a_line_end_says_it_may_be_cut(tmp_path: Path) -> None:
    path = copy_of("guidellm-yaml", tmp_path, cut("guidellm-yaml"))
    with pytest.raises(
        TraceError, match="the file does not end with a line end, as a YAML report does: cut short"
    ):
        read_recording(path)


def test_utf16_cut_mid_character_names_the_byte(tmp_path: Path) -> None:
    path = copy_of("vllm-bench-json", tmp_path, lambda raw: ENCODED["utf-16-le"](raw)[:-1])
    with pytest.raises(TraceError) as info:
        read_recording(path)
    size = path.stat().st_size
    assert info.value.problem == (
        "is UTF-16 LE text (its byte-order mark) but ends in the "
        f"middle of a character (cut short) at byte {size - 1}"
    )


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"", "is empty (0 bytes)"),
        (b" \n\r\n", "is empty (only blank space)"),
        (b"\xff\xfe", "is empty (0 bytes)"),
    ],
)
@pytest.mark.parametrize(
    "name", ["burst05.json", "profile_export.jsonl", "benchmarks.yaml", "requests.csv"]
)
def test_an_empty_file_is_said_to_be_empty(
    tmp_path: Path, name: str, content: bytes, said: str
) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(TraceError) as info:
        read_recording(path)
    assert info.value.problem.startswith(said), str(info.value)


def test_a_folder_with_no_data_file_says_what_it_holds(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="is an empty folder: no file of a recording"):
        read_recording(tmp_path)
    (tmp_path / "run_0001").mkdir()
    (tmp_path / "run_0001" / "benchmark.log").write_text("INFO started\n")
    (tmp_path / "notes.txt").write_text("rate 8\n")
    with pytest.raises(TraceError) as info:
        read_recording(tmp_path)
    assert info.value.problem.startswith("holds no file a recording is read from"), info.value
    assert "notes.txt, run_0001/benchmark.log" in info.value.problem
    # a recording's file two folders down (a sweep's, AIPerf's profile_runs/run_NNNN/) is no
    # empty folder: the readers name what is there
    (tmp_path / "profile_runs" / "run_0001").mkdir(parents=True)
    (tmp_path / "profile_runs" / "run_0001" / "profile_export.jsonl").write_text("{}\n")
    with pytest.raises(TraceError) as info:
        read_recording(tmp_path)
    assert not info.value.problem.startswith(("holds no file", "is an empty folder")), info.value


@pytest.mark.parametrize("kind", ["kvbudget-run-parquet", "genai-bench-folder", "vllm-bench-json"])
def test_an_archive_of_a_run_names_how_to_unpack_it_and_what_it_holds(
    tmp_path: Path, kind: str
) -> None:
    """A zip or tar.gz of a run folder (or of one file) was refused with the unpack line
    alone: the user had to unpack it to learn which file or folder to give. Its member list,
    read without extracting (zip's central directory, the tar's headers), is named now: the
    folder to give and its files, or the file. Said by validate and simulate alike (one
    place, the trace loader's file facts)."""
    src = KINDS[kind][0]
    members = (
        sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
        if src.is_dir()
        else []
    )
    zipped = tmp_path / f"{src.name}.zip"
    with zipfile.ZipFile(zipped, "w") as z:
        for p in [src, *sorted(src.rglob("*"))] if src.is_dir() else [src]:
            z.write(p, p.relative_to(src.parent))
    tarred = tmp_path / f"{src.name}.tar.gz"
    with tarfile.open(tarred, "w:gz") as t:
        t.add(src, arcname=src.name)
    if src.is_dir():
        shown = ", ".join(members[:10]) + (", ..." if len(members) > 10 else "")
        holds = f"it holds the folder {src.name}/ ({shown}; {len(members)} files): give {src.name} once unpacked"
    else:
        holds = f"it holds {src.name} (1 file)"
    for archive, said in (
        (
            zipped,
            f"is zip-compressed: decompress it first (unzip {zipped.name}) and give the "
            "file or folder it writes",
        ),
        (
            tarred,
            f"is a gzip-compressed tar archive: unpack it first (tar -xzf {tarred.name}) "
            "and give the file or folder it holds",
        ),
    ):
        with pytest.raises(TraceError) as info:
            read_recording(archive)
        assert info.value.problem == f"{said}; {holds}", (archive.name, info.value.problem)
        with pytest.raises(TraceError) as info:
            load_trace(archive)
        assert info.value.problem == f"{said}; {holds}", (archive.name, info.value.problem)


def test_a_cut_archive_says_its_list_cannot_be_read(tmp_path: Path) -> None:
    src = KINDS["kvbudget-run-parquet"][0]
    tarred = tmp_path / "run.tar.gz"
    with tarfile.open(tarred, "w:gz") as t:
        t.add(src, arcname=src.name)
    tarred.write_bytes(tarred.read_bytes()[:300])
    with pytest.raises(TraceError) as info:
        read_recording(tarred)
    assert info.value.problem.endswith(
        "; its list of files cannot be read (EOFError: damaged or cut short?)"
    ), info.value.problem


def test_a_utf16_trace_is_read_as_a_recording_is(tmp_path: Path) -> None:
    """A trace to simulate (not a recording) in UTF-16 was "a binary file, not a text trace",
    then refused with an iconv line while validate read the same text: now read as the UTF-8
    original, said once (tests/unit/workloads/test_trace_encodings.py reads every shared
    trace so)."""
    text = b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n"
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "trace.csv").write_bytes(text)
    path = tmp_path / "trace.csv"
    path.write_bytes(ENCODED["utf-16-le"](text))
    loaded = load_trace(path)
    assert loaded.workload.prompt_tokens.tolist() == [10]
    said = set(loaded.report.assumed) - set(load_trace(tmp_path / "a" / "trace.csv").report.assumed)
    assert said == {"read trace.csv as UTF-16 LE text (the byte-order mark it starts with)"}


def test_validate_reads_a_utf16_copy_and_refuses_a_cut_one_in_one_line(tmp_path: Path) -> None:
    """The found case end to end: vLLM bench's burst05.json through PowerShell."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    good = copy_of("vllm-bench-json", tmp_path / "a", ENCODED["utf-16-le"])
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(good),
            "--model",
            "Llama-3.1-8B",
            "--out",
            str(tmp_path / "v"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "read burst05.json as UTF-16 LE text (the byte-order mark it starts with)" in " ".join(
        res.output.split()
    )
    bad = copy_of("vllm-bench-json", tmp_path / "b", cut("vllm-bench-json"))
    res = CliRunner().invoke(
        app,
        [
            "validate",
            "--records",
            str(bad),
            "--model",
            "Llama-3.1-8B",
            "--out",
            str(tmp_path / "w"),
        ],
    )
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and "line 1: not valid JSON: the file ends inside the document, cut short" in lines[0]
    ), lines


@pytest.mark.parametrize("version", ["0.2.1", "0.6.1", "0.8.1"])
def test_a_guidellm_yaml_report_cut_at_a_line_end_is_refused_not_read_short(
    tmp_path: Path, version: str
) -> None:
    """Still YAML, a report cut at a line's end read as a whole run with its last requests
    gone: the 0.8.1 report cut at 90% of its lines read 16 of its 20 requests and said
    nothing. GuideLLM's ``yaml.dump`` sorts keys, so the last benchmark's ``type_`` (after its
    requests) and, from 0.5, the ``metadata`` after the benchmarks tell a whole report."""
    src = FIXTURES / f"guidellm-{version}" / "constant.yaml"
    lines = src.read_bytes().splitlines(keepends=True)
    path = tmp_path / "benchmarks.yaml"
    for fraction in (0.2, 0.5, 0.9, 0.99, *((0.999,) if version == "0.8.1" else ())):
        # a cut after the last benchmark's type_: the test below
        keep = int(len(lines) * fraction)
        path.write_bytes(b"".join(lines[:keep]))
        with pytest.raises(TraceError) as info:
            read_recording(path)
        assert info.value.line == keep, (fraction, str(info.value))
        assert info.value.problem.endswith(
            "cut short (was the tool stopped while it wrote the file?)"
        ), (fraction, info.value)
    path.write_bytes(b"".join(lines))
    assert len(read_recording(path)) == len(read_recording(src))


@pytest.mark.parametrize("version", ["0.2.1", "0.3.1", "0.4.0", "0.5.4", "0.6.1"])
def test_a_guidellm_yaml_report_cut_after_its_last_type_is_refused(
    tmp_path: Path, version: str
) -> None:
    """Cut at any line after the last benchmark's ``type_`` (a killed run, a copy
    interrupted), a 0.2-0.6 report lost what GuideLLM's sorted ``yaml.dump`` writes after it:
    0.2-0.3's ``worker``, 0.4-0.6's ``warmup_duration``, 0.5-0.6's ``metadata`` with its
    version, and read as whole. Each such cut is refused in one line; whole, it reads."""
    src = FIXTURES / f"guidellm-{version}" / "constant.yaml"
    lines = src.read_bytes().splitlines(keepends=True)
    last_type = max(i for i, line in enumerate(lines) if line.startswith(b"  type_: "))
    path = tmp_path / "constant.yaml"
    assert len(lines) > last_type + 1  # something comes after it in every version
    for keep in range(last_type + 1, len(lines)):
        path.write_bytes(b"".join(lines[:keep]))
        with pytest.raises(TraceError) as info:
            read_recording(path)
        text = str(info.value)
        assert "\n" not in text and info.value.line == keep, (keep, text)
        assert text.endswith("cut short (was the tool stopped while it wrote the file?)"), text
    path.write_bytes(b"".join(lines))
    assert len(read_recording(path)) == len(read_recording(src))
