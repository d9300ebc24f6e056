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


LENGTHS = ["num_prefill_tokens,num_decode_tokens", "100,20", "300,5", "50,60", "70,1"]


@pytest.mark.parametrize("seed", [0, 3, 12345])
def test_a_plain_trace_that_draws_draws_what_the_spec_path_draws(tmp_path: Path,
                                                                 seed: int) -> None:
    # a length-only table: its arrivals are drawn from the trace's seed (the scenario's
    # first draw), which the plain path derives only when the load asks for it
    (tmp_path / "l.csv").write_text("\n".join(LENGTHS) + "\n")
    table = {"kind": "trace", "path": "l.csv", "format": "lengths"}
    plain = _scenario(table, tmp_path, seed).workload()
    _same(plain, _through_spec(table, tmp_path, seed))
    assert np.unique(plain.arrival_s).size == len(LENGTHS) - 1


def test_streams_are_spawned_together_whichever_is_used_first() -> None:
    from kvbudget.workloads.traces._finish import Streams

    eager = [np.random.default_rng(s) for s in np.random.SeedSequence(7).spawn(4)]
    names = ["arrival", "sample", "tiers", "source"]
    for first in names:
        streams = Streams.from_seed(lambda: 7)
        order = [first, *(n for n in names if n != first)]
        draws = {n: getattr(streams, n).integers(0, 2**62) for n in order}
        assert [draws[n] for n in names] == [g.integers(0, 2**62) for g in
                                              (np.random.default_rng(s) for s in
                                               np.random.SeedSequence(7).spawn(4))]
    assert [getattr(Streams.from_seed(7), n).random() for n in names] == \
        [g.random() for g in eager]


def test_a_timed_plain_trace_never_imports_numpy_random(tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "t.csv").write_text("\n".join(ROWS) + "\n")
    probe = ("import sys; from pathlib import Path; "
             "from kvbudget.simulator.scenario import scenario_from_dict; "
             "s = scenario_from_dict({'seed': 3, 'policy': 'unlimited', 'workload': "
             f"{{'kind': 'trace', 'path': 't.csv'}}}}, Path({str(tmp_path)!r})); "
             "n = len(s.workload()); print(n, 'numpy.random' in sys.modules)")
    repo = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", probe], cwd=repo, capture_output=True,
                          text=True, check=False)
    # the child's stderr on failure: it died once with SIGABRT under load, saying nothing
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert done.stdout.split() == ["5", "False"]


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
