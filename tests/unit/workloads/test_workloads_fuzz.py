"""Fuzz the loaders: a few hundred mutated files (truncated, bad values, dropped columns,
shuffled, duplicated, blank or garbage lines) give either a TraceError naming the file on one
line, or a valid load whose report adds up. Shuffled rows load to the same requests."""

from __future__ import annotations

import functools
import json
import random
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces import TraceOptions, load_trace

SHARED = Path(__file__).resolve().parents[3].parent / "shared"
TRACES = SHARED / "traces"

pytestmark = pytest.mark.skipif(not TRACES.exists(), reason="shared trace data not present")

BASES: dict[str, tuple[str, str, int]] = {
    # name: (source file under shared/, format, lines kept including any header)
    "azure.csv": ("traces/azure_llm_2023/AzureLLMInferenceTrace_conv.csv", "azure", 40),
    "burst1.csv": ("traces/burstgpt/burstgpt_slice.csv", "burstgpt", 40),
    "burst3.csv": ("traces/burstgpt/burstgpt3_slice.csv", "burstgpt", 40),
    "mooncake.jsonl": ("traces/mooncake/synthetic_trace.jsonl", "mooncake", 30),
    "lengths.csv": ("traces/sharegpt_lengths/sharegpt_8k_filtered_stats_llama2_tokenizer.csv",
                    "lengths", 40),
    "bench.jsonl": ("bench/conv_n2000_q2.jsonl", "generic", 40),
    "chunk-34-trace.csv": ("traces/servegen/language/m-large/chunk-34-trace.csv", "servegen",
                           12),
}
GENERATED = {"full.csv": "generic", "full.jsonl": "generic"}
BAD_VALUES = ["abc", "-5", "NaN", "", "1e400", "0", "3.5", "-0", "1e12", '"', "null", "  ",
              "0x10", "١٢", "1,2"]
SEEDS_PER_BASE = 45


@functools.cache
def _full_workload_text(suffix: str) -> tuple[str, ...]:
    """A generic file with every optional column (tiers, caps, deadlines, prefix hashes)."""
    from kvbudget.workloads.lengths import FixedCap
    from kvbudget.workloads.synthetic import (
        ExponentialDelay,
        Fixed,
        PoissonArrivals,
        TierTraffic,
        Uniform,
        generate_workload,
    )
    from kvbudget.workloads.traces import save_workload
    from kvbudget.workloads.workload import Workload

    tiers = [TierTraffic("interactive", 0.5, Uniform(1, 2000), Uniform(1, 300),
                         max_output=FixedCap(256), deadline=ExponentialDelay(3.0)),
             TierTraffic("batch", 0.5, Fixed(600), Uniform(1, 50))]
    w = generate_workload(PoissonArrivals(2.0), tiers, np.random.default_rng(0), num_requests=30)
    blocks = (w.prompt_tokens + 511) // 512
    offsets = np.concatenate([[0], np.cumsum(blocks)]).astype(np.int64)
    hashes = np.arange(int(offsets[-1]), dtype=np.int64) % 17
    w = Workload(**{**w.__dict__, "prefix_hashes": hashes, "prefix_offsets": offsets})
    with tempfile.TemporaryDirectory() as tmp:
        path = save_workload(w, Path(tmp) / f"full{suffix}")
        return tuple(path.read_text().splitlines())


def _base_lines(name: str) -> list[str]:
    if name in GENERATED:
        return list(_full_workload_text(Path(name).suffix))
    source, _, keep = BASES[name]
    with (SHARED / source).open(encoding="utf-8") as fh:
        return [next(fh).rstrip("\n") for _ in range(keep)]


def _mutate_csv(lines: list[str], rng: random.Random, has_header: bool) -> str:
    lines = list(lines)
    first = 1 if has_header else 0
    op = rng.choice(["truncate", "value", "value", "drop_column", "drop_header_field", "shuffle",
                     "duplicate", "blank", "garbage", "swap_header", "empty_field_count"])
    if op == "value":
        i = rng.randrange(first, len(lines))
        fields = lines[i].split(",")
        fields[rng.randrange(len(fields))] = rng.choice(BAD_VALUES)
        lines[i] = ",".join(fields)
    elif op == "drop_column":
        j = rng.randrange(len(lines[0].split(",")))
        lines = [",".join(f for k, f in enumerate(ln.split(",")) if k != j) for ln in lines]
    elif op == "drop_header_field" and has_header:
        fields = lines[0].split(",")
        del fields[rng.randrange(len(fields))]
        lines[0] = ",".join(fields)
    elif op == "shuffle":
        body = lines[first:]
        rng.shuffle(body)
        lines = lines[:first] + body
    elif op == "duplicate":
        i = rng.randrange(first, len(lines))
        lines.insert(i, lines[i])
    elif op == "blank":
        lines.insert(rng.randrange(first, len(lines) + 1), "")
    elif op == "garbage":
        lines.insert(rng.randrange(first, len(lines) + 1), "\x7f\x01garbage;;;")
    elif op == "swap_header" and has_header:
        lines[0], lines[1] = lines[1], lines[0]
    elif op == "empty_field_count":
        i = rng.randrange(first, len(lines))
        lines[i] = lines[i] + ","
    text = "\n".join(lines) + "\n"
    if op == "truncate" or rng.random() < 0.3:
        text = text[: rng.randrange(0, len(text) + 1)]
    return text


def _mutate_jsonl(lines: list[str], rng: random.Random) -> str:
    lines = list(lines)
    op = rng.choice(["truncate", "value", "value", "drop_key", "drop_key_all", "shuffle",
                     "syntax", "blank", "array", "duplicate"])
    i = rng.randrange(len(lines))
    if op == "value":
        record = json.loads(lines[i])
        key = rng.choice(list(record))
        record[key] = rng.choice([None, "abc", -5, 1.5, 1e308, [], {}, True, "7", 0, 2**70])
        lines[i] = json.dumps(record)
    elif op == "drop_key":
        record = json.loads(lines[i])
        del record[rng.choice(list(record))]
        lines[i] = json.dumps(record)
    elif op == "drop_key_all":
        key = rng.choice(list(json.loads(lines[0])))
        lines = [json.dumps({k: v for k, v in json.loads(ln).items() if k != key})
                 for ln in lines]
    elif op == "shuffle":
        rng.shuffle(lines)
    elif op == "syntax":
        pos = rng.randrange(len(lines[i]))
        lines[i] = lines[i][:pos] + rng.choice(["}", "{", '"', ",", ":", "]"]) + lines[i][pos:]
    elif op == "blank":
        lines.insert(i, "")
    elif op == "array":
        lines[i] = "[1, 2, 3]"
    elif op == "duplicate":
        lines.insert(i, lines[i])
    text = "\n".join(lines) + "\n"
    if op == "truncate" or rng.random() < 0.3:
        text = text[: rng.randrange(0, len(text) + 1)]
    return text


def _check_valid(loaded_path: Path, options: TraceOptions) -> None:
    try:
        loaded = load_trace(loaded_path, options)
    except TraceError as exc:
        message = str(exc)
        assert "\n" not in message
        assert loaded_path.name in message or str(loaded_path.parent) in message, message
        return
    w, report = loaded.workload, loaded.report
    assert len(w) >= 1
    assert report.rows_loaded == len(w)
    assert report.rows_loaded + report.dropped_rows <= report.rows_read or (
        report.format == "servegen")
    assert np.all(np.diff(w.arrival_s) >= 0) and w.arrival_s[0] >= 0
    assert w.prompt_tokens.min() >= 1 and w.output_tokens.min() >= 1
    assert np.all(w.max_output_tokens >= w.output_tokens)


FORMATS = {**{name: base[1] for name, base in BASES.items()}, **GENERATED}
CASES = [(name, seed) for name in FORMATS for seed in range(SEEDS_PER_BASE)]


@pytest.mark.parametrize(("name", "seed"), CASES, ids=[f"{n}-{s}" for n, s in CASES])
def test_mutated_file_loads_or_fails_cleanly(tmp_path: Path, name: str, seed: int) -> None:
    rng = random.Random(f"{name}-{seed}")
    lines = _base_lines(name)
    fmt = FORMATS[name]
    if name.endswith(".jsonl"):
        text = _mutate_jsonl(lines, rng)
    else:
        text = _mutate_csv(lines, rng, has_header=fmt != "servegen")
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    if fmt == "servegen":
        dataset = {"0": {"input_tokens": "{100: 0.5, 200: 0.5}", "output_tokens": "{7: 1.0}"}}
        (tmp_path / "chunk-34-dataset.json").write_text(json.dumps(dataset))
    window = (0.0, 1800.0) if fmt == "servegen" else None
    options = TraceOptions(format=fmt if seed % 2 else None, window=window)
    _check_valid(path, options)


@pytest.mark.parametrize("seed", range(60))
def test_mutated_parquet_loads_or_fails_cleanly(tmp_path: Path, seed: int) -> None:
    from kvbudget.workloads.traces import save_workload

    original = load_trace(TRACES / "mooncake" / "synthetic_trace.jsonl",
                          TraceOptions(sample_count=40)).workload
    data = bytearray(save_workload(original, tmp_path / "w.parquet").read_bytes())
    rng = random.Random(seed)
    if seed % 2:
        data = data[: rng.randrange(len(data))]
    else:
        for _ in range(rng.randint(1, 5)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    path = tmp_path / "mutated.parquet"
    path.write_bytes(bytes(data))
    _check_valid(path, TraceOptions())


def _key(w_path: Path, timed: bool) -> list[tuple[float, ...]]:
    w = load_trace(w_path).workload
    if timed:
        return sorted(zip(w.arrival_s.tolist(), w.prompt_tokens.tolist(),
                          w.output_tokens.tolist(), strict=True))
    return sorted(zip(w.prompt_tokens.tolist(), w.output_tokens.tolist(), strict=True))


@pytest.mark.parametrize("name", [n for n in FORMATS if FORMATS[n] != "servegen"])
def test_shuffled_rows_load_to_the_same_requests(tmp_path: Path, name: str) -> None:
    lines = _base_lines(name)
    header = [] if name.endswith(".jsonl") else lines[:1]
    body = lines[len(header):]
    original = tmp_path / f"orig-{name}"
    original.write_text("\n".join(lines) + "\n")
    rng = random.Random(name)
    shuffled_body = list(body)
    while shuffled_body == body:
        rng.shuffle(shuffled_body)
    shuffled = tmp_path / f"shuf-{name}"
    shuffled.write_text("\n".join(header + shuffled_body) + "\n")
    timed = FORMATS[name] != "lengths"
    assert _key(original, timed) == _key(shuffled, timed)
    warnings = load_trace(shuffled).report.warnings
    if timed:
        assert any(re.search(r"not in order", w) for w in warnings)
