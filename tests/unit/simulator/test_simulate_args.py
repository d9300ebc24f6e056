"""``kb.simulate``'s arguments from a notebook: a policy's name, a scenario or a dict where an
object belongs is refused by name, not met deep inside the run (SimPy's AttributeError)."""

from __future__ import annotations

import pytest

import kvbudget as kb


def _workload() -> kb.Workload:
    return kb.from_columns(arrival_s=[0.0, 1.0], prompt_tokens=[100, 200],
                           output_tokens=[10, 20])


@pytest.mark.parametrize(("args", "said"), [
    (("conservative",), r"simulate: policy must be a policy object: kb.make_policy\(name\), "
                        r"got str 'conservative'"),
    ((None, {"gpu": "H100"}), r"simulate: config must be a kb.SimConfig or None, got dict"),
])
def test_simulate_refuses_a_wrong_argument_by_name(args: tuple[object, ...], said: str) -> None:
    policy = args[0] if args[0] is not None else kb.make_policy("conservative")
    with pytest.raises(TypeError, match=said):
        kb.simulate(_workload(), policy, *args[1:])  # type: ignore[arg-type]


def test_simulate_refuses_a_scenario_for_a_workload() -> None:
    scn = kb.default_scenario()
    with pytest.raises(TypeError, match=r"simulate: workload must be a kb.Workload \(a "
                                        r"Scenario's: scn.workload\(\)\), got Scenario"):
        kb.simulate(scn, kb.make_policy("conservative"))  # type: ignore[arg-type]


def test_simulate_without_a_config_says_the_defaults_it_took() -> None:
    run = kb.simulate(_workload(), kb.make_policy("conservative"))
    # assumed, not 'given as H100-80GB': the caller named neither
    assert " ".join(ln.strip() for ln in repr(run).splitlines()[1:3]).startswith(
        "simulated: Llama-3.1-8B (assumed: the default scenario's) on H100-SXM (assumed: the "
        "default scenario's H100-80GB), engine vllm")
