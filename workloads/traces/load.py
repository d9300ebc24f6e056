"""``load_trace``: detect the format, read the file, validate and transform it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

import kvbudget.workloads.traces._tabular as _tabular
from kvbudget.workloads.errors import TraceError, UnknownFileError
from kvbudget.workloads.errors import json_problem as _json_problem
from kvbudget.workloads.text_files import (
    COMMENT_SAID,
    TEXT_OF_NO_TOOL,
    comment_first_line,
    encoding_of,
    encoding_said,
    head_utf8,
    utf8_file,
)
from kvbudget.workloads.traces._csv import split_header
from kvbudget.workloads.traces._files import (
    SERVEGEN_CHUNK,
    check_readable,
    file_facts,
    is_servegen_path,
    refuse_run_directory,
)
from kvbudget.workloads.traces._finish import RawTrace, Streams, finish
from kvbudget.workloads.traces._servegen import load_servegen
from kvbudget.workloads.traces.options import FORMATS, TraceOptions
from kvbudget.workloads.traces.report import LoadedTrace

Loader = Callable[[Path, TraceOptions, Streams], RawTrace]
_GENERIC_HINT = {"arrival_s", "prompt_tokens", "output_tokens"}


def _loader(fmt: str) -> Loader:
    if fmt == "servegen":
        return load_servegen
    loaders: dict[str, Loader] = {
        "azure": _tabular.load_azure,
        "burstgpt": _tabular.load_burstgpt,
        "mooncake": _tabular.load_mooncake,
        "lengths": _tabular.load_lengths,
        "splitwise": _tabular.load_splitwise,
        "generic": _tabular.load_generic,
    }
    return loaders[fmt]


RECORDING_HINT = ("a load tool's result (vllm bench serve, GuideLLM, AIPerf, inference-perf, "
                  "llm-load-test) is a recording, not a trace: kvbudget validate --records "
                  "FILE simulates its requests and compares; kvbudget trace convert FILE --out "
                  "T.csv writes them as a trace T.csv for a what-if (--trace T.csv "
                  "--rate-scale 2: twice its rate)")
"""Said where a file fits no trace format: the load tools' results are read as recordings."""


def _signatures() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Each format's columns (fields of a JSON record) that tell it, as its publisher names
    them."""
    return (("azure", _tabular.AZURE_COLUMNS), ("burstgpt", _tabular.BURSTGPT_COLUMNS),
            ("lengths", _tabular.LENGTH_COLUMNS), ("splitwise", _tabular.SPLITWISE_COLUMNS))


def _refuse_one_short(path: Path, names: list[str],
                      signatures: tuple[tuple[str, tuple[str, ...]], ...], what: str) -> None:
    """A header (or first record) that has all but one of a format's telling columns is that
    format with a column missing (a BurstGPT file whose ``Response tokens`` was renamed): the
    error names the column, not "cannot tell the trace format"."""
    for fmt, columns in signatures:
        missing = [c for c in columns if c not in names]
        if len(missing) == 1:
            shown = ", ".join(names)
            if len(shown) > 120:
                shown = shown[:117] + "..."
            where = "header" if what == "column" else "first record"
            raise TraceError(path, f"missing {what} {missing[0]!r}: the others of the {fmt} "
                             f"format are there (the {where} has: {shown})", line=1,
                             field=missing[0])


DOCUMENT_BYTES = 64 << 20
"""The largest file read whole to tell an indented JSON document from a broken line."""


def _one_document(path: Path) -> bool:
    """Whether the file is one JSON document (of at most :data:`DOCUMENT_BYTES`)."""
    if path.stat().st_size > DOCUMENT_BYTES:
        return False
    try:
        json.loads(path.read_bytes())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError):
        return False
    return True


def detect_format(path: str | Path, options: TraceOptions | None = None) -> str:
    """The format of a trace file, from its name, its first bytes and its header (of its text
    as UTF-8: :mod:`kvbudget.workloads.text_files`)."""
    path = Path(path)
    if not is_servegen_path(path) and encoding_of(path) is not None:
        with utf8_file(path) as readable:
            return detect_format(readable, options)
    if is_servegen_path(path):
        if path.is_dir() and not any(SERVEGEN_CHUNK.search(p.name) for p in path.iterdir()):
            # a kvbudget run directory is named so; a load tool's output folder, say, is no
            # trace: callers that read recordings refuse it by their own reason (which names
            # the file to pass)
            refuse_run_directory(path)
            raise TraceError(path, "holds no ServeGen chunk-N-trace.csv files")
        return "servegen"
    check_readable(path)
    with path.open("rb") as fh:
        magic = fh.read(4)
    if magic == b"PAR1" or path.suffix.lower() in (".parquet", ".pq"):
        return "generic"
    facts = file_facts(path)
    first = facts.first_line.strip()
    mapped = set((options.columns or {}).values()) if options else set()
    if first.startswith("{"):
        try:
            record = json.loads(first)
        except (json.JSONDecodeError, RecursionError) as exc:
            if facts.first_line_cut:  # not read whole: no claim on its JSON
                raise UnknownFileError(path, "its first line runs on past 64 KiB, too long to tell "
                                       "a trace format from (a JSON lines trace has one request a "
                                       f"line, with its token counts); {RECORDING_HINT}",
                                       line=1) from None
            if isinstance(exc, json.JSONDecodeError) and exc.pos >= len(first) \
                    and _one_document(path):
                # the line ended before its value did: a document indented over several lines
                raise UnknownFileError(path, "its first line opens a JSON value that goes on past "
                                       "it (one JSON document over several lines), not a trace: a "
                                       "JSON lines trace has one request a line, with its token "
                                       f"counts; {RECORDING_HINT}", line=1) from None
            raise UnknownFileError(path, f"not valid JSON ({_json_problem(exc)}): a JSON lines "
                                   f"trace has one request a line; {RECORDING_HINT}",
                                   line=1) from None
        keys = set(record) if isinstance(record, dict) else set()
        if {"timestamp", "input_length", "output_length"} <= keys:
            return "mooncake"
        if _GENERIC_HINT & keys or mapped & keys:
            return "generic"
        _refuse_one_short(path, [str(k) for k in record] if isinstance(record, dict) else [],
                          (("mooncake", _tabular.MOONCAKE_FIELDS),), "field")
        names = sorted(map(str, keys))
        shown = ", ".join(names[:8]) + (f", ... ({len(names)} keys)" if len(names) > 8 else "")
        raise UnknownFileError(path, f"cannot tell the trace format from the first record (keys: "
                               f"{shown}); pass a format; {RECORDING_HINT}", line=1)
    if first.startswith("["):
        raise UnknownFileError(path, "is a JSON array, not a trace: a trace has one request a "
                               "line (CSV with a header, or JSON lines) with its token counts; a "
                               "dataset of conversations (ShareGPT's) holds text: count its tokens "
                               "with the model's tokenizer and write arrival_s, prompt_tokens, "
                               f"output_tokens; {RECORDING_HINT}", line=1)
    columns = split_header(first)
    header = set(columns)
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= header:
        return "azure"
    if {"Timestamp", "Request tokens", "Response tokens"} <= header:
        return "burstgpt"
    if {"num_prefill_tokens", "num_decode_tokens"} <= header:
        return "lengths"
    if set(_tabular.SPLITWISE_COLUMNS) <= header:
        return "splitwise"
    if _GENERIC_HINT & header or mapped & header:
        return "generic"
    _refuse_one_short(path, columns, _signatures(), "column")
    comment = comment_first_line(head_utf8(path, 1 << 12))
    if comment:
        raise UnknownFileError(path, f"its first line {comment[:80]!r} {COMMENT_SAID}: "
                               f"{TEXT_OF_NO_TOOL}, no trace (a CSV with a header, or JSON "
                               "lines, one request a line)", line=1)
    raise UnknownFileError(path, f"cannot tell the trace format from the header {first[:80]!r}; "
                           f"pass a format ({', '.join(FORMATS)}); {RECORDING_HINT}", line=1)


RUN_RECORDS = frozenset({"status", "first_token_s", "ttft_s"})
"""Columns of a run's records (``kvbudget simulate --out``'s ``requests.parquet``), which no
trace has."""


def _first_names(path: Path) -> set[str] | None:
    """The columns of a generic file (its header, first JSON line's keys or Parquet schema),
    or None where they cannot be read here (the loader's own error says why)."""
    try:
        if path.suffix.lower() in (".parquet", ".pq"):
            import pyarrow.parquet as pq

            return set(pq.read_schema(path).names)
        first = file_facts(path).first_line.strip()
        return set(json.loads(first)) if first.startswith("{") else set(split_header(first))
    except Exception:
        return None


def _has_arrivals(path: Path, options: TraceOptions) -> bool:
    """Whether a generic file has a send-time column (``arrival_s``, or the one mapped to it);
    True where its columns cannot be read."""
    names = _first_names(path)
    return names is None or (options.columns or {}).get("arrival_s", "arrival_s") in names


def _check_not_run_records(path: Path) -> None:
    """A run's records given as a trace are refused: their ``output_tokens`` are what the run
    generated (0 for a refused request, part of the answer for a dropped one), not what the
    requests would, and their prefix hashes are gone."""
    names = _first_names(path)
    if names is not None and names >= RUN_RECORDS:
        raise TraceError(path, "is a run's records (its status, ttft_s, first_token_s), not a "
                         "trace: their output_tokens are what the run generated, not what the "
                         "requests ask for; give the trace the run read (the generic format, "
                         "given, reads it anyway)")


def _check_applicable(path: Path, fmt: str, options: TraceOptions) -> None:
    """Options of one format given for another are refused, not ignored."""
    if fmt != "servegen":
        if options.clients is not None:
            raise TraceError(path, f"servegen clients apply to ServeGen traces, not {fmt}",
                             field="servegen_clients")
        if options.servegen_arrivals != "fitted_rate":
            raise TraceError(path, f"servegen arrivals apply to ServeGen traces, not {fmt}",
                             field="servegen_arrivals")
    if fmt != "generic":
        if options.columns:
            raise TraceError(path, f"columns (--column) apply to the generic format, not {fmt}",
                             field="columns")
        if options.arrival_unit != "s":
            raise TraceError(path, f"arrival_unit applies to the generic format, not {fmt}",
                             field="arrival_unit")


def trace_seed(seed: int) -> int:
    """The seed of the trace a scenario with ``seed`` loads when its ``[workload]`` table
    gives none: the first draw of the scenario's generator, as
    ``TraceWorkloadSpec.build`` draws it. Called by the load only
    when it draws (a timed trace read whole draws nothing, and skips importing
    ``numpy.random``)."""
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    return int(rng.integers(0, 2**31 - 1))


def load_trace(path: str | Path, options: TraceOptions | None = None, *,
               seed: Callable[[], int] | None = None) -> LoadedTrace:
    """Load a trace file (or a ServeGen directory) as a workload with a load report.

    The random choices (sampling, tier shares, synthetic arrivals, ServeGen's clients) draw
    from ``options.seed``; where that is ``None``, from the seed ``seed()`` gives, called only
    when the load draws at all (0 without ``seed``). A file in UTF-16 or UTF-32 (its
    byte-order mark) is read as its text in UTF-8 (:mod:`kvbudget.workloads.text_files`, as a
    recording is), said in one ``assumed`` line; a UTF-8 mark changes nothing.

    Raises :class:`~kvbudget.workloads.errors.TraceError` (a ``ValueError``) naming the file, the line
    or row and the field for anything it cannot load.
    """
    options = options or TraceOptions()
    path = Path(path)
    if is_servegen_path(path) or encoding_of(path) is None:  # UTF-8, a mark or none
        return _load(path, options, seed)
    # UTF-16 or UTF-32 (Windows PowerShell 5's > and Out-File): its text read as UTF-8, as a
    # recording's is, and said once
    with utf8_file(path) as readable:
        loaded = _load(readable, options, seed)
    said = encoding_said([path])
    assumed = (*loaded.report.assumed, *((said,) if said else ()))
    meta = {**loaded.workload.meta, "source": str(path), "assumed": assumed}
    return LoadedTrace(
        workload=dataclasses.replace(loaded.workload, meta=meta),
        report=dataclasses.replace(loaded.report, path=str(path), assumed=assumed),
    )


def _load(path: Path, options: TraceOptions, seed: Callable[[], int] | None) -> LoadedTrace:
    fmt = options.format or detect_format(path, options)
    _check_applicable(path, fmt, options)
    if fmt == "generic" and options.format is None:  # a recording's reader names its format
        _check_not_run_records(path)
    streams = Streams.from_seed(options.seed if options.seed is not None else seed or 0)
    try:
        raw = _loader(fmt)(path, options, streams)
    except TraceError as exc:
        if options.format is not None:
            try:
                detected = detect_format(path, options)
            except TraceError:
                detected = None
            if detected is not None and detected != options.format:
                raise TraceError(exc.path, f"{exc.problem} (is the format right? the file "
                                 f"looks like {detected}, not {options.format})", line=exc.line,
                                 row=exc.row, field=exc.field) from None
        elif fmt == "generic" and exc.problem.startswith("missing column") and \
                not _has_arrivals(path, options):
            # a table with a token column but no send time nor the other count (vllm_bench's
            # engines.csv: prompt_tokens beside generation_tokens, one row a trial) is likelier
            # a load tool's output than a trace: the way to recordings is said too
            raise UnknownFileError(exc.path, f"{exc.problem}; {RECORDING_HINT}", line=exc.line,
                                   row=exc.row, field=exc.field) from None
        raise
    return finish(raw, options, streams)
