"""Interrupting the studies that keep their runs (tune, capacity, plan) with SIGINT and SIGTERM.

A real signal is sent to this process from inside the k-th run (an event: the count of runs
begun, never a delay), while the command runs in-process with one job. What finished is then
on disk, nothing that reads as a finished study is written, and a rerun with ``--resume``
completes it with the same result as a run that was never interrupted.
(tests/cli/test_hostile_inputs.py signals the real entry point in a subprocess.)
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import kvbudget.studies.sweep as sweep_mod
from kvbudget.cli.main import app, terminate
from tests.conftest import small_scenario_dict

runner = CliRunner()
SIGNALS = [signal.SIGINT, signal.SIGTERM]


@pytest.fixture(scope="module")
def scn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scenario file for the module (run keys hash its folder: the reference study and the
    interrupted one share it)."""
    import tomli_w

    path = tmp_path_factory.mktemp("scenario") / "s.toml"
    path.write_text(tomli_w.dumps(small_scenario_dict(n=30, rate=6.0, policy="overcommit")))
    return path


def _args(kind: str, scn: Path, out: Path) -> list[str]:
    common = ["--scenario", str(scn), "--out", str(out), "-j", "1"]
    if kind == "tune":
        return ["tune", *common, "--param", "policy_params.overcommit_ratio=0.2:1",
                "--grid-points", "3", "-r", "2", "--refine-evals", "2", "--validate", "2",
                "--slo", "overall_num_preemptions<=50"]
    if kind == "capacity":
        return ["capacity", *common, "--policies", "conservative,overcommit", "-r", "2",
                "--rel-tol", "0.3", "--no-plot", "--slo", "interactive_ttft_p99_s<=4"]
    return ["plan", *common, "--gpus", "A100-80GB,H100-80GB", "--replicas", "1,2", "-r", "2",
            "--slo", "interactive_ttft_p99_s<=1.5"]


# what each study writes once it has finished (none of them may exist after an interrupt)
FINAL = {"tune": ["tune.json", "best.toml", "evidence.parquet", "evaluations.csv"],
         "capacity": ["capacity.json", "evidence.parquet"],
         "plan": ["plan.json", "plan.csv"]}


@pytest.fixture
def counted_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int, int], None]]:
    """``arm(k, sig)``: the k-th run begun sends ``sig`` to this process (as Ctrl-C or `kill`
    would) before it simulates anything."""
    real = sweep_mod.run_one
    state: dict[str, Any] = {"k": 0, "sig": None, "n": 0}

    def run_one(spec: Any) -> dict[str, Any]:
        state["n"] += 1
        if state["n"] == state["k"]:
            os.kill(os.getpid(), state["sig"])
        return real(spec)

    monkeypatch.setattr(sweep_mod, "run_one", run_one)
    old_term = signal.signal(signal.SIGTERM, terminate)  # what kvbudget's main() installs
    # Python's own Ctrl-C handler, as in a command's process (a pytest-xdist worker ignores
    # SIGINT, leaving Ctrl-C to the controller)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)

    def arm(k: int, sig: int) -> None:
        state.update(k=k, sig=sig, n=0)

    try:
        yield arm
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)


def _invoke(args: list[str]) -> tuple[int, str, str]:
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return res.exit_code, res.stdout, res.stderr


def _result_files(out: Path, kind: str) -> dict[str, Any]:
    """The finished study's files, comparable across two runs (wall time dropped)."""
    import pandas as pd

    got: dict[str, Any] = {}
    for name in FINAL[kind]:
        path = out / name
        if name.endswith(".parquet"):
            df = pd.read_parquet(path)
            got[name] = df.drop(columns=[c for c in df.columns if "wall_time" in c])
        elif name.endswith(".csv"):
            got[name] = pd.read_csv(path).drop(columns=["wall_time_s"], errors="ignore")
        else:
            text = path.read_text()
            got[name] = json.loads(text) if name.endswith(".json") else text
    return got


def _assert_same(a: dict[str, Any], b: dict[str, Any]) -> None:
    import pandas as pd

    assert a.keys() == b.keys()
    for name in a:
        if isinstance(a[name], pd.DataFrame):
            pd.testing.assert_frame_equal(a[name], b[name], check_like=True)
        else:
            assert a[name] == b[name], name


_REFERENCE: dict[str, dict[str, Any]] = {}


def _reference(kind: str, scn: Path) -> dict[str, Any]:
    if kind not in _REFERENCE:
        out = scn.parent / f"reference-{kind}"
        code, _, stderr = _invoke(_args(kind, scn, out))
        assert code in (0, 1), stderr
        _REFERENCE[kind] = {"code": code, "files": _result_files(out, kind)}
    return _REFERENCE[kind]


@pytest.mark.parametrize("sig", SIGNALS, ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("kind", ["tune", "capacity", "plan"])
def test_an_interrupted_study_keeps_its_runs_and_resumes_to_the_same_result(
        tmp_path: Path, scn: Path, counted_runs: Callable[[int, int], None], kind: str,
        sig: signal.Signals) -> None:
    # the reference: the same study never interrupted (its own directory)
    counted_runs(0, sig)
    ref = _reference(kind, scn)
    out = tmp_path / "study"
    args = _args(kind, scn, out)
    k = 4  # interrupted as the fourth run begins: three finished
    counted_runs(k, sig)
    code, _, stderr = _invoke(args)
    assert code == 130, stderr
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("error: interrupted") and "--resume" in lines[-1], stderr
    assert "Traceback" not in stderr
    # what finished is on disk, and nothing reads as a finished study
    kept = sweep_mod.RunStore(out).read()
    assert len(kept) == k - 1 and kept["run_key"].is_unique
    assert not [n for n in FINAL[kind] if (out / n).exists()]
    # a rerun without --resume refuses to mix two studies
    counted_runs(0, sig)
    code, _, stderr = _invoke(args)
    assert code == 2 and "--resume" in stderr, stderr
    # --resume completes it: the same result as the uninterrupted study, the kept runs reused
    seen: list[int] = []
    real = sweep_mod.run_one

    def counting(spec: Any) -> dict[str, Any]:
        seen.append(1)
        return real(spec)

    sweep_mod.run_one = counting  # restored by the fixture's monkeypatch
    code, _, stderr = _invoke([*args, "--resume"])
    assert code == ref["code"], stderr
    _assert_same(_result_files(out, kind), ref["files"])
    total = len(sweep_mod.RunStore(out).read())
    assert len(seen) == total - (k - 1)  # only the runs not kept were simulated again


def test_sigterm_under_asyncio_run_cancels_the_main_task_as_ctrl_c_does() -> None:
    """Under ``asyncio.run`` (the live commands) SIGTERM goes through asyncio's Ctrl-C handler:
    the main task is cancelled through the event loop, so it sees CancelledError at its next
    await (where a replay flushes what finished) and ``asyncio.run`` then raises
    KeyboardInterrupt. A KeyboardInterrupt raised by the signal handler itself would land in
    whatever code runs then (a weakref callback, where Python only prints it) and the task
    would never see a cancellation."""
    import asyncio

    seen: list[str] = []

    async def main() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # handled at the next bytecode, before the await
        try:
            await asyncio.Event().wait()  # forever, unless cancelled
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    old_term = signal.signal(signal.SIGTERM, terminate)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a command
    try:
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(main())
    finally:
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGINT, old_int)
    assert seen == ["cancelled"]
    assert signal.getsignal(signal.SIGINT) is old_int  # asyncio put its handler back


def test_sigterm_outside_asyncio_raises_keyboard_interrupt() -> None:
    """With Python's own SIGINT handler in force, SIGTERM raises KeyboardInterrupt where the
    main thread is (the studies' way out), and with SIGINT ignored (a shell's background job)
    too."""
    for sigint in (signal.default_int_handler, signal.SIG_IGN):
        old_term = signal.signal(signal.SIGTERM, terminate)
        old_int = signal.signal(signal.SIGINT, sigint)
        try:
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the handler runs at one of the next bytecodes
                    pass
        finally:
            signal.signal(signal.SIGTERM, old_term)
            signal.signal(signal.SIGINT, old_int)
