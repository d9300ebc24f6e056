"""The per-request state arrays of an engine, by workload row, kept together so that they grow
together: a fleet's replica (:mod:`kvbudget.simulator.fleet`) holds the rows routed to it, more
as they come, and lets them go once its figures are read."""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

__all__ = ["RowArrays"]

Array = TypeVar("Array", bound="np.ndarray[Any, Any]")


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
