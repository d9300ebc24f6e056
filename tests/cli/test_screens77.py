"""The first screens walked again as an inference-platform engineer new to kvbudget (round 77):
``validate --records`` of a real ``vllm bench serve`` file, ``report``, and ``simulate``'s
opening line. Each test names what the screen said before and why it misled."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from kvbudget.cli.main import app

RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "recordings"
RATE8 = RECORDINGS / "vllm-bench-0.32.0" / "rate8.json"
SWEEP = RECORDINGS / "guidellm-0.8.1" / "sweep.json"


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def flat(text: str) -> str:
    return " ".join(text.split())


def test_validate_says_its_errors_sign_and_prints_mape_unsigned(tmp_path: Path) -> None:
    """``validate --records rate8.json`` printed ``rel. error`` +105.7% with no word of which
    way it points (simulated over measured, or measured over simulated?), and the per-request
    MAPE, a mean of absolute errors, as ``+57.9%``, as if it were signed (a direction the
    simulation errs in). The sign is now said under the table and the MAPE has none."""
    code, stdout, stderr = run(
        "validate", "--records", RATE8, "--model", "Llama-3.1-8B", "--out", tmp_path / "val"
    )
    assert code == 0, stderr
    assert (
        "rel. error: (simulated - measured) / measured, + where the simulation is higher" in stdout
    ), stdout
    lines = stdout.splitlines()
    head = lines.index(next(ln for ln in lines if ln.startswith("per-request")))
    rows = lines[head + 2 : head + 5]
    assert [r.split()[0] for r in rows] == ["ttft_s", "tpot_s", "e2e_s"], rows
    said = json.loads((tmp_path / "val" / "validation.json").read_text())
    for row, pr in zip(rows, said["per_request"], strict=True):
        cell = row.split()[-1]
        assert re.fullmatch(r"\d+\.\d%", cell), row  # no sign
        assert cell == f"{100 * pr['mape']:.1f}%"
    # the signed table keeps its sign, as said: simulated TPOT above the measured one is +
    table = {r["metric"]: r for r in said["metrics"] if r["stage"] == "all"}
    tpot = next(ln for ln in lines if ln.startswith("tpot_mean_s"))
    assert table["tpot_mean_s"]["simulated"] > table["tpot_mean_s"]["measured"]
    assert tpot.split()[-1].startswith("+"), tpot
