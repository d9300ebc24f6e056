"""One helper says every count with its noun: "refused 1 requests" and "1 prompts" were
written case by case (``simulator/limits_said.py``, a workload's repr, a trace's report)."""

from __future__ import annotations

import re

import pytest

from kvbudget.workloads import from_columns
from kvbudget.workloads.counted import counted


@pytest.mark.parametrize(("num", "noun", "plural", "said"), [
    (0, "request", None, "0 requests"),
    (1, "request", None, "1 request"),
    (2, "prompt", None, "2 prompts"),
    (1617, "request", None, "1,617 requests"),
    (1.0, "replica", None, "1 replica"),
    (3, "query", "queries", "3 queries"),
    (1, "query", "queries", "1 query"),
])
def test_counted(num: float, noun: str, plural: str | None, said: str) -> None:
    assert counted(num, noun, plural) == said


def test_a_count_is_whole() -> None:
    with pytest.raises(ValueError, match=r"1\.5 request"):
        counted(1.5, "request")


def test_a_one_request_workload_says_one_request() -> None:
    w = from_columns(arrival_s=[0.0], prompt_tokens=[10], output_tokens=[5])
    assert repr(w).startswith("Workload ") and ": 1 request" in repr(w).split("\n")[0]
    assert not re.search(r"(?<![\d.])1 requests\b", repr(w))
