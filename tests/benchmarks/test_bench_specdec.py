"""docs/speculative.md, "Published figures": the figures it quotes from
benchmarks/bench_specdec.py (sections 1 and 2: the step model only, no simulation), recomputed
at the precision shown."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model
from kvbudget.perf.speculative import draft_pass_model, mean_acceptance_length
from kvbudget.perf.step_time import VllmStepModel
from tests.benchmarks.doc_figures import agrees, section

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks" / "bench_specdec.py"
BATCHES = (1, 8, 32, 64, 128, 256, 512, 1024)


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    sys.path.insert(0, str(BENCH.parent))  # its `bytecode` helper
    spec = importlib.util.spec_from_file_location("bench_specdec", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def stops_paying(bench: ModuleType, target: VllmStepModel, head: VllmStepModel,
                 context: int) -> str:
    """The first batch where the speed-up falls below 1, as the docs say it."""
    bench.CONTEXT = context
    try:
        length = mean_acceptance_length(0.7, 3)
        ups = [bench.speed_up(target, head, n, 3, length) for n in BATCHES]
    finally:
        bench.CONTEXT = 1000
    stop = next((n for n, u in zip(BATCHES, ups, strict=True) if u < 1.0), None)
    return f"at batch {stop:,}" if stop is not None else "beyond 1,024"


def test_the_published_figures_paragraphs(bench: ModuleType) -> None:
    text = " ".join(section(REPO / "docs" / "speculative.md", "## Published figures").split())
    gpu, model = get_gpu("H100-80GB"), get_model("Llama-3.1-8B")
    target = VllmStepModel(gpu, model)
    head = draft_pass_model("eagle3", model, None, gpu, 1)
    assert head is not None
    published = bench.SGLANG_PUBLISHED["EAGLE-3"] / bench.SGLANG_BASE_TOK_S
    need = bench.needed_length(target, head, 3, published)
    m = re.search(r"validation: ([\d.]+) for EAGLE-3's ([\d.]+)x with `k = 3`", text)
    assert m and agrees(m.group(2), published), "the EAGLE-3 solve sentence"
    assert agrees(m.group(1), need), f"should read: {need:.2f} for EAGLE-3's {published:.2f}x"
    should = (f"at 100 tokens of context a request it stops paying "
              f"{stops_paying(bench, target, head, 100)}, at 1,000 tokens "
              f"{stops_paying(bench, target, head, 1000)}")
    assert should in text, should
    length = mean_acceptance_length(0.7, 3)
    kept = bench.speed_up(target, head, 64, 3, length) / bench.speed_up(target, head, 1, 3, length)
    g = re.search(r"where the model keeps ([\d.]+) of its batch-1 gain at 1,000 tokens", text)
    assert g and agrees(g.group(1), kept), f"should read: keeps {kept:.2f} of its batch-1 gain"
    r = re.search(r"reports ([\d.]+)x at batch 64 against SGLang's ([\d.]+)x at batch 1 \(a ratio "
                  r"of ([\d.]+)\)", text)
    assert r, "the EAGLE-3 paper sentence"
    ratio = bench.SGLANG_BATCH64 / published
    assert agrees(r.group(1), bench.SGLANG_BATCH64) and agrees(r.group(2), published)
    assert agrees(r.group(3), ratio), f"should read: (a ratio of {ratio:.2f})"
