"""A deterministic sample of single-point damage swept over every recording fixture that
``read_recording`` reads: the result file (and the files read beside it: AIPerf's summary,
inference-perf's stage files and config, evalscope's ``benchmark_args.json``, genai-bench's
metadata, a replay's ``replay.json``) broken at one key path at a time (deleted, null, a
string, negative, 0, NaN, Infinity, 1e300, an empty list or object, a list where a value was, a
number where a list was, a boolean), a JSON-lines file at one line (dropped, repeated, cut,
swapped), an evalscope database at one cell or column. Each damaged copy is read, or refused
with :class:`TraceError` in one line that names the damaged file (not only the run folder it is
in: evalscope's ``benchmark_data.db`` and genai-bench's ``experiment_metadata.json`` were
refused naming their folder): never another exception, which the command line would show as a
traceback or as a line naming no file.

The sample is ``_budget`` mutations of each file's list, evenly spaced (the list is built
here from the fixture, deterministic), so each fixture is read a few dozen times at most.
GuideLLM's YAML reports over 16 KiB are left to their JSON twins (the same reader, a second a
read).
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml  # type: ignore[import-untyped]  # pyyaml ships no type hints

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError
from tests.unit.results.excerpts import set_excerpt_counts

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
REC = FIXTURES / "recordings"
READ_BYTES = 1_000_000
"""About how many bytes of a file its sample reads (a large file gets fewer mutations)."""
DELETE = object()
AS_LIST = object()
NEGATIVE = object()
VALUES: tuple[tuple[str, Any], ...] = (
    ("deleted", DELETE),
    ("null", None),
    ("a string", "x"),
    ("negative", NEGATIVE),
    ("0", 0),
    ("NaN", math.nan),
    ("Infinity", math.inf),
    ("1e300", 1e300),
    ("[]", []),
    ("{}", {}),
    ("a list", AS_LIST),
    ("a number for a list", 5),
    ("true", True),
)
NOT_READ = (
    "recordings/aiperf-0.13.0/unstreamed_concurrency2.jsonl",
    "recordings/evalscope-1.14.1/all_failed",
    "recordings/evalscope-1.14.1/unstreamed",
    "recordings/genai-bench-0.0.5/all_failed",
    "recordings/inference-perf-0.7.0/all_failed",
    "recordings/sglang-0.5.9/gsp_turns2_rate8.jsonl",
    "recordings/vllm-bench-0.32.0/offline",
    "recordings/vllm-bench-0.32.0/pooling",  # pooling runs (test_vllm_bench_pooling_runs)
    "recordings/vllm-bench-0.33.0/pooling",
    "recordings/vllm-bench-0.34.0/pooling",
    "recordings/vllm-bench-0.33.0/server_down.json",
    "recordings/vllm-bench-0.34.0/server_down.json",
    "recordings/vllm-benchmark-0.1.1",  # vllm_bench's: no request (test_recording_vllm_benchmark)
)
"""Fixtures read_recording refuses as they are (their own tests check why)."""
PUBLISHED = (
    "aiperf-gpt-oss-20b-cancel10-excerpt/profile_export.jsonl",
    "aiperf-qwen-concurrency1-excerpt/profile_export.jsonl",
    "dstack-vllm-405b-fp8-16qps-excerpt.json",
    "genai-bench-baseten-gpt-oss-120b-nonstreamed-excerpt",
    "genai-bench-baseten-qwen3-30b-excerpt",
    "guidellm-pipeline-llama-3-2-3b-excerpt.yaml",
    "guidellm-results-parser-qwen3-0.6b-constant10-excerpt.json",
    "inference-perf-0.5-llmd-qwen3-30b-excerpt/per_request_lifecycle_metrics.json",
    "inference-sim-jan20-codellama-prefill-1-excerpt.json",
    "llm-load-test-v2-draft-caikit-excerpt.json",
)
"""The published excerpts read as recordings (the others are refused by design)."""


def _units() -> list[Path]:
    """Each file or folder read_recording reads among the fixtures made by running the tools
    here (and the published excerpts it reads)."""
    found: list[Path] = [
        *REC.glob("aiperf-*/**/*.jsonl"),
        *REC.glob("sglang-*/*.jsonl"),
        *REC.glob("vllm-*/**/*.json"),
        *REC.glob("vllm-*/**/*.jsonl"),
        *REC.glob("guidellm-*/*.json"),
        *(p for p in REC.glob("guidellm-*/*.yaml") if p.stat().st_size < 16 << 10),
        *REC.glob("inference-perf-*/**/per_request_lifecycle_metrics.json"),
        *(p.parent for p in REC.glob("evalscope-*/**/benchmark_data.db")),
        *(p.parent for p in REC.glob("genai-bench-*/*/experiment_metadata.json")),
        *REC.glob("dynamo-*/*.jsonl"),
        *(REC / "published" / name for name in PUBLISHED),
        FIXTURES / "runs" / "kvbudget-replay-vllm-0.32.0-dp2",
    ]
    return sorted(p for p in found if not str(p.relative_to(FIXTURES)).startswith(NOT_READ))


def _members(unit: Path) -> list[Path]:
    """The files a reader reads for ``unit``: the ones damaged."""
    if unit.is_dir():
        return sorted(
            p
            for p in unit.iterdir()
            if p.suffix in (".json", ".db", ".yaml")
            and not p.name.startswith(("benchmark_percentile", "benchmark_summary"))
        )
    beside = [
        unit.with_name(unit.stem + "_aiperf.json"),
        unit.with_name("profile_export_aiperf.json"),
        unit.with_name("inputs.json"),
        *sorted(unit.parent.glob("stage_*_lifecycle_metrics.json")),
        unit.with_name("config.yaml"),
    ]
    read_beside = unit.suffix == ".jsonl" or unit.name == "per_request_lifecycle_metrics.json"
    return [unit, *(p for p in beside if read_beside and p.is_file())]


def _key_paths(doc: Any) -> list[tuple[Any, ...]]:
    """Every key path of ``doc``, a list's items at its first, middle and last index."""
    found: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        if isinstance(node, dict):
            items = list(node.items())
        elif isinstance(node, list):
            items = [(i, node[i]) for i in sorted({0, len(node) // 2, len(node) - 1}) if node]
        else:
            return
        for key, value in items:
            found.append((*path, key))
            walk(value, (*path, key))

    walk(doc, ())
    return found


def _damaged(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = copy.deepcopy(doc)
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    old = parent[path[-1]]
    if value is DELETE:
        del parent[path[-1]]
    elif value is NEGATIVE:
        number = isinstance(old, int | float) and not isinstance(old, bool)
        parent[path[-1]] = -abs(old) if number and old else -1
    elif value is AS_LIST:
        parent[path[-1]] = [old] if not isinstance(old, list | dict) else [1, 2]
    else:
        parent[path[-1]] = copy.deepcopy(value)
    return doc


Writer = Callable[[Path], object]


def _document_damage(path: Path) -> Iterator[tuple[str, Writer]]:
    text = path.read_text(encoding="utf-8")
    yaml_file = path.suffix == ".yaml"
    doc = yaml.safe_load(text) if yaml_file else json.loads(text)

    for key_path in _key_paths(doc):
        for how, value in VALUES:
            label = f"{'.'.join(map(str, key_path))} {how}"
            yield (
                label,
                partial(_write_document, doc=doc, at=key_path, value=value, as_yaml=yaml_file),
            )
    yield "cut in half", partial(_write_text, text=text[: len(text) // 2])


def _write_text(dst: Path, text: str) -> None:
    dst.write_text(text)


def _write_document(dst: Path, doc: Any, at: tuple[Any, ...], value: Any, as_yaml: bool) -> None:
    damaged = _damaged(doc, at, value)
    dst.write_text(yaml.safe_dump(damaged, sort_keys=False) if as_yaml else json.dumps(damaged))


def _write_line(dst: Path, lines: list[str], i: int, at: tuple[Any, ...], value: Any) -> None:
    record = json.dumps(_damaged(json.loads(lines[i]), at, value))
    dst.write_text("".join([*lines[:i], record + "\n", *lines[i + 1 :]]))


def _lines_damage(path: Path) -> Iterator[tuple[str, Writer]]:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for i in sorted({0, len(lines) // 2}):
        record = json.loads(lines[i])
        for key_path in _key_paths(record):
            for how, value in VALUES:
                yield (
                    f"line {i + 1} {'.'.join(map(str, key_path))} {how}",
                    partial(_write_line, lines=lines, i=i, at=key_path, value=value),
                )
    for i in sorted({0, len(lines) // 2, len(lines) - 1}):
        for how, new in (
            ("dropped", lines[:i] + lines[i + 1 :]),
            ("repeated", lines[: i + 1] + lines[i:]),
            ("cut", [*lines[:i], lines[i][: len(lines[i]) // 2] + "\n", *lines[i + 1 :]]),
            ("null", [*lines[:i], "null\n", *lines[i + 1 :]]),
        ):
            yield f"line {i + 1} {how}", partial(_write_text, text="".join(new))
    swapped = [lines[-1], *lines[1:-1], lines[0]]
    yield "first and last lines swapped", partial(_write_text, text="".join(swapped))


def _database_damage(path: Path) -> Iterator[tuple[str, Writer]]:
    with sqlite3.connect(path) as con:
        columns = [r[1] for r in con.execute("PRAGMA table_info(result)")]
        rowids = [r[0] for r in con.execute("SELECT rowid FROM result ORDER BY rowid")]

    def run(sql: str, *args: Any) -> Writer:
        def write(dst: Path) -> None:
            shutil.copy(path, dst)
            con = sqlite3.connect(dst)
            con.execute(sql, args)
            con.commit()
            con.close()

        return write

    for row in sorted({rowids[0], rowids[len(rowids) // 2]}):
        for column in columns:
            for how, value in (
                ("null", None),
                ("a string", "x"),
                ("negative", -1),
                ("0", 0),
                ("1e300", 1e300),
                ("Infinity", math.inf),
            ):
                yield (
                    f"row {row} {column} {how}",
                    run(f'UPDATE result SET "{column}"=? WHERE rowid=?', value, row),
                )
    for column in columns:
        yield f"column {column} dropped", run(f'ALTER TABLE result DROP COLUMN "{column}"')


def _damage(path: Path, main: bool) -> list[tuple[str, Writer]]:
    """The sample of ``path``'s damage: evenly spaced over its whole list."""
    every = list(
        _database_damage(path)
        if path.suffix == ".db"
        else _lines_damage(path)
        if path.suffix == ".jsonl"
        else _document_damage(path)
    )
    budget = max(6, min(24, READ_BYTES // max(path.stat().st_size, 1))) if main else 6
    if len(every) <= budget:
        return every
    return [every[round(k * (len(every) - 1) / (budget - 1))] for k in range(budget)]


@pytest.mark.parametrize("unit", _units(), ids=lambda p: str(p.relative_to(FIXTURES)))
def test_damage_is_read_or_refused_naming_the_file(tmp_path: Path, unit: Path) -> None:
    base = unit.parent if unit.is_file() else unit
    work = tmp_path / base.name
    shutil.copytree(base, work)
    target = work / unit.name if unit.is_file() else work
    if unit.is_relative_to(REC / "published"):  # an excerpt: its counts set to its requests
        set_excerpt_counts(target)
    read_recording(target)  # undamaged, the copy reads
    tried, problems = 0, []
    for member in _members(unit):
        copied = work / member.relative_to(base)
        original = copied.read_bytes()
        for label, write in _damage(member, member == unit or unit.is_dir()):
            write(copied)
            tried += 1
            try:
                read_recording(target)
            except TraceError as exc:
                said = str(exc)
                if "\n" in said or copied.name not in said:  # the damaged file, not its folder
                    problems.append(f"{member.name}: {label}: refused as {said!r}")
            except Exception as exc:  # what a user would see as a traceback
                problems.append(f"{member.name}: {label}: {type(exc).__name__}: {exc}")
            finally:
                copied.write_bytes(original)
    assert tried >= 5, tried
    assert not problems, "\n".join(problems)


SPOTS: tuple[tuple[str, str, int | None, tuple[Any, ...], Any, str | None], ...] = (
    # unit, damaged file, its line (JSON lines), key path, value, field the refusal names
    # (None: read as it is). Each raised another exception before (the sweep's findings).
    (
        "recordings/inference-perf-0.7.0/concurrent/per_request_lifecycle_metrics.json",
        "per_request_lifecycle_metrics.json",
        None,
        (0, "info"),
        "x",
        "row 0: field 'info'",
    ),
    (
        "recordings/inference-perf-0.7.0/multi_turn_chat/per_request_lifecycle_metrics.json",
        "per_request_lifecycle_metrics.json",
        None,
        (15, "info", "request_metrics", "text", "input_tokens"),
        1e300,
        "info.input_tokens",
    ),
    (
        "recordings/genai-bench-0.0.5/closed",
        "experiment_metadata.json",
        None,
        ("num_concurrency", 0),
        [],
        "num_concurrency",
    ),
    (
        "recordings/genai-bench-0.0.5/closed",
        "D32_128_text-to-text_num_concurrency_1_time_4s.json",
        None,
        ("_time_unit",),
        [],
        "_time_unit",
    ),
    (
        "recordings/genai-bench-0.0.5/closed",
        "D32_128_text-to-text_num_concurrency_2_time_3s.json",
        None,
        ("individual_request_metrics", 0, "num_input_tokens"),
        -5,
        "D32_128_text-to-text_num_concurrency_2_time_3s.json: field "
        "'individual_request_metrics[0].num_input_tokens'",
    ),
    (
        "recordings/vllm-bench-0.10.2/rate8.json",
        "rate8.json",
        None,
        ("burstiness",),
        "x",
        "burstiness",
    ),
    (
        "recordings/vllm-bench-0.10.2/rate8.json",
        "rate8.json",
        None,
        ("burstiness",),
        -1,
        "burstiness",
    ),
    (
        "recordings/guidellm-0.7.4/cancelled.json",
        "cancelled.json",
        None,
        ("benchmarks", 0, "requests", "incomplete", 0, "info", "scheduler_process_id"),
        [],
        None,
    ),
    (
        "recordings/guidellm-0.8.1/turns3_concurrent2.json",
        "turns3_concurrent2.json",
        None,
        ("benchmarks", 0, "requests", "successful", 6, "info", "settings", "requeue_delay"),
        math.inf,
        "info.settings.requeue_delay",
    ),
    (
        "recordings/published/inference-sim-jan20-codellama-prefill-1-excerpt.json",
        "inference-sim-jan20-codellama-prefill-1-excerpt.json",
        None,
        ("benchmarks", 1, "scheduler_metrics", "requests_made"),
        "x",
        None,
    ),
    (
        "recordings/evalscope-1.14.1/capped/parallel_2_number_12",
        "benchmark_args.json",
        None,
        ("number",),
        "x",
        None,
    ),
    (
        "recordings/evalscope-1.14.1/capped/parallel_2_number_12",
        "benchmark_args.json",
        None,
        ("duration",),
        math.inf,
        "benchmark_args.json: field 'duration'",
    ),
    (
        "recordings/aiperf-0.13.0/multiturn3_delay300_rate4c2.jsonl",
        "multiturn3_delay300_rate4c2.jsonl",
        0,
        ("metadata", "request_start_ns"),
        0,
        "line 1: field 'metadata.request_start_ns'",
    ),
    (
        "recordings/aiperf-0.13.0/capped8c2.jsonl",
        "capped8c2.jsonl",
        0,
        ("metadata", "request_start_ns"),
        -1,
        "line 1: field 'metadata.request_start_ns'",
    ),
    (
        "recordings/published/aiperf-gpt-oss-20b-cancel10-excerpt/profile_export.jsonl",
        "profile_export.jsonl",
        0,
        ("metadata", "timestamp_ns"),
        0,
        "line 1: field 'metadata.request_start_ns'",
    ),
    (
        "recordings/vllm-otel-0.32.0/rate8.jsonl",
        "rate8.jsonl",
        0,
        ("resourceSpans", 0, "scopeSpans", 0, "spans", 0, "attributes", 12, "value", "intValue"),
        math.inf,
        None,
    ),
    (
        "runs/kvbudget-replay-vllm-0.32.0-dp2",
        "replay.json",
        None,
        ("kv_capacity_tokens",),
        None,
        None,
    ),
)


@pytest.mark.parametrize(
    ("unit", "member", "line", "at", "value", "field"),
    SPOTS,
    ids=[f"{s[1]}:{'.'.join(map(str, s[3]))}={s[4]!r}" for s in SPOTS],
)
def test_damage_the_sweep_found(
    tmp_path: Path,
    unit: str,
    member: str,
    line: int | None,
    at: tuple[Any, ...],
    value: Any,
    field: str | None,
) -> None:
    source = FIXTURES / unit
    base = source.parent if source.is_file() else source
    shutil.copytree(base, tmp_path / base.name)
    target = tmp_path / base.name / source.name if source.is_file() else tmp_path / base.name
    damaged = tmp_path / base.name / member
    if line is None:
        _write_document(damaged, json.loads(damaged.read_text()), at, value, as_yaml=False)
    else:
        _write_line(damaged, damaged.read_text().splitlines(keepends=True), line, at, value)
    if field is None:
        read_recording(target)
        return
    with pytest.raises(TraceError) as refused:
        read_recording(target)
    assert field in str(refused.value) and damaged.name in str(refused.value), refused.value


def test_a_replays_impossible_latency_is_refused(tmp_path: Path) -> None:
    """A live replay's requests.parquet with an E2E of 1e300 s was read as measured."""
    run = tmp_path / "run"
    shutil.copytree(FIXTURES / "runs" / "kvbudget-replay-vllm-0.32.0-dp2", run)
    table = pq.read_table(run / "requests.parquet")
    e2e = table.column("e2e_s").to_pylist()
    e2e[3] = 1e300
    k = table.column_names.index("e2e_s")
    pq.write_table(
        table.set_column(k, "e2e_s", pa.array(e2e, pa.float64())), run / "requests.parquet"
    )
    with pytest.raises(TraceError, match=r"requests\.parquet: row 3: field 'e2e_s': implausibly"):
        read_recording(run)


def test_a_sweeps_damaged_row_names_its_run_database_and_row(tmp_path: Path) -> None:
    """evalscope's sweep: the second run's fourth row with a negative prompt_tokens was refused
    as the sweep folder's "row 11" (the rows of both runs counted together), naming no file."""
    sweep = tmp_path / "sweep"
    shutil.copytree(REC / "evalscope-1.14.1" / "sweep", sweep)
    db = sweep / "parallel_2_number_12" / "benchmark_data.db"
    with sqlite3.connect(db) as con:
        fourth = con.execute("SELECT rowid FROM result ORDER BY rowid LIMIT 1 OFFSET 3").fetchone()
        con.execute("UPDATE result SET prompt_tokens=-1 WHERE rowid=?", fourth)
    con.close()
    with pytest.raises(TraceError) as refused:
        read_recording(sweep)
    assert str(refused.value) == (
        f"{db}: row 3: field 'result.prompt_tokens': negative value: -1"
    ), refused.value


def test_a_metadata_time_unit_is_refused_naming_the_metadata(tmp_path: Path) -> None:
    """genai-bench's experiment_metadata.json with metrics_time_unit "x" (the runs' files
    saying none) was refused naming a run's file and its '_time_unit', where it is not."""
    folder = tmp_path / "run"
    shutil.copytree(
        REC / "published" / "genai-bench-baseten-gpt-oss-120b-nonstreamed-excerpt", folder
    )
    meta = folder / "experiment_metadata.json"
    doc = json.loads(meta.read_text())
    doc["metrics_time_unit"] = "x"
    meta.write_text(json.dumps(doc))
    with pytest.raises(TraceError) as refused:
        read_recording(folder)
    assert str(refused.value) == f"{meta}: field 'metrics_time_unit': must be s or ms, got 'x'"
