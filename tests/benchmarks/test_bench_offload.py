"""benchmarks/bench_offload.py: its CPU-hit case loads from CPU (worked by hand), its table
prints, and docs/offload.md's published-check table is what it computes."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.doc_figures import (
    agrees,
    rewrite,
    row_line,
    section,
    stale,
    table_rows,
    value_of,
)

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_offload.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_offload", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_cpu_hit_case_loads_the_evicted_prompt(bench: ModuleType, tmp_path: Path) -> None:
    miss, cpu, gpu, off = bench.predict(1024, bench.coder_model(tmp_path))
    # 64 blocks of 16 tokens; the GPU holds 65: the second prompt evicts all but the first
    # prompt's head block (evicted last). The lookup stops at (1024 - 1) // 16 = 63 blocks:
    # the head hits on the GPU, 62 blocks (992 tokens) load, the last block is computed
    assert off["cpu_hit_tokens"] == 992 and off["num_loads"] == 1
    # Qwen3-30B-A3B: 48 layers x 4 KV heads x 128 x 2 x 2 bytes per token
    assert off["load_bytes_per_gpu"] == 992 * 98_304
    assert gpu < cpu < miss


def test_the_table_prints_predicted_and_published(bench: ModuleType,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--lengths", "1024"]) == 0
    out = capsys.readouterr().out
    assert "gahow/agentic-kvc" in out and "miss/CPU" in out and "CPU-GPU" in out


def test_the_docs_published_check_is_what_the_benchmark_gives(bench: ModuleType,
                                                               tmp_path: Path) -> None:
    """docs/offload.md, "Checked against a published measurement": every predicted figure and
    error at the precision shown (the published column is the source's), and the prose's
    miss/CPU gains, the 64 k load's size and error and the 1 k load's cost."""
    doc = section(REPO / "docs" / "offload.md", "## Checked against a published measurement")
    table = table_rows(doc, "| tokens | case |")
    model = bench.coder_model(tmp_path)
    cases = {"miss": 0, "CPU hit": 1, "GPU hit": 2}
    problems, gains, loaded = [], {}, 0.0
    load_err, load_ms = {}, {}  # the load's own cost (CPU - GPU): its error, its milliseconds
    for length in sorted(bench.PUBLISHED):
        miss, cpu, gpu, off = bench.predict(length, model)
        pub = bench.PUBLISHED[length]
        gains[length] = (miss / cpu, pub[0] / pub[1])
        load_err[length] = 100 * abs((cpu - gpu) / (pub[1] - pub[2]) - 1)
        load_ms[length] = 1e3 * (cpu - gpu)
        loaded = off["load_bytes_per_gpu"] / 1e9
        for cells in (r for r in table if value_of(r[0]) == length):
            case = cells[1].split(" (")[0]
            i = cases.get(case)
            predicted = (miss, cpu, gpu)[i] if i is not None else cpu - gpu
            published = pub[i] if i is not None else pub[1] - pub[2]
            assert agrees(cells[3], published), (cells, published)
            values = [predicted, 100 * (predicted / published - 1)]
            if stale(cells[2], values[:1]) or stale(cells[4], values[1:]):
                problems.append(f"was {row_line(cells)}\nnow " + row_line(
                    [*cells[:2], rewrite(cells[2], values[:1]), cells[3],
                     rewrite(cells[4], values[1:])]))
    assert len(table) == 8 and not problems, "docs/offload.md: stale rows\n" + "\n".join(problems)
    text = " ".join(doc.split())
    m = re.search(r"\(published ([\d.]+)x and ([\d.]+)x\) inherits (?:it|them) \(predicted ([\d.]+)x and "
                  r"([\d.]+)x\)", text)
    assert m, "the miss/CPU sentence"
    figures = (gains[1024][1], gains[65536][1], gains[1024][0], gains[65536][0])
    assert all(agrees(n, v) for n, v in zip(m.groups(), figures, strict=True)), (
        "should read: (published {:.1f}x and {:.0f}x) ... (predicted {:.1f}x and {:.0f}x)"
        .format(*figures))
    assert (f"within {load_err[65536]:.0f} % at 64 k tokens ({loaded:.1f} GB at 44.8 GB/s"
            in text), (load_err[65536], loaded)
    assert f"At 1 k tokens it costs {load_ms[1024]:.0f} ms" in text, load_ms[1024]


def test_the_docs_miss_breakdown_is_what_the_benchmark_gives(bench: ModuleType,
                                                             tmp_path: Path) -> None:
    """docs/offload.md's 64 k miss, term by term: the step model's terms summed over the
    chunks, with the H20's measured attention rate and with the default 0.50, and the FLOPs
    the published time implies."""
    doc = " ".join(section(REPO / "docs" / "offload.md",
                           "## Checked against a published measurement").split())
    model = bench.coder_model(tmp_path)
    b = bench.miss_breakdown(65536, model)
    h20 = bench.get_gpu("H20")
    old = bench.miss_breakdown(65536, model, dataclasses.replace(h20, attention_efficiency=None))
    tf = 1e12
    # the parts add up to the steps, and the counted pairs are the causal ones plus each
    # chunk's triangle above the diagonal: 8 chunks x 8,192 x 8,191 / 2 pairs
    assert b["attention_s"] + b["gemm_s"] + b["overhead_s"] == pytest.approx(b["step_s"])
    pair = 48 * 32 * 128 * 4
    assert b["attention_flops"] - b["causal_attention_flops"] == pytest.approx(
        pair * 8 * 8192 * 8191 / 2)
    assert b["causal_attention_flops"] == pytest.approx(pair * 65536 * 65537 / 2)
    expected = (
        f"of {b['step_s']:.2f} s of engine steps, prefill attention takes "
        f"{b['attention_s']:.2f} s ({b['attention_flops'] / tf:,.0f} TFLOP at "
        f"{b['attention_tflops']:.1f} TFLOPS",
        f"the GEMMs {b['gemm_s']:.2f} s ({b['gemm_flops'] / tf:,.0f} TFLOP; "
        f"{b['dense_gemm_s']:.2f} s at the dense GEMM rate",
        f"the overheads {b['overhead_s']:.3f} s",
        f"{old['attention_tflops']:.0f} TFLOPS: {old['attention_s']:.1f} s of "
        f"{old['step_s']:.1f} s of engine steps",
        f"{b['attention_flops'] / tf:,.0f} against {b['causal_attention_flops'] / tf:,.0f} TFLOP",
        f"with the causal pairs the steps would take {b['causal_step_s']:.2f} s",
        f"The published 15.2 s is {(b['gemm_flops'] + b['causal_attention_flops']) / tf:,.0f} "
        f"TFLOP (matmuls and causal attention) at {b['published_tflops']:.0f} TFLOPS, "
        f"{b['published_tflops'] / b['peak_tflops']:.2f} of the H20's {b['peak_tflops']:.0f}",
    )
    missing = [e for e in expected if e not in doc]
    assert not missing, f"docs/offload.md should read: {missing}"


def test_the_docs_gain_factors_are_what_the_benchmark_gives(bench: ModuleType,
                                                            tmp_path: Path) -> None:
    """docs/offload.md, "The TTFT gains": each row is ``gain_factors``; the gain's factor is the
    miss's over the CPU hit's (worked: 1.26 / 0.95 = 1.33 at 64 k tokens)."""
    doc = section(REPO / "docs" / "offload.md", "### The TTFT gains")
    rows = table_rows(doc, "| tokens | miss")
    model = bench.coder_model(tmp_path)
    assert [value_of(r[0]) for r in rows] == sorted(bench.PUBLISHED)
    for cells in rows:
        f = bench.gain_factors(int(value_of(cells[0])), model)
        assert f["gain"] == pytest.approx(f["miss"] / f["cpu"], rel=1e-12)
        for cell, v in zip(cells[1:4], (f["miss"], f["cpu"], f["gain"]), strict=True):
            assert agrees(cell, v), (cells, v)
        share = re.fullmatch(r"(\d+) % \((\d+) %\)", cells[4])
        assert share, cells[4]
        assert agrees(share.group(1), 100 * f["load_share"])
        assert agrees(share.group(2), 100 * f["load_share_published"])
        assert agrees(cells[5].rstrip("x"), f["gain_causal"]), (cells, f["gain_causal"])
    # the 64 k published load share by hand: (0.272 - 0.111) / 0.272
    assert bench.gain_factors(65536, model)["load_share_published"] == pytest.approx(
        0.161 / 0.272)


def test_the_docs_split_the_1k_cpu_hits_shortfall(bench: ModuleType, tmp_path: Path) -> None:
    """The 1 k CPU hit's shortfall is the GPU hit's (step and front end) plus the load's own."""
    _, cpu, gpu, _ = bench.predict(1024, bench.coder_model(tmp_path))
    pub = bench.PUBLISHED[1024]
    short_cpu, short_gpu = pub[1] - cpu, pub[2] - gpu
    text = " ".join(section(REPO / "docs" / "offload.md", "### The TTFT gains").split())
    m = re.search(r"Of the 1 k CPU hit's (\d+) ms under the published figure, (\d+) ms are what "
                  r"the GPU hit lacks too .* and (\d+) ms the load's own", text)
    assert m, "the 1 k shortfall sentence"
    for written, v in zip(m.groups(), (short_cpu, short_gpu, short_cpu - short_gpu), strict=True):
        assert agrees(written, v * 1e3), f"should read {v * 1e3:.0f}"
