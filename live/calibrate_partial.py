"""The measurements of an interrupted ``calibrate --url``, kept so that a rerun goes on from them.

A live calibration measures its grid round after round (every point once, then again for the
next repeat) and fits only once the whole grid is measured. Ctrl-C, SIGTERM or a server that
dies part way used to lose every measurement; now the grid measurements made so far are written
beside ``--out`` (:func:`partial_path`: ``cost.json`` -> ``cost.partial.json``) and
``calibrate --resume`` measures only the rest, then fits and writes ``--out`` as a full run
would. The file is refused for a resume when the server, its KV capacity or the plan differ from
what it was measured with (a mix of two servers' steps fits neither).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARTIAL_VERSION = 1


def partial_path(out: Path) -> Path:
    """Where the measurements of an interrupted calibration writing ``out`` are kept."""
    return out.with_name(f"{out.stem}.partial.json")


@dataclass(eq=False)
class CalibrationProgress:
    """The grid measurements made so far: step samples (rows of the samples table), idle
    time-to-first-token probes, notes, and which (kind, num_seqs, seq_len, repeat) grid
    measurements are finished (a point the streams could not time in any try is finished too:
    its misses are notes). ``server``: what the measurements were made on (url, model, KV
    capacity in tokens, max_model_len, the plan), set when the grid is planned."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    idle: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    done: list[tuple[str, int, int, int]] = field(default_factory=list)
    server: dict[str, Any] = field(default_factory=dict)

    @property
    def num_done(self) -> int:
        return len(self.done)

    def is_done(self, kind: str, num_seqs: int, seq_len: int, repeat: int) -> bool:
        return (kind, num_seqs, seq_len, repeat) in self.done

    def finish(self, kind: str, num_seqs: int, seq_len: int, repeat: int) -> None:
        self.done.append((kind, num_seqs, seq_len, repeat))

    def check_same(self, server: dict[str, Any], source: str) -> None:
        """ValueError naming the first field where the measurements kept in ``source`` were
        made on another server or plan than ``server`` describes; else adopt ``server``."""
        server = json.loads(json.dumps(server))  # tuples as the file has them: lists
        if self.server:
            for key, now in server.items():
                was = self.server.get(key)
                if was != now:
                    raise ValueError(
                        f"{source}: its measurements were made with {key} {was!r}, this run has "
                        f"{now!r}: resume with the same server and flags, or delete the file "
                        "to start over"
                    )
        self.server = dict(server)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": PARTIAL_VERSION,
            "server": self.server,
            "done": self.done,
            "samples": self.rows,
            "idle_ttft": self.idle,
            "notes": self.notes,
        }

    def save(self, path: Path) -> None:
        """Write atomically (a second Ctrl-C while writing leaves the old file whole)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1))
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> CalibrationProgress:
        """The measurements kept in ``path``; ValueError (one line naming the file) when it is
        no such file."""
        try:
            payload = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"{path}: not the measurements of a calibration ({exc})") from None
        if not isinstance(payload, dict) or payload.get("version") != PARTIAL_VERSION:
            raise ValueError(
                f"{path}: not the measurements of a calibration (version "
                f"{PARTIAL_VERSION} expected)"
            )
        try:
            done = [(str(k), int(n), int(s), int(r)) for k, n, s, r in payload["done"]]
            return cls(
                rows=list(payload["samples"]),
                idle=list(payload["idle_ttft"]),
                notes=[str(n) for n in payload["notes"]],
                done=done,
                server=dict(payload["server"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"{path}: not the measurements of a calibration (field {exc})"
            ) from None
