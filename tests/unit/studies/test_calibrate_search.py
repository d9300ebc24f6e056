"""A fit whose search ran out of ``--max-evals`` before it converged says so
(``RecordedCalibration.search_stopped``, ``kvbudget calibrate --records``).

``calibrate --max-evals 10`` on a real recording printed "26 simulations; loss 2.927 at the
start, 0.2772 fitted" and wrote its values as fitted, exit 0, with nothing to tell that scipy's
Nelder-Mead had stopped at its budget ("Maximum number of function evaluations has been
exceeded") and that the same recording with a larger budget fits elsewhere; the file had no
word of it either. Now a warning says the search stopped before it converged, and the file
keeps ``calibration.search_converged``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.calibrate import calibrate_recording, fit_parameters
from tests.unit.studies.test_calibrate_records import ENGINE, ENGINE_FLAGS, TRUTH, recorded_run

ONE = ("intercept_s",)  # one parameter from the truth: the search converges in a few dozen


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return recorded_run(tmp_path_factory.mktemp("rec") / "records.csv", n=20)


def test_a_search_cut_by_its_budget_says_so_and_a_converged_one_does_not(records: Path) -> None:
    rec = read_recording(records)
    config = SimConfig(engine=ENGINE)
    cut = calibrate_recording(rec, config, TRUTH, fit_overhead=False, max_evals=4,
                              uncertainty=False, parameters=ONE)
    assert cut.search_stopped == 4
    assert any("the search stopped at --max-evals 4 simulations before it converged" in w
               for w in cut.warnings())
    done = calibrate_recording(rec, config, TRUTH, fit_overhead=False, max_evals=400,
                               uncertainty=False, parameters=ONE)
    assert done.search_stopped is None and done.num_evals < 400
    assert not any("before it converged" in w for w in done.warnings())
    unsearched = calibrate_recording(rec, config, TRUTH, fit_overhead=False, max_evals=1,
                                     uncertainty=False, parameters=ONE)
    assert unsearched.search_stopped == 1
    assert any("were not searched" in w for w in unsearched.warnings())


def test_calibrate_prints_it_and_the_file_keeps_it(records: Path, tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    res = CliRunner().invoke(app, ["calibrate", "--records", str(records), "--fit", "linear",
                                   "--no-fit-overhead", "--max-evals", "4", "--allow-small-fit",
                                   "--out", str(out), *ENGINE_FLAGS])
    assert res.exit_code == 0, res.output
    assert ("warning: the search stopped at --max-evals 4 simulations before it converged"
            in res.stderr)
    section = json.loads(out.read_text())["calibration"]
    assert section["search_converged"] is False
    assert any("before it converged" in w for w in section["warnings"])


def test_max_evals_bounds_the_start_and_the_search_and_its_help_says_what_runs_besides(
        records: Path) -> None:
    """``--max-evals`` said "simulations the fit may run"; ``--max-evals 3`` ran 17 (the
    sensitivities around the start and the fit, the front-end term's settling). Its help now
    says what it bounds and what runs besides, which the count keeps to."""
    cal = calibrate_recording(read_recording(records), SimConfig(engine=ENGINE), TRUTH,
                              max_evals=3)
    steps = [k for k in cal.fitted if k != "frontend_overhead_s"]
    assert steps and "frontend_overhead_s" in cal.fitted
    # the start and the search: 3; two per parameter before, two per fitted one after, four
    assert 3 < cal.num_evals <= 3 + 2 * len(fit_parameters(TRUTH)) + 2 * len(steps) + 4
    said = " ".join(CliRunner().invoke(app, ["calibrate", "--help"]).output.split())
    assert ("With --records: the most simulations the fit's start and "
            "search may run; the fit runs more besides: two per parameter that moves the step "
            "time (which the recording identifies), two per fitted one (its 95 % intervals) "
            "and up to four to settle the front-end time (--fit-overhead).") in said
    assert "simulations the fit may run" not in said
