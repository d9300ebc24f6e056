"""A notebook's ``kb.from_columns`` with columns of different lengths: refused by the column's
name, not an IndexError from numpy's sort."""

from __future__ import annotations

import pytest

import kvbudget as kb


@pytest.mark.parametrize(("extra", "said"), [
    ({"prompt_tokens": [100]}, r"prompt_tokens: 1 values for 2 arrivals \(arrival_s\)"),
    ({"tiers": ["batch", "batch", "batch"]}, r"tiers: 3 values for 2 arrivals"),
    ({"max_output_tokens": [5]}, r"max_output_tokens: 1 values for 2 arrivals"),
])
def test_columns_of_other_lengths_are_refused_by_name(extra: dict[str, list[object]],
                                                      said: str) -> None:
    columns: dict[str, object] = {"arrival_s": [0.0, 1.0], "prompt_tokens": [100, 200],
                                  "output_tokens": [10, 20], **extra}
    with pytest.raises(ValueError, match=said):
        kb.from_columns(**columns)  # type: ignore[arg-type]


def test_equal_columns_still_build_the_sorted_workload() -> None:
    w = kb.from_columns(arrival_s=[1.0, 0.0], prompt_tokens=[200, 100], output_tokens=[20, 10],
                        tiers=["batch", "interactive"])
    assert w.prompt_tokens.tolist() == [100, 200]
    assert [w.tier_names[t] for t in w.tier] == ["interactive", "batch"]

