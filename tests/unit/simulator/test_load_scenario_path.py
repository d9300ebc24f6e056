"""``kb.load_scenario`` with a path typed as a string in a notebook (``make_scenario`` takes
one): read as the path, not an AttributeError from ``str.open``."""

from __future__ import annotations

from pathlib import Path

import kvbudget as kb

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_a_scenarios_path_may_be_a_string() -> None:
    path = SCENARIOS / "synth_conservative.toml"
    assert kb.load_scenario(str(path)).spec == kb.load_scenario(path).spec
