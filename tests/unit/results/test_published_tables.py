"""vLLM's performance-benchmarks table (``benchmark_results.json``: one row a test, written by
``.buildkite/nightly-benchmarks/scripts/convert-results-json-to-markdown.py`` beside the
tests' own ``serving_*.json`` results), as people publish it: github.com/surajssd/llm-k8s at
58b61c59 (an excerpt is in ``tests/fixtures/recordings/published/``). It was refused as
"cannot tell the recording format (a JSON list that is not inference-perf's ...)", naming
neither the tool nor the file to pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.results.recordings import read_recording
from kvbudget.workloads.errors import TraceError

PUBLISHED = Path(__file__).resolve().parents[2] / "fixtures" / "recordings" / "published"
EXCERPT = PUBLISHED / "llm-k8s-benchmark-results-excerpt.json"
SAID = r"is vLLM's performance-benchmarks table \(benchmark_results.json"


def test_the_published_table_is_named() -> None:
    with pytest.raises(TraceError, match=SAID + r".*pass one test's result beside it "
                       r"\(serving_\*.json\) saved with --save-detailed"):
        read_recording(EXCERPT)


def test_the_table_by_column_is_named_too(tmp_path: Path) -> None:
    """The same tables as pandas writes them by column (``{"serving": {"Test name": {"0":
    ...}}}``), as the nightly's own benchmark_results.json holds them."""
    rows = json.loads(EXCERPT.read_text())
    columns = {key: {str(i): row[key] for i, row in enumerate(rows)} for key in rows[0]}
    path = tmp_path / "benchmark_results.json"
    path.write_text(json.dumps({"latency": {}, "throughput": {}, "serving": columns}))
    with pytest.raises(TraceError, match=SAID):
        read_recording(path)
