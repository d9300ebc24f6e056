"""Scenario specs: the plain check that spares the command line pydantic must accept only data
that pydantic accepts, and return exactly what pydantic returns; anything else goes to pydantic,
which words the error."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kvbudget.simulator.scenario import (
    _NOT_PLAIN,
    _UNSURE,
    ScenarioSpec,
    _plain_literal,
    _plain_value,
    _spec_adapter,
    _spec_fields,
    dump_spec,
    validate_spec,
)

REPO = Path(__file__).resolve().parents[3]

LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([2, 16, 7672, 2**53, 2**53 + 1, 2**64]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 0.5, 1.0, 1.5, 4.0]),
    st.text(max_size=3),
    st.sampled_from(["vllm", "7", "1.5", "A100-80GB"]),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=2), inner, max_size=3),
    ),
    max_leaves=6,
)


def _of_kind(hint: Any) -> st.SearchStrategy[Any]:
    """Values of the kind ``hint`` takes, near and across its constraints (ints for floats too)."""
    origin = get_origin(hint)
    if origin is Annotated:
        return _of_kind(get_args(hint)[0])
    if origin is Union or origin is UnionType:
        return st.one_of(*(_of_kind(a) for a in get_args(hint)))
    if hint is type(None):
        return st.none()
    if hint is int:
        return st.one_of(st.integers(-2, 3), st.sampled_from([16, 7672, 2**53 + 1]))
    if hint is float:
        return st.one_of(st.integers(-1, 3), st.floats(-1, 2), st.sampled_from([math.inf, 1e300]))
    if hint is str:
        return st.text(max_size=3)
    if hint is bool:
        return st.booleans()
    if hint is Any:
        return VALUES
    if origin is dict:
        return st.dictionaries(st.text(max_size=2), _of_kind(get_args(hint)[1]), max_size=2)
    if origin is list:
        return st.lists(_of_kind(get_args(hint)[0]), max_size=2)
    return _table(hint)


def _table(cls: type[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Dicts with some of ``cls``'s keys (now and then one it does not have), each mostly holding
    a value of the kind its field takes, sometimes one of any kind."""
    hints, _ = _spec_fields(cls)
    value = {name: st.one_of(_of_kind(hint), _of_kind(hint), _of_kind(hint), VALUES)
             for name, hint in hints.items()}
    value["bogus"] = VALUES
    keys = st.lists(st.sampled_from([*hints, *hints, "bogus"]), unique=True, max_size=len(hints))
    return keys.flatmap(lambda ks: st.fixed_dictionaries({k: value[k] for k in ks}))


def _same(a: Any, b: Any) -> bool:
    """Equal, down to int against float and NaN (repr tells 5 from 5.0)."""
    return repr(a) == repr(b)


@settings(max_examples=300, deadline=None)
@given(_table(ScenarioSpec))
def test_plain_check_agrees_with_pydantic(data: dict[str, Any]) -> None:
    plain = _plain_value(ScenarioSpec, data)
    try:
        validated = _spec_adapter().validate_python(data)
    except ValidationError:
        assert plain is _UNSURE, data
        return
    if plain is not _UNSURE:
        assert _same(plain, validated), data


@pytest.mark.parametrize("data", [
    {},
    {"name": "default", "seed": 0, "policy": "unlimited", "gpu": "A100-80GB",
     "model": "Llama-2-7B", "engine": {"num_gpu_blocks": 7672, "block_size": 16},
     "workload": {"kind": "trace", "path": "/x.jsonl"}},
    {"lease_ttl_s": 3, "timeline_period_s": 2, "tiers": [{"name": "a", "ttft_s": 1}],
     "front_door": {"tier_max_queued": {"a": 3}}, "fleet": {"gpus": ["H100-80GB"]},
     "policy_params": {"overcommit_ratio": 0.5, "nested": {"x": [1]}}},
])
def test_plain_check_takes_well_typed_scenarios(data: dict[str, Any]) -> None:
    plain = _plain_value(ScenarioSpec, data)
    assert plain is not _UNSURE
    assert _same(plain, _spec_adapter().validate_python(data))
    assert isinstance(plain.timeline_period_s, float) and not math.isnan(plain.timeline_period_s)


@pytest.mark.parametrize(("data", "message"), [
    ({"engine": {"max_num_seqs": 0}},
     "engine.max_num_seqs: input should be greater than or equal to 1, got 0"),
    ({"engine": {"bogus": 1}}, "engine.bogus: extra inputs are not permitted, got 1"),
    ({"tiers": [{"priority": 1}]}, "tiers.0.name: field required"),
    ({"seed": "many"}, "seed: input should be a valid integer"),
])
def test_invalid_data_is_worded_by_pydantic(data: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_spec(data)
    assert str(info.value).startswith(message)


def test_coercions_are_pydantics() -> None:
    spec = validate_spec({"seed": "7", "engine": {"max_num_seqs": 4.0}})
    assert spec.seed == 7 and type(spec.engine.max_num_seqs) is int


def test_dump_leaves_out_unset_fields() -> None:
    spec = validate_spec({"tiers": [{"name": "a"}], "engine": {"block_size": 32}})
    data = dump_spec(spec, mode="json")
    assert "cost_model" not in data and "fleet" not in data
    assert data["engine"]["block_size"] == 32 and "num_gpu_blocks" not in data["engine"]
    assert data["tiers"][0]["name"] == "a"
    assert validate_spec(json.loads(json.dumps(data))) == spec


def test_command_line_scenarios_do_not_import_pydantic(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0.0, "input_length": 10, "output_length": 5}\n')
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from kvbudget.cli.simulate import build_scenario\n"
        f"scn = build_scenario(scenario=None, overrides=None, policy='unlimited', gpu='A100-80GB',"
        f" model='Llama-2-7B', seed=3, trace=Path({str(trace)!r}), num_gpu_blocks=7672,"
        " block_size=16, max_num_seqs=256, max_num_batched_tokens=4096, engine='vllm')\n"
        "scn.sim_config(); scn.make_policy()\n"
        "assert 'pydantic' not in sys.modules, 'pydantic imported'\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


_LITERAL_TEXT = st.one_of(
    st.text(alphabet='0123456789-+._eE"\\ #truefalsinx\x00\x1f\x7f\u00e9\'[]{}', max_size=12),
    st.integers().map(str),
    st.floats(allow_nan=True).map(json.dumps),
    st.booleans().map(json.dumps),
    st.text().map(json.dumps),
)


@settings(max_examples=400, deadline=None)
@given(_LITERAL_TEXT)
def test_plain_literals_read_as_toml_reads_them(raw: str) -> None:
    """A ``--set`` value (or a flag ``make_scenario`` writes with ``json.dumps``) read without
    tomllib is exactly what tomllib reads; anything the fast path does not vouch for is left to
    tomllib."""
    import tomllib

    value = _plain_literal(raw)
    if value is _NOT_PLAIN:
        return
    expected = tomllib.loads(f"v = {raw}")["v"]
    assert type(value) is type(expected)
    assert value == expected
    if isinstance(value, float):
        assert math.copysign(1.0, value) == math.copysign(1.0, expected)


def test_plain_literals_cover_the_command_line_flags() -> None:
    for value in (7672, 16, -3, 0.5, -0.0, True, False, "A100-80GB", "Llama-2-7B", "vllm"):
        raw = json.dumps(value)
        assert _plain_literal(raw) == value and type(_plain_literal(raw)) is type(value)
    for raw in ("1_000", "+5", "007", "1e5", "inf", "'lit'", '"a\\nb"', "[1, 2]", "1979-05-27"):
        assert _plain_literal(raw) is _NOT_PLAIN


def test_the_preemption_victim_rule_is_a_scenario_setting(tmp_path: Path) -> None:
    """The engine option of the one-engine issue's demonstration, from a scenario file; a
    value the engine does not have, or an engine with its own victims, is one line."""
    from kvbudget.simulator.scenario import load_scenario

    path = tmp_path / "s.toml"
    path.write_text('[engine]\npreemption_victim = "most_blocks"\n')
    assert load_scenario(path).sim_config().engine.preemption_victim == "most_blocks"
    for overrides, message in ((["engine.preemption_victim=biggest"], "must be 'latest_arrival'"),
                               (["engine.name=tgi"], "is for vllm and vllm-swap")):
        with pytest.raises(ValueError, match=message):
            load_scenario(path, overrides).sim_config()


def test_the_engines_queue_caps_are_scenario_settings(tmp_path: Path) -> None:
    """``[engine] max_num_queued_reqs`` and the others from a file; a cap of 0 (which would
    refuse every request) or a cap another engine has is one line naming the field."""
    from kvbudget.simulator.scenario import load_scenario

    path = tmp_path / "s.toml"
    path.write_text("[engine]\nmax_num_queued_reqs = 64\nmax_num_queued_tokens = 32768\n")
    engine = load_scenario(path).sim_config().engine
    assert (engine.max_num_queued_reqs, engine.max_num_queued_tokens) == (64, 32768)
    for overrides, message in ((["engine.max_num_queued_reqs=0"], "max_num_queued_reqs"),
                               (["engine.name=sglang"], "max_num_queued_reqs is vllm and "
                                                        "vllm-swap's queue cap")):
        with pytest.raises(ValueError, match=message):
            load_scenario(path, overrides).sim_config()


def test_a_set_of_what_a_trace_flag_gives_is_refused(tmp_path: Path) -> None:
    """Before, the ``--set`` item won over the flag, unsaid: ``--trace a.csv --set
    workload.path=b.csv`` simulated b.csv, ``--rate-scale 4 --set
    workload.options.rate_scale=2`` ran at 2x (docs: the flags win)."""
    from kvbudget.simulator.scenario import make_scenario

    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    for path, prompt in ((a, 10), (b, 20)):
        path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,{prompt},5\n1,{prompt},5\n")
    with pytest.raises(ValueError, match=r"^--set workload.path: the trace \(--trace\) gives "
                                         "it too: give it once$"):
        make_scenario(None, [f"workload.path={json.dumps(str(b))}"], trace=a)
    with pytest.raises(ValueError, match=r"^--set workload.options.rate_scale: the trace option "
                                         r"rate_scale \(--rate-scale\) gives it too"):
        make_scenario(None, ["workload.options.rate_scale=2"], trace=a,
                      trace_options={"rate_scale": 4.0})
    # what no flag gives is still the --set item's: options of the --trace file
    scn = make_scenario(None, ["workload.options.rate_scale=2"], trace=a)
    assert scn.workload().arrival_s.tolist() == [0.0, 0.5]


@pytest.mark.parametrize("extra", ["", 'format = "generic"\n', "options = { rate_scale = 2.0 }\n"])
def test_a_missing_trace_file_names_the_scenario_and_the_field(tmp_path: Path,
                                                               extra: str) -> None:
    """Before, the error named only the resolved trace file (``FILE: no such file``), not the
    scenario file that named it nor its field."""
    import re

    from kvbudget.simulator.scenario import load_scenario

    scn = tmp_path / "s.toml"
    scn.write_text(f'[workload]\nkind = "trace"\npath = "traces/nope.csv"\n{extra}')
    scenario = load_scenario(scn)
    want = f"{scn}: workload.path: {tmp_path / 'traces' / 'nope.csv'} does not exist"
    with pytest.raises(ValueError, match=f"^{re.escape(want)}$"):
        scenario.workload()
    # a file that is there loads as before
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "nope.csv").write_text(
        "arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10,5\n")
    assert len(scenario.workload().prompt_tokens) == 2
