"""An ``[engine]`` knob's bad value is named as the user writes it (``engine.NAME`` of ``--set``
and of a scenario's ``[engine]`` table, or the flag typed), as the knobs pydantic checks are.

``--set engine.kv_cache_dtype=int3`` said "kv_cache_dtype must be one of ...", and a scenario
file's "FILE: kv_cache_dtype must be ...", while ``engine.block_size=0`` said
"engine.block_size: ...": the knobs :class:`~kvbudget.simulator.engine_config.EngineConfig`
checks itself (the KV cache's dtype, the knobs of a few choices) lost their table.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app

DTYPES = "auto, bfloat16, float16, bf16, fp16, half, fp8, fp8_e4m3, fp8_e5m2, got 'int3'"


def _error(*args: str) -> str:
    res = CliRunner().invoke(app, ["simulate", *args])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr  # one line, never a traceback
    return lines[0]


@pytest.mark.parametrize(("args", "said"), [
    (["--set", "engine.kv_cache_dtype=int3"],
     f"error: engine.kv_cache_dtype must be one of {DTYPES}"),
    (["--kv-cache-dtype", "int3"], f"error: --kv-cache-dtype must be one of {DTYPES}"),
    (["--set", "engine.preemption_mode=foo"],
     "error: engine.preemption_mode must be 'recompute' or 'swap', got 'foo'"),
])
def test_a_knob_the_engine_checks_is_named_with_its_table(args: list[str], said: str) -> None:
    assert _error(*args) == said


def test_a_scenario_files_knob_is_named_with_its_table(tmp_path: Path) -> None:
    scenario = tmp_path / "s.toml"
    scenario.write_text('[engine]\nkv_cache_dtype = "int3"\n')
    assert _error("--scenario", str(scenario)) == (
        f"error: {scenario}: engine.kv_cache_dtype must be one of {DTYPES}")


REC = Path(__file__).resolve().parents[1] / "fixtures/recordings/vllm-bench-0.32.0/rate8.json"
"""A recording of vllm bench serve 0.32.0 (tests/fixtures/recordings: made by running it)."""


def _records_error(command: str, *args: str, out: str) -> str:
    res = CliRunner().invoke(app, [command, "--records", str(REC), "--gpu", "H100-80GB",
                                   "--model", "Llama-3.1-8B", "--out", out, *args])
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), res.stderr  # one line, never a traceback
    return lines[-1]


@pytest.mark.parametrize("command", ["validate", "calibrate"])
@pytest.mark.parametrize(("args", "said"), [
    # named 'engine.kv_cache_dtype must be ...', 'engine.tensor_parallel_size 3 ...' and
    # 'unknown engine ...': the overrides the flags were turned into, not what was typed
    (["--kv-cache-dtype", "int3"], f"error: --kv-cache-dtype must be one of {DTYPES}"),
    (["-tp", "3"], "error: -tp/--tensor-parallel-size 3 does not divide Llama-3.1-8B's 32 "
     "attention heads (vLLM requires it to)"),
    (["--engine", "foo"], "error: --engine: unknown engine 'foo'; known: vllm, vllm-swap, tgi, "
     "sglang, trtllm"),
    (["--set", "engine.kv_cache_dtype=int3"],
     f"error: engine.kv_cache_dtype must be one of {DTYPES}"),
    (["--num-gpu-blocks", "0"],
     "error: --num-gpu-blocks: input should be greater than or equal to 1, got 0"),
])
def test_a_records_commands_engine_flag_is_named_as_typed(
        command: str, args: list[str], said: str, tmp_path: Path) -> None:
    out = str(tmp_path / ("v" if command == "validate" else "c.json"))
    assert _records_error(command, *args, out=out) == said


@pytest.mark.parametrize("command", ["simulate", "validate"])
def test_a_set_field_is_not_blamed_on_the_scenario_file(command: str, tmp_path: Path) -> None:
    """A ``--set`` of a knob the ``--scenario`` file does not hold was blamed on the file
    ('FILE: engine.kv_cache_dtype must be ...'): it names the field the --set gave; a bad
    value the file holds still names the file."""
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text("[engine]\nmax_num_seqs = 64\n")
    bad.write_text('[engine]\nkv_cache_dtype = "int3"\n')
    records = [] if command == "simulate" else ["--records", str(REC), "--gpu", "H100-80GB",
                                                "--model", "Llama-3.1-8B"]
    for scenario, args, said in (
            (good, ["--set", "engine.kv_cache_dtype=int3"], "error: engine.kv_cache_dtype"),
            (bad, [], f"error: {bad}: engine.kv_cache_dtype")):
        res = CliRunner().invoke(app, [command, *records, "--scenario", str(scenario), *args,
                                       "--out", str(tmp_path / "o")])
        assert res.exit_code == 2, res.output
        assert res.stderr.strip().splitlines()[-1] == f"{said} must be one of {DTYPES}"


def test_the_live_commands_refuse_the_engine_flags_they_do_not_use(tmp_path: Path) -> None:
    """``validate --url`` took --kv-cache-dtype, -tp, --engine, --num-gpu-blocks,
    --block-size, --gpu and --set and used none (the server tells its blocks, the cost file
    the rest); ``calibrate --url --kv-cache-dtype int3`` timed the server, then wrote the
    bad value into the cost file. Each is refused before any server is asked (port 9 has
    none: a refusal after asking would say it cannot reach it)."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0.0, "prompt_tokens": 8, "output_tokens": 4}\n')
    live = ["--url", "http://127.0.0.1:9"]
    for flag, value in (("--kv-cache-dtype", "fp8"), ("-tp", "2"), ("--engine", "tgi"),
                        ("--num-gpu-blocks", "10"), ("--block-size", "32"), ("--gpu", "L4"),
                        ("--set", "engine.max_num_seqs=3")):
        res = CliRunner().invoke(app, ["validate", *live, "--trace", str(trace), "--cost-model",
                                       str(tmp_path / "none.json"), flag, value])
        assert res.exit_code == 2, res.output
        assert "applies to --records, not to a live validation" in res.stderr, res.stderr
    for args, said in ((["--kv-cache-dtype", "int3"], f"--kv-cache-dtype must be one of {DTYPES}"),
                       (["--engine", "tgi"], "--engine applies to --records")):
        res = CliRunner().invoke(app, ["calibrate", *live, *args, "--out",
                                       str(tmp_path / "c.json")])
        assert res.exit_code == 2, res.output
        assert res.stderr.strip().splitlines()[-1].startswith(f"error: {said}"), res.stderr


ENGINES = "vllm, vllm-swap, tgi, sglang, trtllm"


@pytest.mark.parametrize(("command", "args"), [
    ("simulate", []), ("compare", []), ("sweep", []), ("plan", []),
    ("tune", ["--param", "engine.max_num_seqs=64:512:int"]),
    ("validate", ["--records", str(REC), "--gpu", "H100-80GB", "--model", "Llama-3.1-8B"]),
    ("calibrate", ["--records", str(REC), "--gpu", "H100-80GB", "--model", "Llama-3.1-8B"]),
])
def test_a_set_engine_name_is_named_as_typed(command: str, args: list[str],
                                             tmp_path: Path) -> None:
    """``--set engine.name=foo`` said "unknown engine 'foo'" naming no field (``--engine foo``
    named ``--engine``): each command names the field the --set gave."""
    out = str(tmp_path / ("o.json" if command == "calibrate" else "o"))
    res = CliRunner().invoke(app, [command, *args, "--set", "engine.name=foo", "--out", out])
    assert res.exit_code == 2, res.output
    assert res.stderr.strip().splitlines()[-1] == (
        f"error: engine.name: unknown engine 'foo'; known engines: {ENGINES}")


def test_a_scenario_files_engine_name_and_a_knob_it_refuses_are_named(tmp_path: Path) -> None:
    """A scenario file's unknown ``[engine] name`` named the file but no field, and
    ``async_scheduling`` on TGI (a check whose message leads ``KEY:``) lost its table."""
    scenario = tmp_path / "s.toml"
    scenario.write_text('[engine]\nname = "foo"\n')
    assert _error("--scenario", str(scenario)) == (
        f"error: {scenario}: engine.name: unknown engine 'foo'; known engines: {ENGINES}")
    assert _error("--set", "engine.name=tgi", "--set", "engine.async_scheduling=true") == (
        "error: engine.async_scheduling: TGI's router schedules each step after the last "
        "one's output (it has no such option)")


BLOCK = ("is not a multiple of 16: vLLM 0.32.0 has no CUDA attention backend for it and stops "
         "at start-up ('No valid attention backend found'; "
         "kvbudget.perf.vllm_defaults.BLOCK_SIZE_MULTIPLE)")


@pytest.mark.parametrize(("args", "said"), [
    (["--block-size", "7"], f"error: --block-size 7 {BLOCK}"),
    (["--set", "engine.block_size=8"], f"error: engine.block_size 8 {BLOCK}"),
    (["--block-size", "24"], f"error: --block-size 24 {BLOCK}"),
])
def test_a_block_size_no_cuda_backend_of_vllm_takes_is_refused(args: list[str], said: str
                                                                 ) -> None:
    """``simulate --block-size 7`` ran, where vLLM 0.32.0 on a CUDA GPU stops at start-up: every
    attention backend it picks from takes multiples of 16 only
    (:data:`kvbudget.perf.vllm_defaults.BLOCK_SIZE_MULTIPLE` cites them)."""
    assert _error(*args) == said


V0 = ("is none of vLLM v0's (8, 16, 32, 64, 128): engine vllm-swap is vLLM v0 with swap "
      "preemption, whose --block-size takes no other size on a CUDA GPU "
      "(kvbudget.perf.vllm_defaults.V0_BLOCK_SIZES)")


@pytest.mark.parametrize(("args", "said"), [
    (["--block-size", "24"], f"error: --block-size 24 {V0}"),
    (["--block-size", "7"], f"error: --block-size 7 {V0}"),
    (["--block-size", "1"], f"error: --block-size 1 {V0}"),  # a v0 choice with no CUDA kernel
    (["--set", "engine.block_size=256"], f"error: engine.block_size 256 {V0}"),
])
def test_a_block_size_vllm_v0_does_not_take_is_refused_for_the_swap_engine(
        args: list[str], said: str) -> None:
    """``simulate --engine vllm-swap --block-size 24`` ran, where vLLM v0 (the swap engine's
    counterpart) refuses the flag: its choices are 1, 8, 16, 32, 64, 128 and 1 has no CUDA
    kernel (:data:`kvbudget.perf.vllm_defaults.V0_BLOCK_SIZES` cites vLLM 0.8.5). Its rule is
    not vLLM 0.32.0's multiple of 16: v0 ran 8 on XFormers (test below)."""
    assert _error("--engine", "vllm-swap", *args) == said


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_records_commands_block_size_is_refused_naming_the_flag(command: str,
                                                                  tmp_path: Path) -> None:
    out = str(tmp_path / ("v" if command == "validate" else "c.json"))
    assert _records_error(command, "--block-size", "7", out=out) == f"error: --block-size 7 {BLOCK}"


def test_the_block_sizes_vllm_takes_and_other_engines_sizes_still_run(tmp_path: Path) -> None:
    """A multiple of 16 runs as before; the check is vLLM's: SGLang's page size is 1 by
    default (``tests/unit/results/test_published_sglang_server.py``), and a scenario file's own
    value is named by the file."""
    for args in (["--block-size", "32"], ["--engine", "sglang", "--block-size", "7"],
                 ["--engine", "vllm-swap", "--block-size", "8"],
                 ["--engine", "vllm-swap", "--block-size", "128"]):
        res = CliRunner().invoke(app, ["simulate", "--set", "workload.num_requests=20", *args])
        assert res.exit_code == 0, res.output
    scenario = tmp_path / "s.toml"
    scenario.write_text("[engine]\nblock_size = 8\n")
    assert _error("--scenario", str(scenario)) == f"error: {scenario}: engine.block_size 8 {BLOCK}"
