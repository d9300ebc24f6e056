"""``kvbudget tune`` said a best over settings it could not tell from it (the objective's
intervals overlapping, the paired test over the common random numbers holding 0), as if the
search had separated them: it now names them and what would separate them, on the screen, in
best.toml's header and in tune.json."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats
from typer.testing import CliRunner

from kvbudget.cli.main import app
from tests.conftest import REPO

runner = CliRunner()
# a small run whose best (max_num_seqs 16) beats 2 and 7 clearly but not 11 at 3 replications
SMALL = [
    "--param",
    "engine.max_num_seqs=2:16:int",
    "--set",
    "workload.num_requests=40",
    "--grid-points",
    "4",
    "--refine-evals",
    "0",
    "--validate",
    "0",
    "--objective",
    "overall_sustained_output_tokens_per_s",
    "-j",
    "1",
]


def run(*args: Any) -> Any:
    return runner.invoke(app, [str(a) for a in args])


def flat(text: str) -> str:
    return " ".join(text.split())


def note(output: str) -> str:
    """The screen's ``note: the best cannot be told from ...`` paragraph, unwrapped."""
    m = re.search(r"^note: the best cannot be told from .*?(?=^\S)", output, re.M | re.S)
    assert m is not None, output
    return flat(m.group(0))


def paired_holds_zero(best: np.ndarray[Any, Any], other: np.ndarray[Any, Any]) -> bool:
    """The paired t interval (95 %) of best - other holds 0, computed here from the runs."""
    d = best - other
    half = stats.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / math.sqrt(d.size)
    return bool(d.mean() - half <= 0 <= d.mean() + half)


def test_tune_names_the_settings_the_best_cannot_be_told_from(tmp_path: Path) -> None:
    out = tmp_path / "t"
    r = run("tune", "--out", out, *SMALL, "-r", 3)
    assert r.exit_code == 0, r.output
    said = note(r.output)
    tuned = json.loads((out / "tune.json").read_text())
    best = tuned["best"]["params"]["engine.max_num_seqs"]
    # the settings named are exactly those whose paired interval against the best holds 0,
    # recomputed from the evidence file's runs
    runs = pd.read_parquet(out / "evidence.parquet")
    objective = "overall_sustained_output_tokens_per_s"
    by = {
        int(k): g.sort_values("replication")[objective].to_numpy()
        for k, g in runs.groupby("engine.max_num_seqs")
    }
    expected = sorted(k for k in by if k != best and paired_holds_zero(by[best], by[k]))
    listed = sorted(u["params"]["engine.max_num_seqs"] for u in tuned["best_undecided"])
    assert expected and listed == expected
    assert len(expected) < len(by) - 1  # the others it did tell apart are not named
    for k in expected:
        assert f"engine.max_num_seqs = {k}" in said
    assert "the paired 95% interval of the difference over the 3 replications" in said
    m = re.search(r"more replications would separate them \(-r (\d+) if", said)
    assert m is not None and int(m.group(1)) > 3
    assert max(u["replications_to_separate"] for u in tuned["best_undecided"]) == int(m.group(1))
    for u in tuned["best_undecided"]:
        assert u["low"] <= 0 <= u["high"]
    header = flat(
        " ".join(
            line.lstrip("# ")
            for line in (out / "best.toml").read_text().splitlines()
            if line.startswith("#")
        )
    )
    assert said.removeprefix("note: ") in header
    # docs/tuning.md quotes this screen's note: its wording is the screen's
    doc = flat((REPO / "docs" / "tuning.md").read_text())
    quoted = re.search(r"`(note: the best cannot be told from [^`]*)`", doc)
    assert quoted is not None and quoted.group(1) == said


def test_tune_with_one_replication_says_no_interval_separates(tmp_path: Path) -> None:
    r = run("tune", "--out", tmp_path / "t", *SMALL, "-r", 1)
    assert r.exit_code == 0, r.output
    said = note(r.output)
    assert "one replication gives no interval; -r 2 or more would separate them" in said
    assert "3 other feasible settings" in said
