"""Write a workload in the generic format (CSV, JSONL or Parquet, chosen by extension)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces.options import DEFAULT_PREFIX_BLOCK_TOKENS
from kvbudget.workloads.workload import Workload

SAVE_SUFFIXES = (".parquet", ".csv", ".jsonl")


def _hash_lists(workload: Workload) -> list[list[int]] | None:
    if workload.prefix_hashes is None or workload.prefix_offsets is None:
        return None
    hashes = workload.prefix_hashes.tolist()
    offsets = workload.prefix_offsets.tolist()
    return [hashes[offsets[i]:offsets[i + 1]] for i in range(len(workload))]


def _table(workload: Workload) -> Any:
    import pyarrow as pa

    tiers = np.asarray(workload.tier_names, dtype=object)[workload.tier.astype(np.int64)]
    deadline = workload.deadline_s
    columns: dict[str, Any] = {
        "id": pa.array(workload.request_id, pa.int64()),
        "arrival_s": pa.array(workload.arrival_s, pa.float64()),
        "prompt_tokens": pa.array(workload.prompt_tokens, pa.int64()),
        "output_tokens": pa.array(workload.output_tokens, pa.int64()),
        "max_output_tokens": pa.array(workload.max_output_tokens, pa.int64()),
        "tier": pa.array(tiers, pa.string()).dictionary_encode(),
        "deadline_s": pa.array(deadline, pa.float64(), mask=np.isnan(deadline)),
    }
    if workload.timeout_s is not None:
        timeout = workload.timeout_s
        columns["timeout_s"] = pa.array(timeout, pa.float64(), mask=np.isnan(timeout))
    if workload.prefix_hashes is not None and workload.prefix_offsets is not None:
        columns["hash_ids"] = pa.LargeListArray.from_arrays(
            pa.array(workload.prefix_offsets, pa.int64()),
            pa.array(workload.prefix_hashes, pa.int64()),
        )
    metadata = {
        b"kvbudget.name": workload.name.encode(),
        b"kvbudget.prefix_block_tokens": str(workload.prefix_block_tokens).encode(),
    }
    return pa.table(columns).replace_schema_metadata(metadata)


def _write_jsonl(workload: Workload, fh: Any) -> None:
    tiers = workload.tier_names
    hashes = _hash_lists(workload)
    ids = workload.request_id.tolist()
    arrival = workload.arrival_s.tolist()
    prompt = workload.prompt_tokens.tolist()
    output = workload.output_tokens.tolist()
    max_out = workload.max_output_tokens.tolist()
    tier = workload.tier.tolist()
    deadline = workload.deadline_s.tolist()
    timeouts = None if workload.timeout_s is None else workload.timeout_s.tolist()
    tier_json = [f'"{t}"' for t in tiers]
    for i in range(len(ids)):
        d = deadline[i]
        line = (f'{{"id": {ids[i]}, "arrival_s": {arrival[i]!r}, "prompt_tokens": {prompt[i]}, '
                f'"output_tokens": {output[i]}, "max_output_tokens": {max_out[i]}, '
                f'"tier": {tier_json[tier[i]]}, '
                f'"deadline_s": {"null" if d != d else repr(d)}')
        if timeouts is not None:
            c = timeouts[i]
            line += f', "timeout_s": {"null" if c != c else repr(c)}'
        if hashes is not None:
            line += f', "hash_ids": [{", ".join(map(str, hashes[i]))}]'
        fh.write(line + "}\n")


def check_save_path(path: str | Path) -> Path:
    """``path`` if its extension names an encoding :func:`save_workload` writes and its folder
    exists (checked before a trace is loaded to be saved there), else a :class:`TraceError`."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in SAVE_SUFFIXES:
        raise TraceError(path, f"unknown output extension {suffix or '(none)'!r}: use "
                         f"{', '.join(SAVE_SUFFIXES)}")
    if not path.parent.exists():
        raise TraceError(path, f"the directory {str(path.parent)!r} does not exist")
    return path


def _check_block_size(workload: Workload, path: Path, suffix: str) -> None:
    """A CSV or JSON lines file cannot say how many tokens its ``hash_ids`` name (a Parquet
    file keeps it in its metadata): read back, each hash is taken as Mooncake's 512-token
    block. A recording's 16-token hashes (GuideLLM's, AIPerf's conversations) were written so,
    and ``simulate --trace`` of the file refused it ("2 hashes for 47 prompt tokens"), or, for
    larger blocks (1,024 tokens), read it with half the shared prefix, unsaid. Refused with
    what keeps the size."""
    size = workload.prefix_block_tokens
    if workload.prefix_hashes is None or suffix == ".parquet" or (
            size == DEFAULT_PREFIX_BLOCK_TOKENS):
        return
    raise TraceError(path, f"the requests' prefix hashes (hash_ids) name blocks of {size} "
                     f"tokens, which a {suffix} file cannot record: read back, each would be "
                     f"taken as a {DEFAULT_PREFIX_BLOCK_TOKENS}-token block (Mooncake's); "
                     f"write {path.with_suffix('.parquet').name}, which keeps the size",
                     field="hash_ids")


def save_workload(workload: Workload, path: str | Path) -> Path:
    """Write ``workload`` to ``path`` in the generic format; the extension picks the encoding
    (``.parquet``, ``.csv`` or ``.jsonl``). CSV keeps prefix hashes as space-separated integers.
    The file is written next to its destination and renamed into place."""
    path = check_save_path(path)
    suffix = path.suffix.lower()
    for name in workload.tier_names:
        if '"' in name or "\\" in name:
            raise TraceError(path, f"tier name {name!r} cannot be written", field="tier")
    _check_block_size(workload, path, suffix)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        if suffix == ".jsonl":
            with tmp.open("w", encoding="utf-8") as fh:
                _write_jsonl(workload, fh)
        else:
            import pyarrow as pa
            import pyarrow.csv as pacsv
            import pyarrow.parquet as pq

            table = _table(workload)
            if suffix == ".parquet":
                pq.write_table(table, tmp)
            else:
                if "hash_ids" in table.column_names:
                    lists = _hash_lists(workload) or []
                    text = pa.array([" ".join(map(str, h)) for h in lists], pa.string())
                    table = table.set_column(table.column_names.index("hash_ids"), "hash_ids",
                                             text)
                table = table.set_column(table.column_names.index("tier"), "tier",
                                         table.column("tier").cast(pa.string()))
                pacsv.write_csv(table, tmp, pacsv.WriteOptions(quoting_style="needed"))
        tmp.replace(path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
