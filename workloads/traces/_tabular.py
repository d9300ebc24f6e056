"""The per-request formats: Azure, BurstGPT, Mooncake, length-only tables and the generic
format (CSV, JSONL, Parquet). Each reads only the columns it needs, by name."""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.workloads.errors import NO_REQUESTS, TraceError
from kvbudget.workloads.errors import json_problem as _json_problem
from kvbudget.workloads.traces._csv import categorical, read_csv_columns, split_header
from kvbudget.workloads.traces._files import FileFacts, file_facts, line_of_row
from kvbudget.workloads.traces._finish import (
    DROP_TRUNCATED,
    RawTrace,
    Streams,
)
from kvbudget.workloads.traces._jsonl import JsonColumns, JsonKind, read_jsonl_columns
from kvbudget.workloads.traces.options import ARRIVAL_UNITS, CANONICAL_COLUMNS, TraceOptions

if TYPE_CHECKING:
    from kvbudget.workloads.traces._csv import CsvColumns, Kind

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
MOONCAKE_FIELDS = ("timestamp", "input_length", "output_length")
LENGTH_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
GENERIC_REQUIRED = ("prompt_tokens", "output_tokens")


def _csv_line_of(path: Path, header_lines: int = 1) -> Any:
    return lambda row: line_of_row(path, row, header_lines=header_lines)


def _note_truncated(raw: RawTrace, facts: FileFacts, dropped_last: bool) -> RawTrace:
    if dropped_last:
        raw.dropped[DROP_TRUNCATED] += 1
        raw.rows_read += 1
        raw.warnings.append(f"the last line looks truncated ({facts.last_line[:60]!r}): dropped")
    raw.unterminated = facts.unterminated and not dropped_last
    return raw


def _labels(cols: CsvColumns | JsonColumns, tier_column: str | None) -> dict[str, Any]:
    if tier_column is None or tier_column not in cols.labels:
        return {}
    return {tier_column: cols.labels[tier_column]}


def _with_tier_column(kinds: dict[str, Any], options: TraceOptions) -> dict[str, Any]:
    if options.tier_column is not None and options.tier_column not in kinds:
        kinds[options.tier_column] = "label"
    return kinds


def _tier_required(options: TraceOptions) -> list[str]:
    return [options.tier_column] if options.tier_column is not None else []


AZURE_IMAGES = "NumImages"
"""Azure's multimodal trace (AzureLMMInferenceDataset2025.md: TIMESTAMP, NumImages,
ContextTokens, GeneratedTokens) counts each request's images beside its context tokens."""


def load_azure(path: Path, options: TraceOptions, streams: Streams) -> RawTrace:
    facts = file_facts(path)
    kinds: dict[str, Kind] = {"TIMESTAMP": "timestamp", "ContextTokens": "number",
                              "GeneratedTokens": "number"}
    cols = read_csv_columns(facts, _with_tier_column(dict(kinds), options), fmt="azure",
                            tier_column=options.tier_column)
    ns = cols.timestamps_ns["TIMESTAMP"]
    second = split_header(facts.second_line) if facts.second_line else []
    header = split_header(facts.first_line)
    stamp = second[header.index("TIMESTAMP")] if len(second) == len(header) else ""
    aware = stamp.rstrip().endswith("Z") or "+" in stamp[10:] or stamp[19:].count("-") > 0
    raw = RawTrace(
        path=path,
        format="azure2024" if aware else "azure2023",
        prompt=cols.numbers["ContextTokens"],
        output=cols.numbers["GeneratedTokens"],
        arrival=ns / 1e9,
        labels=_labels(cols, options.tier_column),
        fields={"arrival_s": "TIMESTAMP", "prompt_tokens": "ContextTokens",
                "output_tokens": "GeneratedTokens"},
        absolute_clock=True,
        rows_read=cols.num_rows,
        line_of=_csv_line_of(path),
    )
    if cols.tz_note:
        raw.warnings.append(cols.tz_note)
    if AZURE_IMAGES in header:
        raw.format = "azure2025-multimodal"
        raw.assumed.append(f"the file's {AZURE_IMAGES} are not read: each request's prompt is its "
                           "ContextTokens, taken to hold its images' tokens")
    return _note_truncated(raw, facts, cols.dropped_last)


BURSTGPT_ORIGIN = "BurstGPT's Timestamp counts seconds from 0:00:00 on its first day"
"""BurstGPT's README (HPMLL/BurstGPT, commit e92f533b, "Schema"): ``Timestamp`` is the
"request submission time, seconds from `0:00:00` on the first day (calibrated to the local time
zone)": a relative clock (rebased here to the first request), never negative."""
BURSTGPT_FAILURES = "as BurstGPT's README marks them: Response tokens 0"
"""BurstGPT's README (same commit, "Data"): ``BurstGPT_1.csv`` "contains all of our trace ...
with some failure that `Response tokens` are `0`s"; its ``BurstGPT_without_fails_1.csv`` holds
the rest (1,429.7k lines against 1,404.3k)."""


BURSTGPT_MODEL = "Model"
"""BurstGPT's README (e92f533b, "Schema"): "`Model`: called models, including `ChatGPT`
(GPT-3.5) and `GPT-4`": one file holds the traffic of two models."""


def load_burstgpt(path: Path, options: TraceOptions, streams: Streams) -> RawTrace:
    """BurstGPT's release files (``Timestamp`` in seconds from its first day's midnight; failed
    requests are the rows with ``Response tokens`` 0: :data:`BURSTGPT_ORIGIN`,
    :data:`BURSTGPT_FAILURES`), read by name whichever of its layouts."""
    facts = file_facts(path)
    header = split_header(facts.first_line)
    kinds: dict[str, Kind] = {"Timestamp": "number", "Request tokens": "number",
                              "Response tokens": "number"}
    if BURSTGPT_MODEL in header:
        kinds[BURSTGPT_MODEL] = "label"
    cols = read_csv_columns(facts, _with_tier_column(dict(kinds), options), fmt="burstgpt",
                            tier_column=options.tier_column)
    raw = RawTrace(
        path=path,
        format="burstgpt_3" if "Session ID" in header else "burstgpt_1",
        prompt=cols.numbers["Request tokens"],
        output=cols.numbers["Response tokens"],
        arrival=cols.numbers["Timestamp"],
        labels=_labels(cols, options.tier_column),
        fields={"arrival_s": "Timestamp", "prompt_tokens": "Request tokens",
                "output_tokens": "Response tokens"},
        absolute_clock=True,
        clock_origin=BURSTGPT_ORIGIN,
        failure_mark=BURSTGPT_FAILURES,
        rows_read=cols.num_rows,
        line_of=_csv_line_of(path),
    )
    _say_models(raw, cols.labels.get(BURSTGPT_MODEL))
    return _note_truncated(raw, facts, cols.dropped_last)


def _say_models(raw: RawTrace, models: Any) -> None:
    """Say that a file holding several models' requests is simulated on the one model given."""
    if models is None:
        return
    codes, values = models
    counts = np.bincount(codes[codes >= 0], minlength=len(values))
    used = [f"{values[i]} {int(counts[i]):,}" for i in np.flatnonzero(counts)]
    if len(used) > 1:
        raw.assumed.append(
            f"the file's rows call {len(used)} models ({', '.join(used[:4])}"
            f"{', ...' if len(used) > 4 else ''}; its {BURSTGPT_MODEL} column): all are "
            f"simulated on the one model given (--tier-column {BURSTGPT_MODEL} makes them "
            "tiers, on that model)")


def _string_stamps(facts: FileFacts) -> bool:
    """Whether the first record's ``timestamp`` is a string: LMBench's traces
    (LMCache/LMBench 3-workloads/trace-replayer/traces/gmi_trace.jsonl, commit 48172cd1:
    ``"timestamp": "1753780607550317897"``), where Mooncake's are numbers of milliseconds."""
    try:
        first = json.loads(facts.first_line)
    except (json.JSONDecodeError, RecursionError):
        return False  # the reader words the error
    return isinstance(first, dict) and isinstance(first.get("timestamp"), str)


def _lmbench_unit(values: list[int], counts: Any) -> str | None:
    """The unit LMBench's replayer reads its timestamps in (LMCache/LMBench
    3-workloads/trace-replayer/trace-replayer-qa.py since commit ecb11e6, at 18fe8926:
    ``detect_timestamp_format`` over the ten earliest, then ``convert_timestamp_to_seconds``):
    ``ns`` where eight in ten are Unix-epoch nanoseconds (1.6e18 to 2e18), ``ms`` where eight
    in ten are Unix-epoch milliseconds (1.6e12 to 2e12) or all are below 1e12 ("synthetic
    offsets", in ms); otherwise each value by its size (ns above 1e15, else ms), or None where
    that would mix the two units in one file. ``values`` are the distinct ones, ``counts`` how
    many rows hold each (the ten earliest rows are the sample, as the replayer takes them)."""
    sample: list[int] = []
    for k in sorted(range(len(values)), key=values.__getitem__):
        sample.extend([values[k]] * min(int(counts[k]), 10 - len(sample)))
        if len(sample) >= 10:
            break
    if not sample:
        return "ns"
    if sum(1.6e18 <= t <= 2.0e18 for t in sample) >= 0.8 * len(sample):
        return "ns"
    if sum(1.6e12 <= t <= 2.0e12 for t in sample) >= 0.8 * len(sample) or max(sample) < 1e12:
        return "ms"
    units = {"ns" if t > 1e15 else "ms" for t in values}
    return units.pop() if len(units) == 1 else None


def _lmbench_seconds(path: Path, cols: JsonColumns, line_of: Any) -> tuple[Any, str]:
    """LMBench's string timestamps as seconds after the earliest, and the unit they were read
    in (:func:`_lmbench_unit`): its replayer replays each at ``(t - earliest)`` in seconds
    (``TraceDataset.load_trace``); the differences are taken in integers, so no nanosecond is
    lost to floats. A string that is no whole number, or times of two units, are refused
    naming a line."""
    codes, texts = cols.labels["timestamp"]
    values: list[int] = []
    for k, text in enumerate(texts):
        digits = text.strip()
        if not (digits.isascii() and digits.isdigit()):
            row = int(np.argmax(codes == k))
            raise TraceError(path, f"not a whole number: {text[:40]!r} (a string timestamp is "
                             "LMBench's: Unix-epoch nanoseconds or milliseconds, or ms from the "
                             "trace's start)", line=line_of(row), field="timestamp")
        values.append(int(digits))
    unit = _lmbench_unit(values, np.bincount(codes[codes >= 0], minlength=len(values)))
    if unit is None:
        row = int(np.argmax(codes == values.index(max(values))))
        raise TraceError(path, "the string timestamps mix nanoseconds (above 1e15) and "
                         "milliseconds, which LMBench's replayer would read each in its own "
                         "unit: write them in one", line=line_of(row), field="timestamp")
    earliest = min(values, default=0)
    scale = 1e9 if unit == "ns" else 1e3
    seconds = np.array([(v - earliest) / scale for v in values] + [np.nan])
    return seconds[codes], unit  # a missing timestamp (code -1) is NaN, refused as such


LMBENCH_EPOCH_NS = (1.6e18, 2.0e18)
"""The timestamps LMBench's replayer takes for Unix-epoch nanoseconds (trace-replayer-qa.py
``detect_timestamp_format``, commit 18fe8926)."""


def _mooncake_seconds(path: Path, cols: JsonColumns, line_of: Any) -> tuple[Any, str]:
    """Mooncake's number timestamps as seconds (its ms, as written), or LMBench's nanoseconds
    as seconds after the earliest: LMBench's trace format takes a ``timestamp`` "string or
    number", "in any unit (ns, ms, s)" (LMCache/LMBench
    3-workloads/trace-replayer/ADDING_NEW_TRACES.md, "Field Requirements", commit 18fe8926),
    and its replayer reads a number as it reads a string's digits (trace-replayer-qa.py
    ``load_trace``), in ns where eight of the ten earliest are Unix-epoch ns (1.6e18 to 2e18,
    :func:`_lmbench_unit`); read as Mooncake's ms, they would put the first request past 2100.
    Otherwise Mooncake's ms reading and its checks stay (the replayer's fallback, ns for any
    number above 1e15, would read Unix-epoch us as ns, 1,000 times too fast: refused instead,
    naming the unit); numbers of both sizes are refused, as strings are. A number of 1.75e18
    holds 256 ns, as in the replayer, which divides it by 1e9 in floats."""
    stamps = cols.numbers["timestamp"]
    values, counts = np.unique(stamps[np.isfinite(stamps)], return_counts=True)
    earliest = np.repeat(values[:10], np.minimum(counts[:10], 10))[:10]
    low, high = LMBENCH_EPOCH_NS
    if earliest.size and ((earliest >= low) & (earliest <= high)).sum() >= 0.8 * earliest.size:
        return (stamps - float(values[0])) / 1e9, "ns"
    if values.size and values[0] <= 1e15 < values[-1]:
        row = int(np.argmax(stamps == values[-1]))
        raise TraceError(path, "the timestamps mix nanoseconds (above 1e15) and milliseconds: "
                         "Mooncake's are ms from the trace's start, LMBench's one unit (its "
                         "replayer would read each number in its own): write them in one",
                         line=line_of(row), field="timestamp")
    return stamps / 1000.0, "ms"


def load_mooncake(path: Path, options: TraceOptions, streams: Streams) -> RawTrace:
    """Mooncake's JSON lines (``timestamp`` in ms from the trace's start, ``hash_ids`` of
    512-token blocks), or LMBench's of the same shape with string timestamps in the unit its
    replayer tells (:func:`_lmbench_unit`), or number timestamps of nanoseconds
    (:func:`_mooncake_seconds`) (format ``lmbench``: rebased to the earliest, as its replayer
    does; its ``hash_ids`` are read only with ``prefix_block_tokens``: LMBench uses them as seeds of its
    synthetic prompts and does not say how many tokens one names; its ``output_length`` is
    also each request's ``max_tokens``: the replayer passes it to ``send_request`` as
    ``max_tokens``, the request body's field, with no ``ignore_eos``: trace-replayer-qa.py,
    commit 18fe8926, lines 235-257, 359-362 and 469-472)."""
    facts = file_facts(path)
    lmbench = _string_stamps(facts)
    kinds: dict[str, JsonKind] = {"timestamp": "label" if lmbench else "number",
                                  "input_length": "number", "output_length": "number",
                                  "hash_ids": "int_list"}
    cols = read_jsonl_columns(facts, _with_tier_column(dict(kinds), options), fmt="mooncake",
                              required=[*MOONCAKE_FIELDS, *_tier_required(options)])
    prefix = cols.lists["hash_ids"] if "hash_ids" in cols.present else None
    line_of = _csv_line_of(path, header_lines=0)
    arrival, unit = (_lmbench_seconds(path, cols, line_of) if lmbench
                     else _mooncake_seconds(path, cols, line_of))
    numbers = not lmbench and unit == "ns"  # LMBench's, written as numbers
    lmbench = lmbench or numbers
    raw = RawTrace(
        path=path,
        format="lmbench" if lmbench else "mooncake",
        arrival_unit=unit,
        absolute_clock=lmbench,
        prompt=cols.numbers["input_length"],
        output=cols.numbers["output_length"],
        arrival=arrival,
        labels=_labels(cols, options.tier_column),
        prefix=prefix,
        max_output=cols.numbers["output_length"].copy() if lmbench else None,
        fields={"arrival_s": "timestamp", "prompt_tokens": "input_length",
                "output_tokens": "output_length",
                **({"max_output_tokens": "output_length"} if lmbench else {})},
        rows_read=cols.num_rows,
        line_of=line_of,
    )
    if lmbench:
        raw.assumed.append(
            f"timestamp {'numbers' if numbers else 'strings'} read in "
            f"{'nanoseconds' if unit == 'ns' else 'milliseconds'}, as LMBench's replayer tells "
            "their unit, from the earliest")
        raw.assumed.append(
            "output_length read as each answer's length: LMBench's replayer sends it as "
            "max_tokens without ignore_eos, so its server may have stopped sooner")
    if lmbench and prefix is not None and options.prefix_block_tokens is None:
        raw.prefix = None
        raw.warnings.append(
            "hash_ids not read: an LMBench trace does not say how many prompt tokens a hash "
            "names (its replayer uses them as seeds of synthetic prompts), so the requests "
            "share no prefix in the simulation; give prefix_block_tokens (a scenario's "
            "[workload.options]) to read them")
    return _note_truncated(raw, facts, cols.dropped_last)


VIDUR_ARRIVAL = "arrived_at"
"""Vidur's processed traces (microsoft/vidur ``data/processed_traces/splitwise_{conv,code}.csv``)
are length tables with the arrival in seconds from the trace's start (its ``Request.arrived_at``)."""


def load_lengths(path: Path, options: TraceOptions, streams: Streams) -> RawTrace:
    facts = file_facts(path)
    kinds: dict[str, Kind] = {"num_prefill_tokens": "number", "num_decode_tokens": "number"}
    timed = VIDUR_ARRIVAL in split_header(facts.first_line)
    if timed:
        kinds[VIDUR_ARRIVAL] = "number"
    cols = read_csv_columns(facts, _with_tier_column(dict(kinds), options), fmt="lengths",
                            tier_column=options.tier_column)
    fields = {"prompt_tokens": "num_prefill_tokens", "output_tokens": "num_decode_tokens"}
    raw = RawTrace(
        path=path,
        format="vidur" if timed else "lengths",
        prompt=cols.numbers["num_prefill_tokens"],
        output=cols.numbers["num_decode_tokens"],
        arrival=cols.numbers[VIDUR_ARRIVAL] if timed else None,
        labels=_labels(cols, options.tier_column),
        fields={"arrival_s": VIDUR_ARRIVAL, **fields} if timed else fields,
        rows_read=cols.num_rows,
        line_of=_csv_line_of(path),
    )
    named = TOKENIZER_IN_NAME.search(path.stem)
    if named:
        raw.assumed.append(f"token counts read as the file gives them, counted with "
                           f"{named.group(1)}'s tokenizer (its name says), not re-counted with "
                           "the simulated model's")
    return _note_truncated(raw, facts, cols.dropped_last)


TOKENIZER_IN_NAME = re.compile(r"_([A-Za-z0-9.-]+)_tokenizer(?:_|$)")
"""sarathi-serve's and Vidur's length tables name the tokenizer that counted them
(``sharegpt_8k_filtered_stats_llama2_tokenizer.csv``,
``arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv``): another model's tokenizer
counts the same text in other numbers, which the simulation takes as its model's tokens."""


SPLITWISE_COLUMNS = ("arrival_timestamp", "prompt_size", "token_size")
"""splitwise-sim's traces (Mutinifni/splitwise-sim ``traces/*.csv``, commit 37808801:
``request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size``,
written by its ``generate_trace.py``): the arrival in seconds from the trace's start (the
cumulated exponential gaps at the chosen rate), the prompt and the output tokens."""
_SPLITWISE_ONE = {"batch_size": 1.0, "request_type": 2.0}
"""The values splitwise-sim's requests take (``generate_trace.py`` writes them): another
``batch_size`` is that many sequences holding KV each (``request.py``
``estimate_kv_cache_size``: ``2 * self.batch_size * num_tokens * ...``), another
``request_type`` one it does not serve (``Request.from_dict``: ``Unsupported request type``)."""


def load_splitwise(path: Path, options: TraceOptions, streams: Streams) -> RawTrace:
    """splitwise-sim's trace: one request a row; a row of several sequences
    (``batch_size`` > 1) or of another request type is refused naming its line."""
    facts = file_facts(path)
    header = split_header(facts.first_line)
    kinds: dict[str, Kind] = {name: "number" for name in SPLITWISE_COLUMNS}
    kinds.update({name: "number" for name in _SPLITWISE_ONE if name in header})
    cols = read_csv_columns(facts, _with_tier_column(dict(kinds), options), fmt="splitwise",
                            tier_column=options.tier_column)
    line_of = _csv_line_of(path)
    for name, value in _SPLITWISE_ONE.items():
        other = cols.numbers[name] != value if name in cols.numbers else np.zeros(0, bool)
        if other.any():
            row = int(np.argmax(other))
            raise TraceError(path, f"{cols.numbers[name][row]:g}: splitwise-sim's requests have "
                             f"{name} {value:g} (a generative LLM request of one sequence); "
                             "kvbudget simulates one sequence a request", line=line_of(row),
                             field=name)
    raw = RawTrace(
        path=path,
        format="splitwise",
        prompt=cols.numbers["prompt_size"],
        output=cols.numbers["token_size"],
        arrival=cols.numbers["arrival_timestamp"],
        labels=_labels(cols, options.tier_column),
        fields={"arrival_s": "arrival_timestamp", "prompt_tokens": "prompt_size",
                "output_tokens": "token_size"},
        rows_read=cols.num_rows,
        line_of=line_of,
    )
    return _note_truncated(raw, facts, cols.dropped_last)


# ---------------------------------------------------------------------------------------------
# The generic format


_GENERIC_KIND: dict[str, str] = {
    "arrival_s": "number",
    "prompt_tokens": "number",
    "output_tokens": "number",
    "max_output_tokens": "number",
    "tier": "label",
    "deadline_s": "number",
    "timeout_s": "number",
    "id": "number",
    "hash_ids": "int_list",
}


def generic_kind(path: Path) -> str:
    """``csv``, ``jsonl`` or ``parquet`` for a generic-format file (by content, then name)."""
    with path.open("rb") as fh:
        head = fh.read(4)
    if head == b"PAR1" or path.suffix.lower() in (".parquet", ".pq"):
        return "parquet"
    if path.suffix.lower() in (".jsonl", ".json", ".ndjson"):
        return "jsonl"
    return "jsonl" if head.lstrip()[:1] == b"{" else "csv"


def _column_names(options: TraceOptions) -> dict[str, str]:
    names = {c: c for c in CANONICAL_COLUMNS}
    if options.columns:
        names.update(options.columns)
    return names


def _generic_raw(path: Path, fmt: str, numbers: Mapping[str, Any], labels: Mapping[str, Any],
                 lists: Mapping[str, Any], present: set[str], names: dict[str, str],
                 options: TraceOptions, rows: int, line_of: Any) -> RawTrace:
    unit = ARRIVAL_UNITS[options.arrival_unit]

    def num(canon: str) -> Any:
        col = names[canon]
        return numbers[col] if canon in present else None

    arrival = num("arrival_s")
    deadline = num("deadline_s")
    tier_labels: dict[str, Any] = {}
    if "tier" in present:
        tier_labels["tier"] = labels[names["tier"]]
    if options.tier_column is not None and options.tier_column in labels:
        tier_labels[options.tier_column] = labels[options.tier_column]
    return RawTrace(
        path=path,
        format=fmt,
        prompt=numbers[names["prompt_tokens"]],
        output=numbers[names["output_tokens"]],
        arrival=None if arrival is None else arrival * unit,
        max_output=num("max_output_tokens"),
        deadline=None if deadline is None else deadline * unit,
        timeout=num("timeout_s"),
        request_id=num("id"),
        labels=tier_labels,
        prefix=lists.get(names["hash_ids"]) if "hash_ids" in present else None,
        fields={canon: names[canon] for canon in CANONICAL_COLUMNS},
        arrival_unit=options.arrival_unit,
        rows_read=rows,
        line_of=line_of,
    )


def _jsonl_given(cols: JsonColumns, names: Mapping[str, str]) -> set[str]:
    """The generic format's fields that some record of a JSON lines file gives a value."""
    def has_value(col: str) -> bool:
        if col in cols.numbers:
            return not bool(np.isnan(cols.numbers[col]).all())
        if col in cols.labels:
            return bool((cols.labels[col][0] >= 0).any())
        return col in cols.lists and len(cols.lists[col][0]) > 0

    return {canon for canon in CANONICAL_COLUMNS if has_value(names[canon])}


def _check_mapped(path: Path, options: TraceOptions, present: set[str],
                  names: Mapping[str, str]) -> None:
    """A column the options map by name (``--column arrival_s=ts``) is in the file: one that
    is not is refused, not read as "the file has no such column" (arrivals drawn instead)."""
    for canon in options.columns or {}:
        if canon not in present:
            raise TraceError(path, f"has no column {names[canon]!r} (mapped to {canon} by "
                             "--column)", field=names[canon])


def load_generic(path: Path, options: TraceOptions, streams: Streams) -> RawTrace:
    kind = generic_kind(path)
    names = _column_names(options)
    if kind == "parquet":
        return _load_generic_parquet(path, options, names)
    facts = file_facts(path)
    if kind == "jsonl":
        try:
            first = json.loads(facts.first_line)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TraceError(path, f"not valid JSON ({_json_problem(exc)})", line=1) from None
        keys = set(first) if isinstance(first, dict) else set()
        present = {c for c in CANONICAL_COLUMNS if names[c] in keys}
        if isinstance(first, dict):  # a line that is no object: the reader says so
            _refuse_missing(path, [str(k) for k in first], present, names, "first line")
        # every field the format reads is read from every record: one whose key first
        # appears after line 1 (a deadline_s given to some requests) is kept, not dropped
        jkinds: dict[str, JsonKind] = {
            names[canon]: _GENERIC_KIND[canon]  # type: ignore[misc]
            for canon in CANONICAL_COLUMNS}
        if options.tier_column is not None:
            jkinds.setdefault(options.tier_column, "label")
        cols = read_jsonl_columns(facts, jkinds, fmt="generic",
                                  required=[*(names[c] for c in GENERIC_REQUIRED),
                                            *_tier_required(options)])
        present |= _jsonl_given(cols, names)
        _check_mapped(path, options, present, names)
        _refuse_unmapped_arrival(path, [str(k) for k in first], present, options)
        raw = _generic_raw(path, "generic-jsonl", cols.numbers, cols.labels, cols.lists,
                           present, names, options, cols.num_rows,
                           _csv_line_of(path, header_lines=0))
        # the first record's keys in its own order (a set's order changes with the process)
        _note_unread(raw, [str(k) for k in first] if isinstance(first, dict) else [], names,
                     options)
        return _note_truncated(raw, facts, cols.dropped_last)
    header = split_header(facts.first_line)
    present = {c for c in CANONICAL_COLUMNS if names[c] in header}
    _check_mapped(path, options, present, names)
    _refuse_unmapped_arrival(path, header, present, options)
    _refuse_missing(path, header, present, names)
    present.update(GENERIC_REQUIRED)
    ckinds: dict[str, Kind] = {}
    for canon in (c for c in CANONICAL_COLUMNS if c in present):  # not the set's order, which
        # changes with the process: the first missing column is the one the refusal names
        k = _GENERIC_KIND[canon]
        ckinds[names[canon]] = "label" if k in ("label", "int_list") else "number"
    if options.tier_column is not None:
        ckinds.setdefault(options.tier_column, "label")
    csv_cols = read_csv_columns(facts, ckinds, fmt="generic",
                            tier_column=options.tier_column)
    lists: dict[str, Any] = {}
    if "hash_ids" in present:
        lists[names["hash_ids"]] = _split_hash_labels(path, csv_cols.labels[names["hash_ids"]],
                                                      names["hash_ids"])
    raw = _generic_raw(path, "generic-csv", csv_cols.numbers, csv_cols.labels, lists, present,
                       names, options, csv_cols.num_rows, _csv_line_of(path))
    _note_unread(raw, header, names, options)
    return _note_truncated(raw, facts, csv_cols.dropped_last)


_LIKELY: dict[str, str] = {"max_tokens": "max_output_tokens",
                           "max_completion_tokens": "max_output_tokens",
                           "timestamp": "arrival_s", "input_tokens": "prompt_tokens",
                           "completion_tokens": "output_tokens"}
"""A column the generic format does not read by that name, and the field it likely holds (the
OpenAI API's and common load tools' names)."""


TIME_COLUMNS = frozenset({
    "timestamp", "time", "arrival", "arrival_time", "arrival_timestamp", "arrived_at",
    "created", "created_at", "start_time", "send_time", "request_time", "timestamp_ms",
    "timestamp_s", "time_s", "arrival_ms"})
"""Column names (compared in lower case) that hold a request's arrival time in other tools'
files: Vidur's and BLIS's ``arrived_at``, Splitwise-sim's ``arrival_timestamp``, Mooncake's
``timestamp``."""


def _refuse_unmapped_arrival(path: Path, columns: list[str], present: set[str],
                             options: TraceOptions) -> None:
    """A generic file without ``arrival_s`` but with a column that looks like the arrival time
    is refused unless an arrival process is given: its requests got drawn Poisson arrivals at
    1 req/s in place of the file's own times."""
    if "arrival_s" in present or options.arrival is not None:
        return
    timed = [c for c in columns if c.lower() in TIME_COLUMNS]
    if timed:
        raise TraceError(path, f"has no arrival_s column but {timed[0]!r} looks like the arrival "
                         f"time: map it (--column arrival_s={timed[0]}, with --arrival-unit ms, "
                         "us or ns if it is not in seconds; in a scenario, [workload.options] "
                         "columns and arrival_unit), or give an arrival process to draw "
                         "arrivals in place of its times (--arrival)", field="arrival_s")


_RATE = re.compile(r"(_s|_sec|_per_second|_tps|throughput)$", re.IGNORECASE)
"""A column that holds a rate (``output_tok_s``, ``tokens_per_second``), never a request's
token count: no guess of the column to map as ``prompt_tokens`` or ``output_tokens`` (a
harness's runs, github.com/LottoLottoLotto/4x3090-llm-benchmarks bd22281
``data/benchmarks.jsonl``, were told to map ``output_tok_s`` as ``output_tokens``)."""

_STUDY_COLUMNS = frozenset({"run_key", "point", "replication", "seed"})
"""The columns that identify a run in a study's table (``studies.sweep.ID_COLUMNS``), which a
trace's or a recording's file does not hold all of."""


def _refuse_missing(path: Path, columns: list[str], present: set[str], names: Mapping[str, str],
                    what: str = "header") -> None:
    """A generic file without a column the format needs (``prompt_tokens``,
    ``output_tokens``) is refused naming it and the file's columns, and how to map the one
    that holds it: the column the common tools' name or a close spelling suggests
    (``input_tokens``, ``prompt_tokns``), else ``COLUMN``. ``what``: where the columns were
    read (a CSV's header, a JSON line's keys, a Parquet file's schema)."""
    if not all(c in present for c in GENERIC_REQUIRED) and set(columns) >= _STUDY_COLUMNS:
        raise TraceError(path, "a kvbudget study's table (one row a run: sweep's "
                         "sweep.parquet, compare's and plan's runs.parquet, capacity's and "
                         "tune's evidence.parquet), not a trace or a recording: it keeps each "
                         "run's metrics, "
                         "not its requests; give the trace its scenario ran (validate "
                         "--records: a run directory, simulate or replay --out)")
    for canon in GENERIC_REQUIRED:  # in order: the first missing is the one named
        if canon in present:
            continue
        shown = ", ".join(columns) or "nothing"
        if len(shown) > 120:
            shown = shown[:117] + "..."
        likely = [c for c in columns if _LIKELY.get(c) == canon]
        counts = [c for c in columns if not _RATE.search(c) and c not in CANONICAL_COLUMNS]
        guess = (likely or difflib.get_close_matches(canon, counts, n=1, cutoff=0.6)
                 or ["COLUMN"])[0]
        raise TraceError(path, f"missing column {names[canon]!r} needed by the generic format "
                         f"(the {what} has: {shown}): if a column holds it, map it (--column "
                         f"{canon}={guess}; in a scenario, [workload.options] columns)",
                         line=1 if what == "header" else None, field=names[canon])


def _note_unread(raw: RawTrace, columns: list[str], names: dict[str, str],
                 options: TraceOptions) -> None:
    """Warn of the file's columns the generic format leaves unread (a ``max_tokens`` column
    read as nothing would make every request declare the default instead)."""
    read = {names[c] for c in CANONICAL_COLUMNS} | {options.tier_column}
    unread = [c for c in columns if c not in read]
    if not unread:
        return
    hint = next((f"; e.g. --column {_LIKELY[c]}={c}" for c in unread
                 if c in _LIKELY and _LIKELY[c] not in (options.columns or {})
                 and names[_LIKELY[c]] not in columns), "")
    raw.warnings.append(f"columns not read: {', '.join(unread[:8])}"
                        + (f" ({len(unread)} in all)" if len(unread) > 8 else "")
                        + " (the generic format reads " + ", ".join(CANONICAL_COLUMNS)
                        + "; --column FIELD=COLUMN, in a scenario [workload.options] columns, "
                        + f"maps one{hint})")


def _split_hash_labels(path: Path, labels: tuple[np.ndarray[Any, Any], tuple[str, ...]],
                       column: str) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """CSV ``hash_ids`` cells hold space-separated integers."""
    codes, values = labels
    parsed: list[np.ndarray[Any, Any]] = []
    for i, text in enumerate(values):
        try:
            parsed.append(np.array([int(t) for t in text.split()], dtype=np.int64))
        except ValueError:
            row = int(np.argmax(codes == i))
            raise TraceError(path, f"expected space-separated integers, got {text[:40]!r}",
                             line=line_of_row(path, row), field=column) from None
    lengths = np.array([len(p) for p in parsed] + [0], dtype=np.int64)
    per_row = lengths[np.where(codes < 0, len(parsed), codes)]
    offsets = np.zeros(len(codes) + 1, dtype=np.int64)
    np.cumsum(per_row, out=offsets[1:])
    flat = [parsed[c] for c in codes if c >= 0]
    values_arr = np.concatenate(flat) if flat else np.zeros(0, dtype=np.int64)
    return values_arr, offsets


def _load_generic_parquet(path: Path, options: TraceOptions, names: dict[str, str]) -> RawTrace:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.exists():
        raise TraceError(path, "no such file")
    if path.stat().st_size == 0:
        raise TraceError(path, NO_REQUESTS)
    unreadable = (pa.ArrowException, OSError, ValueError, KeyError, IndexError, TypeError)
    try:
        schema = pq.read_schema(path)
    except unreadable as exc:
        raise TraceError(path, f"not a readable Parquet file ({type(exc).__name__}: "
                         f"{str(exc)[:120]})") from None
    columns = set(schema.names)
    present = {c for c in CANONICAL_COLUMNS if names[c] in columns}
    _check_mapped(path, options, present, names)
    _refuse_unmapped_arrival(path, list(schema.names), present, options)
    _refuse_missing(path, list(schema.names), present, names, "file")
    wanted = [names[c] for c in present]
    if options.tier_column is not None:
        if options.tier_column not in columns:
            raise TraceError(path, f"missing column {options.tier_column!r} (tier column)",
                             field=options.tier_column)
        wanted.append(options.tier_column)
    try:
        table = pq.read_table(path, columns=sorted(set(wanted)))
    except unreadable as exc:
        raise TraceError(path, f"not a readable Parquet file ({type(exc).__name__}: "
                         f"{str(exc)[:120]})") from None
    numbers: dict[str, Any] = {}
    labels: dict[str, Any] = {}
    lists: dict[str, Any] = {}
    for canon in sorted(present):
        col_name = names[canon]
        try:
            _parquet_column(path, table.column(col_name), col_name, _GENERIC_KIND[canon],
                            numbers, labels, lists)
        except pa.ArrowException as exc:
            raise TraceError(path, f"cannot be read ({str(exc)[:120]})",
                             field=col_name) from None
    if options.tier_column is not None and options.tier_column not in labels:
        labels[options.tier_column] = categorical(table.column(options.tier_column))
    raw = _generic_raw(path, "generic-parquet", numbers, labels, lists, present, names,
                       options, table.num_rows, None)
    raw.prefix_block_tokens = _metadata_block_tokens(path, schema.metadata)
    return raw


def _metadata_block_tokens(path: Path, metadata: dict[bytes, bytes] | None) -> int | None:
    """The ``kvbudget.prefix_block_tokens`` a kvbudget-written Parquet trace carries
    (``workloads/traces/save.py``), or None."""
    value = (metadata or {}).get(b"kvbudget.prefix_block_tokens")
    if value is None:
        return None
    text = value.decode(errors="replace").strip()
    if not text.isdigit() or int(text) < 1:
        raise TraceError(path, f"must be a whole number >= 1, got {text[:40]!r}",
                         field="kvbudget.prefix_block_tokens")
    return int(text)


def _parquet_column(path: Path, col: Any, col_name: str, kind: str, numbers: dict[str, Any],
                    labels: dict[str, Any], lists: dict[str, Any]) -> None:
    import pyarrow as pa

    if kind == "number":
        numbers[col_name] = _parquet_numbers(path, col, col_name)
    elif kind == "label":
        labels[col_name] = categorical(col)
    else:
        arr = col.combine_chunks() if col.num_chunks else pa.array([], pa.list_(pa.int64()))
        if not (pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type)):
            raise TraceError(path, f"must be a list of integers, got {arr.type}",
                             field=col_name)
        lengths = arr.value_lengths().fill_null(0).to_numpy(zero_copy_only=False)
        offsets = np.zeros(len(arr) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        try:
            flat = arr.flatten().cast(pa.int64()).to_numpy(zero_copy_only=False)
        except pa.ArrowException as exc:
            raise TraceError(path, f"must hold integers ({exc})", field=col_name) from None
        lists[col_name] = (np.asarray(flat, dtype=np.int64), offsets)


def _parquet_numbers(path: Path, col: Any, name: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    import pandas as pd
    import pyarrow as pa

    arr = col.combine_chunks() if col.num_chunks else pa.array([], pa.float64())
    if pa.types.is_boolean(arr.type):  # true is not one token, nor one second
        raise TraceError(path, "must be numbers, got a column of true/false", field=name)
    if pa.types.is_integer(arr.type) or pa.types.is_floating(arr.type) or pa.types.is_null(
            arr.type):
        # Unsafe: integers beyond 2**53 round (then fail the range checks) instead of raising.
        return np.asarray(arr.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False),
                          dtype=np.float64)
    if pa.types.is_timestamp(arr.type) or pa.types.is_duration(arr.type):
        # a point in time (or an offset) in whatever unit the file stores: seconds, as floats
        # (time zones do not matter: arrivals are rebased to the first one)
        unit = arr.type.unit
        ints = arr.cast(pa.int64()).to_numpy(zero_copy_only=False)
        scale = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}[unit]
        return np.asarray(ints, dtype=np.float64) * scale
    series = arr.to_pandas()
    conv = pd.to_numeric(series, errors="coerce")
    bad = conv.isna() & series.notna()
    if bad.any():
        row = int(np.argmax(bad.to_numpy()))
        raise TraceError(path, f"not a number: {series.iloc[row]!r}", row=row, field=name)
    out: np.ndarray[Any, np.dtype[np.float64]] = conv.to_numpy(dtype=np.float64,
                                                                na_value=np.nan)
    return out
