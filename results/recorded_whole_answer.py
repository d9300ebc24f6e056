"""Requests a recording shows receiving their whole answer in one read, for every reader.

A load tool times each streamed chunk when its client reads it. A client (or API server) busy
elsewhere, or a proxy buffering the stream, hands over a whole answer in one read, and a request
that was not streamed gets it whole by design: every token then carries one time, so the
request's TTFT is about its E2E and its TPOT near 0. Those times tell when the client read the
tokens, not when the server made them. :func:`whole_answer_rows` finds such requests from what
every reader gives :func:`~kvbudget.results.recording.build_recording`: the mean inter-token
time where the file has one (a list of inter-token times, the tool's own mean, first and last
token times), else the TPOT of the request's TTFT, E2E and output tokens, which counts the time
after the last token too, so finds no more of them than the inter-token times would.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

BURST_ITL_S = 1e-4
"""A completed request whose tokens after the first came faster than this apiece (10,000
tokens a second) reached the client in one read: the fastest decode published for one stream is
about 3,000 tokens a second (Cerebras, gpt-oss-120B, 2026; 1,800 for Llama 3.1 8B at its
launch, cerebras.ai "Introducing Cerebras Inference", August 2024)."""


def whole_answer_rows(usable: BoolArray, output: npt.NDArray[Any], tpot: FloatArray,
                      itl_mean: FloatArray) -> BoolArray:
    """The measured requests of two output tokens or more whose tokens after the first came
    less than :data:`BURST_ITL_S` apart on average: by ``itl_mean`` where it is known, else by
    ``tpot`` (NaN: neither, not flagged)."""
    gap = np.where(np.isfinite(itl_mean), itl_mean, tpot)
    with np.errstate(invalid="ignore"):
        return usable & (np.asarray(output) >= 2) & (gap < BURST_ITL_S)


def whole_answer_rows_of(measured: Any) -> BoolArray:
    """:func:`whole_answer_rows` of a :attr:`~kvbudget.results.recording.Recording.measured`
    table."""
    return whole_answer_rows(measured["usable"].to_numpy(dtype=bool),
                             measured["output_tokens"].to_numpy(),
                             measured["tpot_s"].to_numpy(dtype=np.float64),
                             measured["itl_mean_s"].to_numpy(dtype=np.float64))


CLIENT_READ = ("the client read the whole answer at once (a client or API server busy "
               "elsewhere, a proxy buffering the stream, or a request not streamed)")
"""Who read a load tool's whole answers at once, and why it may have."""

GATEWAY_READ = ("kvbudget serve read the whole answer at once, from the upstream it streams "
                "from (the server sent the tokens in bursts, or the gateway's client did not "
                "stream, and the gateway sees no first token of a whole answer)")
"""Who read a ``kvbudget serve`` directory's whole answers at once: the gateway itself, which
streams every answer from its upstream and times each chunk as it reads it; no client nor
proxy stands between them."""


def reader_of(config: Mapping[str, Any]) -> str:
    """Who read a recording's answers (``config``: :attr:`~kvbudget.results.recording.
    Recording.config`): ``"the gateway"`` for a ``kvbudget serve`` directory, else
    ``"the client"``."""
    return "the gateway" if config.get("executor") == "serve" else "the client"


def whole_answer_note(rows: BoolArray, usable: BoolArray, itl_mean: FloatArray,
                      reader: str = CLIENT_READ) -> str | None:
    """The note of a recording whose ``rows`` (of :func:`whole_answer_rows`) got their whole
    answer at once, saying what it was read from and ``reader`` (who read it, and why it
    may have: :data:`CLIENT_READ`, :data:`GATEWAY_READ`); None when none did."""
    if not rows.any():
        return None
    by_itl = bool(np.isfinite(itl_mean[rows]).all())
    how = ("their inter-token times" if by_itl else
           "their inter-token times where the file has them, else (E2E - TTFT) over the "
           "tokens after the first")
    return (f"{int(rows.sum())} of {int(usable.sum())} completed requests got the tokens after "
            f"their first less than {BURST_ITL_S * 1e6:.0f} us apart on average ({how}; "
            f"faster than 10,000 tokens a second, beyond any published decode speed): {reader}, "
            "so their TTFT is about their E2E and their TPOT near 0, when "
            f"{'the gateway' if reader == GATEWAY_READ else 'the client'} read them, not when the "
            "server made them: "
            "their TTFT and TPOT are left out of every comparison and fit, their E2E kept")
