"""An engine's per-request data, by row: the columns it serves (:class:`RequestColumns`, its
input) and its state arrays (:class:`RowArrays`), kept together so that they grow together: a
fleet's replica (:mod:`kvbudget.simulator.fleet`) holds the rows routed to it, more as they
come, and lets them go once its figures are read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from kvbudget.simulator.serving import FloatArray, IntArray
from kvbudget.workloads import Workload

__all__ = ["RequestColumns", "RowArrays"]

Array = TypeVar("Array", bound="np.ndarray[Any, Any]")


@dataclass(frozen=True, slots=True)
class RequestColumns:
    """The per-request columns an engine serves, by row: the workload's (:meth:`of`), or a
    fleet replica's own rows (without prefix hashes). ``priority``: each row's tier priority;
    ``max_output_tokens``: what each declared (``output_tokens`` when None); the prefix hashes
    of the prompts as :class:`~kvbudget.workloads.Workload` keeps them."""

    prompt_tokens: IntArray
    output_tokens: IntArray
    priority: IntArray
    arrival_s: FloatArray
    max_output_tokens: IntArray | None = None
    prefix_hashes: IntArray | None = None
    prefix_offsets: IntArray | None = None
    prefix_block_tokens: int = 512

    def __post_init__(self) -> None:
        out, most = self.output_tokens, self.max_output_tokens
        if most is not None and bool(np.any(out > most)):
            # a request never generates more than it declared (workloads check it): the
            # worst-case reservations of TGI and TensorRT-LLM rely on it
            k = int(np.argmax(out > most))
            raise ValueError(f"request {k}: output_tokens {int(out[k])} exceeds "
                             f"max_output_tokens {int(most[k])}")

    @classmethod
    def of(cls, workload: Workload, priority: IntArray) -> RequestColumns:
        """``workload``'s columns, with ``priority``."""
        w = workload
        return cls(w.prompt_tokens, w.output_tokens, priority, w.arrival_s, w.max_output_tokens,
                   w.prefix_hashes, w.prefix_offsets, w.prefix_block_tokens)


class RowArrays:
    """An engine's per-request state arrays, each registered (:meth:`add`) with the value a new
    row starts with; :meth:`grow` and :meth:`drop` make every one longer or empty and return
    them by name (the engine keeps them as its attributes and takes the new ones)."""

    __slots__ = ("arrays", "fills")

    def __init__(self) -> None:
        self.arrays: dict[str, npt.NDArray[Any]] = {}
        self.fills: dict[str, float] = {}

    def add(self, name: str, array: Array, fill: float) -> Array:
        """Register ``array`` (one value per row, ``fill`` for a new row) as ``name``."""
        self.arrays[name] = array
        self.fills[name] = fill
        return array

    def grow(self, num_rows: int) -> dict[str, npt.NDArray[Any]]:
        """Every array ``num_rows`` long, the rows there keeping their values."""
        for name, old in self.arrays.items():
            new = np.full(num_rows, self.fills[name], old.dtype)
            new[: len(old)] = old
            self.arrays[name] = new
        return self.arrays

    def drop(self) -> dict[str, npt.NDArray[Any]]:
        """Every array empty (the engine is done with its rows)."""
        for name, old in self.arrays.items():
            self.arrays[name] = np.zeros(0, old.dtype)
        return self.arrays
