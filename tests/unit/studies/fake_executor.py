"""The context-manager part of the studies' stand-in executors (``studies.executors.Executor``):
nothing to start or close; each test's fake gives ``name``, ``num_workers`` and
``map_unordered``."""

from __future__ import annotations

from typing import Self


class FakeExecutor:
    def close(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass
