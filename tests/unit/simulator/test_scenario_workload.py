"""A scenario's plain trace workload (a path, maybe a format) skips the pydantic workload spec;
it must load exactly what the full spec loads, and anything else still goes through the spec."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvbudget.simulator.scenario import scenario_from_dict
from kvbudget.workloads import Workload
from kvbudget.workloads.spec import WorkloadSpecError, build_workload, parse_workload_spec

ROWS = [
    "TIMESTAMP,ContextTokens,GeneratedTokens",
    "2023-11-16 18:15:46.6805900,374,44",
    "2023-11-16 18:15:50.9951690,396,109",
    "2023-11-16 18:15:51.1910000,879,4000",
    "2023-11-16 18:15:51.1910000,91,7",
    "2023-11-16 18:15:55.4441080,91,2",
]


def _scenario(workload: dict[str, Any], base: Path, seed: int = 3) -> Any:
    return scenario_from_dict({"seed": seed, "policy": "unlimited", "workload": workload}, base)


def _through_spec(workload: dict[str, Any], base: Path, seed: int = 3) -> Workload:
    rng = np.random.default_rng(np.random.SeedSequence(seed))
    return build_workload(parse_workload_spec(workload), rng, base_dir=base)


def _same(a: Workload, b: Workload) -> None:
    for f in dataclasses.fields(Workload):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype, f.name
            np.testing.assert_array_equal(x, y, err_msg=f.name)
        else:
            assert x == y, f.name


@pytest.mark.parametrize("table", [
    {"kind": "trace", "path": "t.csv"},
    {"kind": "trace", "path": "t.csv", "format": "azure"},
    {"kind": "trace", "path": "t.csv", "format": None},
    {"kind": "trace", "path": "t.csv", "options": {"rate_scale": 2.0}},
])
def test_plain_trace_workload_equals_the_spec_path(tmp_path: Path, table: dict[str, Any]) -> None:
    (tmp_path / "t.csv").write_text("\n".join(ROWS) + "\n")
    _same(_scenario(table, tmp_path).workload(), _through_spec(table, tmp_path))
    absolute = {**table, "path": str(tmp_path / "t.csv")}
    _same(_scenario(absolute, Path("/")).workload(), _through_spec(table, tmp_path))


@pytest.mark.parametrize("table", [
    {"kind": "trace", "path": "t.csv", "format": "nope"},
    {"kind": "trace", "path": ""},
    {"kind": "trace", "path": "t.csv", "extra": 1},
])
def test_an_invalid_trace_table_gets_the_spec_message(tmp_path: Path,
                                                      table: dict[str, Any]) -> None:
    (tmp_path / "t.csv").write_text("\n".join(ROWS) + "\n")
    with pytest.raises(WorkloadSpecError) as full:
        parse_workload_spec(table)
    with pytest.raises(WorkloadSpecError) as fast:
        _scenario(table, tmp_path).workload()
    assert str(fast.value) == str(full.value)
