"""The [workload] table: validation messages that name the field, and build_workload."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.workloads.spec import (
    DEFAULT_RATE_RPS,
    PoissonSpec,
    SyntheticWorkloadSpec,
    TraceWorkloadSpec,
    UniformSpec,
    WorkloadSpecError,
    build_workload,
    default_workload_spec,
    parse_workload_spec,
)

SHARED = Path(__file__).resolve().parents[3].parent / "shared"


def _tier(name: str = "a", share: float = 1.0, **extra: Any) -> dict[str, Any]:
    return {"name": name, "share": share, "prompt": {"kind": "fixed", "tokens": 10},
            "output": {"kind": "fixed", "tokens": 5}, **extra}


def _synthetic(**extra: Any) -> dict[str, Any]:
    return {"kind": "synthetic", "num_requests": 100,
            "arrival": {"kind": "poisson", "rate_rps": 2.0}, "tiers": [_tier()], **extra}


def test_default_spec_is_the_documented_mix() -> None:
    spec = default_workload_spec()
    assert isinstance(spec.arrival, PoissonSpec) and spec.arrival.rate_rps == DEFAULT_RATE_RPS
    assert spec.duration_s == 300.0 and [t.name for t in spec.tiers] == ["interactive", "batch"]
    w = build_workload(spec, np.random.default_rng(0))
    again = build_workload(spec, np.random.default_rng(0))
    assert w.arrival_s.tobytes() == again.arrival_s.tobytes()
    assert w.output_tokens.tobytes() == again.output_tokens.tobytes()
    n = len(w)
    expected = DEFAULT_RATE_RPS * 300
    assert abs(n - expected) < 6 * np.sqrt(expected) and w.arrival_s.max() < 300
    inter = w.tier == w.tier_names.index("interactive")
    # Binomial standard error of the 70% share over ~1,800 requests: 1.1%; tolerance 6%.
    assert abs(inter.mean() - 0.7) < 0.06
    assert np.all(w.max_output_tokens[inter] == np.maximum(1024, w.output_tokens[inter]))
    assert np.all(w.max_output_tokens[~inter] == 2048)
    batch_out = w.output_tokens[~inter]
    batch_output = spec.tiers[1].output
    assert isinstance(batch_output, UniformSpec)
    assert batch_output.low >= 256 and batch_output.high == 2048
    assert batch_out.min() >= batch_output.low and batch_out.max() <= batch_output.high
    # Lognormal means (sigma 0.8 / 0.9 / 0.6): standard errors under 3%; tolerance 15%.
    assert abs(w.prompt_tokens[inter].mean() / 1500 - 1) < 0.15
    assert abs(w.output_tokens[inter].mean() / 250 - 1) < 0.15
    assert abs(w.prompt_tokens[~inter].mean() / 4000 - 1) < 0.15
    # Round trip through a plain dict (what a TOML file holds).
    assert parse_workload_spec(spec.model_dump(exclude_none=True)) == spec


def test_module_docstring_examples_parse(tmp_path: Path) -> None:
    import kvbudget.workloads.spec as module

    doc = module.__doc__ or ""
    examples = [block for block in doc.split("::")[1:]]
    assert len(examples) == 2
    for block in examples:
        text = "\n".join(line[4:] for line in block.splitlines() if line.startswith("    "))
        table = tomllib.loads(text)["workload"]
        spec = parse_workload_spec(table)
        assert spec.kind == table["kind"]


@pytest.mark.parametrize(("data", "message"), [
    (_synthetic(tiers=[_tier("a", 0.5), _tier("b", -1)]),
     "workload.tiers[1].share must be > 0, got -1"),
    (_synthetic(arrival={"kind": "poison", "rate_rps": 1}),
     "workload.arrival.kind must be one of 'poisson', 'gamma', 'constant', 'onoff', "
     "'diurnal', 'rate_table', got 'poison'"),
    (_synthetic(arrival={"rate_rps": 1}), "workload.arrival.kind is required"),
    (_synthetic(arrival={"kind": "gamma", "rate_rps": 1}), "workload.arrival.cv is required"),
    (_synthetic(tiers=[_tier(prompt={"kind": "uniform", "low": 5, "high": 3})]),
     "workload.tiers[0].prompt.high must be an integer in [low=5, 10000000], got 3"),
    (_synthetic(tiers=[_tier(prompt={"kind": "lognormal", "mean": 100, "sigma": 0})]),
     "workload.tiers[0].prompt.sigma must be > 0, got 0"),
    (_synthetic(tiers=[{"name": "a", "prompt": {"kind": "fixed", "tokens": 1}}]),
     "workload.tiers[0].output is required (or give pairs)"),
    (_synthetic(tiers=[_tier("a b")]),
     "workload.tiers[0].name must be alphanumeric (with - or _), got 'a b'"),
    (_synthetic(tiers=[_tier("a", 0.5)]), "workload.tiers shares must sum to 1, got 0.5"),
    (_synthetic(tiers=[_tier("a", 0.5), _tier("a", 0.5)]),
     "workload.tiers[1].name repeats an earlier tier, got 'a'"),
    ({**_synthetic(), "num_requests": None}, "workload.duration_s or num_requests is required"),
    (_synthetic(rate=3), "workload.rate is not a known field (did you mean "
     "workload.arrival.rate_rps?)"),
    (_synthetic(tiers=[_tier(max_output={"kind": "factor", "factor": 0.5})]),
     "workload.tiers[0].max_output.factor must be >= 1, got 0.5"),
    (_synthetic(tiers=[_tier(deadline={"kind": "uniform", "low_s": 5, "high_s": 1})]),
     "workload.tiers[0].deadline.high_s must be >= low_s=5, got 1"),
    (_synthetic(arrival={"kind": "rate_table", "times_s": [0, 5], "rates_rps": [1]}),
     "workload.arrival.rates_rps must have 2 entries (one per time), got 1"),
    (_synthetic(tiers=[_tier(prompt={"kind": "pmf", "values": [1, 2], "probs": [0.5, 0.2]})]),
     "workload.tiers[0].prompt.probs must sum to 1, got 0.7"),
    ({"kind": "trace", "path": "x.csv", "options": {"rate_scale": 0}},
     "workload.options.rate_scale must be > 0, got 0"),
    ({"kind": "trace", "path": "x.csv", "options": {"window": [10, 5]}},
     "workload.options.window end_s must be > start_s=10, got 5"),
    ({"kind": "trace", "path": "x.csv", "format": "csv"},
     "workload.format must be 'azure', 'burstgpt', 'mooncake', 'lengths', 'splitwise', "
     "'servegen' or 'generic', got 'csv'"),
    ({"kind": "trace"}, "workload.path is required"),
    ({}, "workload.kind is required"),
])
def test_errors_name_the_field(data: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadSpecError) as info:
        parse_workload_spec(data)
    assert str(info.value).split(" (and ")[0] == message


@pytest.mark.parametrize(("data", "message"), [
    # the synthetic workload's rate is its arrival's: `--set workload.rate_rps=8` said only
    # "is not a known field"
    (_synthetic(rate_rps=8), "workload.rate_rps is not a known field (did you mean "
     "workload.arrival.rate_rps?)"),
    (_synthetic(duration=60), "workload.duration is not a known field (did you mean "
     "workload.duration_s?)"),
    (_synthetic(arrival={"kind": "poisson", "rate_rps": 2, "rate": 2}),
     "workload.arrival.rate is not a known field (did you mean workload.arrival.rate_rps?)"),
    (_synthetic(tiers=[{**_tier(), "shar": 1}]), "workload.tiers[0].shar is not a known field "
     "(did you mean workload.tiers[0].share?)"),
    ({"kind": "trace", "path": "x.csv", "rate_scale": 2}, "workload.rate_scale is not a known "
     "field (did you mean workload.options.rate_scale?)"),
    ({"kind": "trace", "path": "x.csv", "options": {"windw": [0, 5]}}, "workload.options.windw "
     "is not a known field (did you mean workload.options.window?)"),
    # the arrival's kind given: only its fields (a Poisson process has no cv)
    (_synthetic(cv=2), "workload.cv is not a known field"),
    (_synthetic(arrival={"kind": "gamma", "rate_rps": 1, "cv": 2}, cv=2),
     "workload.cv is not a known field (did you mean workload.arrival.cv?)"),
    (_synthetic(colour=1), "workload.colour is not a known field"),
])
def test_an_unknown_field_names_the_one_meant(data: dict[str, Any], message: str) -> None:
    with pytest.raises(WorkloadSpecError) as info:
        parse_workload_spec(data)
    assert str(info.value) == message


def test_error_prefix_is_configurable() -> None:
    with pytest.raises(WorkloadSpecError, match=r"^scenario\.workload\.tiers\[0\]\.share"):
        parse_workload_spec(_synthetic(tiers=[_tier("a", 2.0)]), prefix="scenario.workload")


def test_trace_spec_resolves_paths_and_draws_seed_from_rng(tmp_path: Path) -> None:
    rows = "".join(f"{t * 0.5},{10 + t},{1 + t % 3}\n" for t in range(200))
    (tmp_path / "t.csv").write_text("arrival_s,prompt_tokens,output_tokens\n" + rows)
    spec = parse_workload_spec({"kind": "trace", "path": "t.csv", "options": {
        "sample_fraction": 0.5, "window": [10], "tier_shares": {"interactive": 0.5,
                                                                  "batch": 0.5}}})
    assert isinstance(spec, TraceWorkloadSpec)
    a = build_workload(spec, np.random.default_rng(1), base_dir=tmp_path)
    b = build_workload(spec, np.random.default_rng(1), base_dir=tmp_path)
    c = build_workload(spec, np.random.default_rng(2), base_dir=tmp_path)
    assert np.array_equal(a.request_id, b.request_id)
    assert not np.array_equal(a.request_id, c.request_id)
    assert len(a) == 90 and a.arrival_s[0] >= 0


@pytest.mark.skipif(not SHARED.exists(), reason="shared data not present")
def test_empirical_and_pairs_from_files(tmp_path: Path) -> None:
    lengths = SHARED / "traces" / "sharegpt_lengths" / (
        "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
    table = _synthetic(num_requests=5000, tiers=[
        {"name": "a", "share": 0.5,
         "prompt": {"kind": "empirical", "path": str(lengths), "column": "prompt_tokens"},
         "output": {"kind": "empirical", "path": str(lengths), "column": "output_tokens"}},
        {"name": "b", "share": 0.5, "pairs": {"kind": "pairs", "path": str(lengths)}},
    ])
    spec = parse_workload_spec(table)
    assert isinstance(spec, SyntheticWorkloadSpec)
    w = build_workload(spec, np.random.default_rng(0))
    # ShareGPT (SOURCES.md): prompt mean 2,340, output mean 439; standard errors ~1.5%.
    for code in (0, 1):
        sel = w.tier == code
        assert abs(w.prompt_tokens[sel].mean() / 2340 - 1) < 0.1
        assert abs(w.output_tokens[sel].mean() / 439 - 1) < 0.1
    assert w.prompt_tokens.max() + w.output_tokens.max() <= 2 * 8192


def test_rate_table_from_file(tmp_path: Path) -> None:
    (tmp_path / "rates.csv").write_text("time_s,rate_rps\n0,1\n100,10\n")
    (tmp_path / "lengths.csv").write_text("num_prefill_tokens,num_decode_tokens\n5,6\n7,8\n")
    trace = parse_workload_spec({"kind": "trace", "path": "lengths.csv", "options": {
        "arrival": {"kind": "rate_table", "path": "rates.csv"}}})
    tw = build_workload(trace, np.random.default_rng(0), base_dir=tmp_path)
    assert len(tw) == 2 and tw.prompt_tokens.tolist() == [5, 7]
    spec = parse_workload_spec(_synthetic(
        num_requests=None, duration_s=200,
        arrival={"kind": "rate_table", "path": "rates.csv"}))
    w = build_workload(spec, np.random.default_rng(0), base_dir=tmp_path)
    early = int((w.arrival_s < 100).sum())
    late = len(w) - early
    assert abs(early - 100) < 60 and abs(late - 1000) < 200
