"""The first screens walked again as an inference-platform engineer new to kvbudget (round 77):
``validate --records`` of a real ``vllm bench serve`` file, ``report``, and ``simulate``'s
opening line. Each test names what the screen said before and why it misled."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
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


def test_the_simulated_line_says_what_the_kv_capacity_was_sized_at(tmp_path: Path) -> None:
    """``simulate --gpu-memory-utilization 0.8`` said "KV capacity 360,464 tokens" beside the
    engine's knobs, as the default run said 438,192, with neither the fraction of memory (vLLM
    0.32.0's default 0.92, vllm/config/cache.py:102; kvbudget-0.1's 0.9) nor the block size
    behind it, and summary.json kept no utilization: a vLLM user comparing the figure with
    their server's "GPU KV cache size" could not tell what it assumed. Both are said now, the
    utilization kept in the summary's ``engine_knobs``; not where num_gpu_blocks was given
    (then the memory sizes nothing)."""
    base = ("simulate", "--set", "workload.num_requests=20")
    code, stdout, _ = run(*base, "--gpu-memory-utilization", "0.8", "--out", tmp_path / "r")
    assert code == 0
    first = flat(stdout.split("\npolicy ")[0])
    assert "16-bit KV, block_size 16, gpu_memory_utilization 0.8), KV capacity 360,464 " in first
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["engine_knobs"]["gpu_memory_utilization"] == 0.8
    assert summary["kv_capacity_tokens"] == 360_464
    code, stdout, _ = run(*base, "--engine-defaults", "kvbudget-0.1")
    assert code == 0
    assert "block_size 16, gpu_memory_utilization 0.9), KV capacity 449,856 " in flat(stdout)
    code, stdout, _ = run(*base, "--num-gpu-blocks", "1000", "--block-size", "32")
    assert code == 0
    first = flat(stdout.split("\npolicy ")[0])
    assert "16-bit KV, block_size 32), KV capacity 32,000 tokens (engine.num_gpu_blocks" in first
    assert "gpu_memory_utilization" not in first


def test_a_memory_fraction_given_beside_num_gpu_blocks_is_said_unused(tmp_path: Path) -> None:
    """``--num-gpu-blocks 1000 --gpu-memory-utilization 0.8`` sized the KV cache by the blocks
    (vLLM's ``num_gpu_blocks_override`` too) and dropped the fraction without a word: the
    opening line now says it was given and unused, and the summary keeps it beside the blocks;
    a default fraction (none given) is not said."""
    base = ("simulate", "--set", "workload.num_requests=20", "--num-gpu-blocks", "1000")
    code, stdout, _ = run(*base, "--gpu-memory-utilization", "0.8", "--out", tmp_path / "r")
    assert code == 0
    first = flat(stdout.split("\npolicy ")[0])
    assert ("KV capacity 16,000 tokens (engine.num_gpu_blocks 1,000 given, not sized from the "
            "GPU's memory; engine.gpu_memory_utilization 0.8, also given, unused)") in first, first
    knobs = json.loads((tmp_path / "r" / "summary.json").read_text())["engine_knobs"]
    assert knobs["num_gpu_blocks"] == 1000 and knobs["gpu_memory_utilization"] == 0.8
    code, stdout, _ = run(*base, "--set", "engine.gpu_memory_utilization=0.7")
    assert code == 0 and "gpu_memory_utilization 0.7, also given, unused" in flat(stdout)
    code, stdout, _ = run(*base)
    assert code == 0 and "unused" not in flat(stdout.split("\npolicy ")[0])


POOLS = ("--set", "disaggregation.prefill.num_replicas=1", "--set",
         "disaggregation.decode.num_replicas=2")


@pytest.mark.parametrize(("sets", "said"), [
    # [engine]'s blocks, each pool's: 2 decode replicas x 5,000 blocks x 16 tokens
    (["engine.num_gpu_blocks=5000", "engine.gpu_memory_utilization=0.8"],
     "KV capacity 160,000 tokens (the decode pool's; each pool's num_gpu_blocks 5,000 given, not "
     "sized from the GPU's memory; gpu_memory_utilization 0.8, also given, unused)"),
    # one pool's own: the other sized from its GPU's memory, as said without a word
    (["disaggregation.decode.engine={num_gpu_blocks=3000}"],
     "KV capacity 96,000 tokens (the decode pool's: num_gpu_blocks 3,000 given, not sized from "
     "the GPU's memory)"),
    (["disaggregation.prefill.engine={num_gpu_blocks=3000}"],
     "tokens (the decode pool's; the prefill pool's num_gpu_blocks 3,000 given, not sized from "
     "the GPU's memory)"),
], ids=["engine", "decode", "prefill"])
def test_a_pools_given_kv_blocks_are_said_as_one_engines_are(
        sets: list[str], said: str, tmp_path: Path) -> None:
    """A disaggregated deployment given ``num_gpu_blocks`` said 'KV capacity 160,000 tokens
    (the decode pool's)', without the '(engine.num_gpu_blocks N given, not sized from the
    GPU's memory)' a colocated engine's line says (nor the fraction given beside it, unused):
    now said per pool, and summary.json's pools' knobs keep the fraction beside the blocks."""
    args = [a for kv in sets for a in ("--set", kv)]
    code, stdout, stderr = run("simulate", "--set", "workload.num_requests=20", *POOLS, *args,
                               "--out", tmp_path / "r")
    assert code == 0, stderr
    first = flat(stdout.split("\npolicy ")[0])
    assert said in first, first
    assert first.count("not sized from") == 1, first
    knobs = json.loads((tmp_path / "r" / "summary.json").read_text())["engine_knobs"]
    given = [name for name in ("prefill", "decode") if "num_gpu_blocks" in knobs[name]]
    assert given == (["prefill", "decode"] if "each pool's" in said
                     else ["prefill"] if "prefill pool's" in said else ["decode"]), knobs
    if "unused" in said:
        assert knobs["decode"]["gpu_memory_utilization"] == 0.8


def test_validate_says_the_memory_fraction_its_kv_blocks_were_sized_at(tmp_path: Path) -> None:
    """``validate --records`` said "simulated on H100-SXM / Llama-3.1-8B: num_gpu_blocks=27387
    block_size=16 ..." of blocks sized from the GPU's memory without the fraction of it."""
    code, stdout, stderr = run(
        "validate", "--records", RATE8, "--model", "Llama-3.1-8B", "--out", tmp_path / "val"
    )
    assert code == 0, stderr
    line = flat(stdout.split("simulated on ")[1].split("\nstage")[0])
    assert line.startswith(
        "H100-SXM / Llama-3.1-8B: num_gpu_blocks=27387 block_size=16 "
        "gpu_memory_utilization=0.92 max_num_seqs=1024"
    ), line


def test_gpu_memory_utilizations_help_names_every_default(tmp_path: Path) -> None:
    """``--gpu-memory-utilization``'s help said "(default: vLLM's 0.92)", though a scenario's
    ``engine.gpu_memory_utilization`` sets it and ``--engine-defaults kvbudget-0.1`` sizes the
    KV cache at 0.9 (``EngineConfig.resolved``). Each default the help names is checked."""
    res = CliRunner().invoke(app, ["simulate", "--help"], env={"COLUMNS": "200"})
    assert (
        "(default: the scenario's, else the --engine-defaults': vLLM's 0.92, kvbudget-0.1's 0.9)"
        in flat(res.stdout)
    ), res.stdout
    base = ("simulate", "--set", "workload.num_requests=20", "--json")
    for extra, fraction in (
        ((), 0.92),
        (("--engine-defaults", "kvbudget-0.1"), 0.9),
        (("--set", "engine.gpu_memory_utilization=0.7"), 0.7),
    ):
        code, stdout, stderr = run(*base, *extra)
        assert code == 0, stderr
        assert json.loads(stdout)["engine_knobs"]["gpu_memory_utilization"] == fraction, extra


def test_validate_says_when_its_percentiles_rest_on_few_requests(tmp_path: Path) -> None:
    """``validate --records`` of GuideLLM's sweep printed a measured TTFT p99 of 0.132 s and a
    -77.4 % error over 8 requests, and each stage's p99 over 2 or 3, as if over a tail: a p99
    over 100 or fewer lies between the two largest values (numpy's interpolation, as the tools'
    own summaries take it), about the maximum. It is said now, with the counts."""
    code, stdout, stderr = run(
        "validate", "--records", SWEEP, "--model", "Llama-3.1-8B", "--out", tmp_path / "g"
    )
    assert code == 0, stderr
    assert (
        "few requests: TTFT, TPOT and E2E over 8 requests, a load stage's over as few as 2: a "
        "p99 over 100 or fewer lies between the two largest values (a p90 over 10 or fewer too), "
        "about the maximum, which one request moves"
    ) in flat(stdout), stdout
    code, stdout, stderr = run(
        "validate", "--records", RATE8, "--model", "Llama-3.1-8B", "--out", tmp_path / "v"
    )
    assert code == 0, stderr  # 15 of 20 read whole at once: TTFT and TPOT over the other 5
    assert "few requests: TTFT and TPOT over 5 requests, E2E over 20 requests: a p99" in flat(
        stdout
    ), stdout


def test_the_few_requests_line_starts_where_a_p99_is_between_the_two_largest() -> None:
    """At 100 requests numpy's p99 is still between the two largest values; at 101 it is the
    largest but one; a hold-out's rows and failed requests are not counted."""
    import numpy as np
    import pandas as pd

    from kvbudget.analysis.validation import few_requests_said

    def records(n: int, failed: int = 0) -> pd.DataFrame:
        v = np.linspace(0.1, 1.0, n + failed)
        return pd.DataFrame(
            {
                "status": ["completed"] * n + ["error"] * failed,
                "ttft_s": v,
                "tpot_s": v / 10,
                "e2e_s": v * 2,
            }
        )

    for n in (100, 101):
        v = np.sort(records(n)["ttft_s"].to_numpy())
        assert (np.percentile(v, 99) > v[-2]) == (n <= 100)
    assert "TTFT, TPOT and E2E over 100 requests" in (few_requests_said(records(100)) or "")
    assert few_requests_said(records(101)) is None
    assert few_requests_said(records(100, failed=30)) is not None
    rows = np.arange(101) < 50
    assert "over 50 requests" in (few_requests_said(records(101), rows=rows) or "")
    stages = ["a"] * 99 + ["b"] * 102
    said = few_requests_said(records(201), stages=stages) or ""
    assert "over 201 requests, a load stage's over as few as 99" in said, said


def test_the_reports_itl_table_has_no_row_for_a_tier_nothing_was_offered_in(
    tmp_path: Path,
) -> None:
    """``kvbudget report`` of ``validate --records``' simulated run (every request of the
    recording 'interactive') listed a 'batch' row of dashes in its inter-token latency table
    alone, as if the run had a batch tier with no tokens; the outcomes and latency tables list
    the interactive tier only. The ITL table now leaves out a tier nothing was offered in."""
    from kvbudget.analysis.report import build_report

    code, _, stderr = run(
        "validate", "--records", RATE8, "--model", "Llama-3.1-8B", "--out", tmp_path / "v"
    )
    assert code == 0, stderr
    summary = json.loads((tmp_path / "v" / "sim" / "summary.json").read_text())
    assert summary["tiers"]["batch"]["offered"] == 0  # the default tiers, one unused
    rep = build_report([tmp_path / "v" / "sim"], tmp_path / "r", num_resamples=50)
    text = rep.html_path.read_text()
    itl = text.split("Inter-token latency")[1].split("</table>")[0]
    assert "<td>interactive</td>" in itl and "<td>all</td>" in itl
    assert "<td>batch</td>" not in itl, itl


def test_compare_says_when_a_rows_p99_rests_on_few_requests(tmp_path: Path) -> None:
    """``compare`` of GuideLLM's sweep converted to a trace (8 requests) printed "TTFT p99
    0.0303" for each policy and tier with the note calling it a p99 over the completed
    requests, as over a tail: over 100 or fewer it is between the two largest values. The note
    says so, with the fewest a row has, and says nothing where every row has more."""
    trace = tmp_path / "sweep.csv"
    code, _, stderr = run("trace", "convert", SWEEP, "--out", trace)
    assert code == 0, stderr
    deployment = ("--model", "Llama-3.1-8B", "--gpu", "H100-80GB")
    code, stdout, stderr = run(
        "compare", "--trace", trace, *deployment, "--policies", "unlimited,conservative"
    )
    assert code == 0, stderr
    assert (
        "a p99 over 100 completed requests or fewer (a row's done; here as few as 8) lies "
        "between the two largest values, about the maximum, which one request moves)"
    ) in flat(stdout), stdout
    for n, said in ((100, True), (101, False)):
        small = tmp_path / f"n{n}.csv"
        small.write_text(
            "arrival_s,prompt_tokens,output_tokens\n"
            + "".join(f"{i / 10},100,20\n" for i in range(n))
        )
        code, stdout, stderr = run("simulate", "--trace", small, *deployment)
        assert code == 0, stderr
        assert ("here as few as 100" in flat(stdout)) is said, stdout


def test_calibrate_says_when_its_in_sample_percentiles_rest_on_few_requests(
    tmp_path: Path,
) -> None:
    """``calibrate --records``' in-sample table is validate's, over the fit's requests: its
    p99s over GuideLLM's 8 (a stage's 2) got no word either."""
    code, stdout, stderr = run(
        "calibrate",
        "--records",
        SWEEP,
        "--model",
        "Llama-3.1-8B",
        "--out",
        tmp_path / "cost.json",
        "--max-evals",
        "1",
    )
    assert code == 0, stderr
    assert "rel. error: (simulated - measured) / measured" in stdout
    assert (
        "few requests: TTFT, TPOT and E2E over 8 requests, a load stage's over as few as 2"
        in flat(stdout)
    ), stdout
