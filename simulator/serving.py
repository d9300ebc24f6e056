""":class:`ServingEngine`: what the run driver (``kvbudget.simulator.run``) asks of the engine
model, one replica (:class:`kvbudget.simulator.engine.Engine` and its variants) or several
behind a router (:class:`kvbudget.simulator.fleet.Fleet`).

Every figure read through it is current: a decode run or decode group in progress is counted
as far as its steps have ended, with no call needed first to bring the arrays up to date.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
TimelineRow = tuple[float, int, int, int, int, int, int]


class RequestFigures:
    """Per workload row, what the records take from the engine when the run is over
    (:meth:`ServingEngine.request_figures`), and the token-gap rows. A plain class, not a
    dataclass: every ``simulate`` imports this module, and creating a dataclass costs about a
    millisecond of start-up."""

    __slots__ = ("finished_s", "first_token_s", "gap_s", "gap_tier", "num_gaps",
                 "num_preemptions", "output_tokens", "recomputed_tokens")

    def __init__(self, output_tokens: IntArray, first_token_s: FloatArray,
                 finished_s: FloatArray, num_preemptions: IntArray, recomputed_tokens: IntArray,
                 gap_tier: IntArray, gap_s: FloatArray, num_gaps: IntArray) -> None:
        self.output_tokens = output_tokens
        self.first_token_s = first_token_s
        self.finished_s = finished_s
        self.num_preemptions = num_preemptions
        self.recomputed_tokens = recomputed_tokens
        self.gap_tier = gap_tier
        self.gap_s = gap_s
        self.num_gaps = num_gaps


class ServingEngine(Protocol):
    """The executor interface and the figures of a run, per workload row ``i``."""

    # --- the executor interface: the gateway's actions ---------------------------------------
    def fits(self, i: int) -> bool:
        """Whether row ``i`` could ever run here (vLLM's ``max_model_len`` check)."""
        ...

    def add_request(self, i: int) -> str:
        """Row ``i`` was admitted: queue it (its prompt only; nothing computed) and return
        ``""``, or the reason the engine's own queue caps refused it (nothing queued)."""
        ...

    def abort_request(self, i: int) -> None:
        """Row ``i``'s lease was revoked: remove it (at the next step boundary)."""
        ...

    def output_tokens_of(self, i: int) -> int:
        """Row ``i``'s output tokens so far (a policy's probe reads it mid-run)."""
        ...

    def forget_first_token(self, i: int) -> None:
        """A new attempt of row ``i`` starts (a client's retry): the first token its user
        sees is this attempt's."""
        ...

    @property
    def num_preemptions_total(self) -> int:
        """Engine preemptions so far, all requests."""
        ...

    # --- figures of the run ------------------------------------------------------------------
    @property
    def t(self) -> float:
        """The end of the last step that has ended."""
        ...

    @property
    def num_gpu_blocks(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def num_steps(self) -> int: ...

    @property
    def num_recomputed_tokens(self) -> int: ...

    @property
    def timeline(self) -> list[TimelineRow]:
        """Samples ``(time_s, kv_used_tokens, kv_reserved_tokens, kv_capacity_tokens,
        num_running, num_waiting, num_preemptions)``, one per timeline period."""
        ...

    def kv_token_seconds(self) -> float:
        """Exact integral of KV tokens in use over time."""
        ...

    def stats(self) -> dict[str, object]:
        """Engine figures for the summary's ``engine`` block."""
        ...

    def request_figures(
        self, keep: npt.NDArray[np.bool_], tier: IntArray
    ) -> RequestFigures:
        """The per-row figures at the end of the run (:class:`RequestFigures`: the inter-token
        gaps those of the rows ``keep`` selects, their final attempts, as :meth:`Engine.token_gaps
        <kvbudget.simulator.engine.Engine.token_gaps>` gives them), read once: a fleet lets
        each replica's per-request state go as soon as it has read it, so nothing per row can
        be read after this (the other figures can)."""
        ...
