"""What a calibrated cost file says of its own fit, said wherever the file is used.

``calibrate --records`` writes, beside the fitted values, what they were fitted on and how well
they reproduce it (the file's ``calibration`` block: the recording, the requests fitted, the
in-sample error of every figure) and, with ``--holdout F``, what its held-out check found
(``calibration.held_out``: the last ``F`` of the recording, simulated with the fitted values and
compared). A command that takes the file (``simulate``, ``compare``, ``capacity``, ``plan``,
``validate``...) says it in one line, so that an answer built on the file carries what the fit
was worth: its in-sample errors alone are how well the search matched the requests it saw, and
the held-out ones how well it predicts requests it did not.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

SAID_METRICS = (("ttft_p50_s", "p50 TTFT"), ("tpot_p50_s", "p50 TPOT"),
                ("e2e_p50_s", "p50 E2E"), ("output_tokens_per_s", "output tok/s"))
"""The figures the line gives, of the fit's tables' (the p50s and the throughput:
``analysis.validation.KEY_METRICS`` and the E2E beside them)."""


def _errors(block: Any) -> str | None:
    """``p50 TTFT +0.9%, ...`` from ``{metric: signed relative error}`` (``not measured``
    where the error is null: no compared request measured it, e.g. every one read whole);
    None when the block holds none of them."""
    if not isinstance(block, dict) or not any(key in block for key, _ in SAID_METRICS):
        return None
    said = [f"{label} {100 * v:+.1f}%"
            if isinstance(v := block.get(key), int | float) and not isinstance(v, bool)
            and math.isfinite(v) else f"{label} not measured"  # as the table's '-'
            for key, label in SAID_METRICS if key in block]
    return ", ".join(said)


_COUNTED = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2e_s", "E2E"))
"""The figures whose errors are over the requests that measured them (``in_sample_counts``,
``held_out.counts``: one read whole has no TTFT nor TPOT); the throughput is over them all."""


def _over(counts: Any, num: Any) -> str:
    """`` (TTFT and TPOT over 5 of them, E2E over 20)``: how many requests each figure's error
    is over, where any is over fewer than the ``num`` requests said before it; ``""`` where
    every one is over them all or the file does not keep the counts (one written before)."""
    if not isinstance(counts, dict) or not isinstance(num, int):
        return ""
    # (a figure over none is said 'not measured' already)
    each = {word: n for key, word in _COUNTED if isinstance(n := counts.get(key), int) and n}
    if not each or all(n == num for n in each.values()):
        return ""
    by_count: dict[int, list[str]] = {}
    for word, n in each.items():
        by_count.setdefault(n, []).append(word)
    said = ", ".join((words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and "
                      + words[-1]) + f" over {n:,}" for n, words in by_count.items())
    return f" ({said} of them; output tok/s over all {num:,})"


def _count(n: Any, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}" if isinstance(n, int) else f"its {what}s"


def fit_said(path: Path, payload: dict[str, Any]) -> tuple[str, ...]:
    """One line: what ``path``'s calibration was fitted on, its in-sample errors and what its
    held-out check found (or that it had none); none for a file without a ``calibration``
    block of ``calibrate --records`` (``calibrate --url``, ``profile --fit-out``, a file written
    by hand)."""
    cal = payload.get("calibration")
    if not isinstance(cal, dict) or not isinstance(cal.get("records"), str):
        return ()
    tool = cal.get("tool") or cal.get("records_format") or "a recording"
    counts: dict[str, Any] = cal["counts"] if isinstance(cal.get("counts"), dict) else {}
    measured = counts.get("num_measured")
    of = f" of its {measured:,} measured" if isinstance(measured, int) else ""
    head = (f"{path}: fitted by calibrate --records on {Path(cal['records']).name} ({tool}), "
            f"{_count(cal.get('rows'), 'request')}{of}")
    inside = _errors(cal.get("in_sample_error"))
    parts = [head + (f"; in sample: {inside}{_over(cal.get('in_sample_counts'), cal.get('rows'))}"
                     if inside else "")]
    held, fraction = cal.get("held_out"), cal.get("holdout")
    errors = _errors(held.get("error")) if isinstance(held, dict) else None
    if isinstance(held, dict) and errors:
        parts.append(f"held out (the last {held.get('fraction', fraction):g}, "
                     f"{_count(held.get('num_requests'), 'request')}): {errors}"
                     + _over(held.get("counts"), held.get("num_requests")))
    elif isinstance(fraction, int | float) and not isinstance(fraction, bool):
        parts.append(f"held out the last {fraction:g}, but the file does not keep what that "
                     "check found (calibrate printed it; a file written before the check was "
                     "kept)")
    else:
        parts.append("no held-out check (fitted without --holdout): the in-sample errors are "
                     "of the requests the fit saw; validate --records on another recording, "
                     "or calibrate --holdout, says how it predicts others")
    return ("; ".join(parts),)
