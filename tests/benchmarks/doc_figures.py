"""Reading a docs table's figures and checking them at the precision they are shown.

A cell such as ``-18 / -26 / -29 %`` or ``52.0 ns (+19 %)`` holds figures; each is checked
against the value it stands for to half a unit of its last digit, and when one is off the test
prints the cell (and the row) as the docs should show it, with every figure rewritten at the
precision it has now, so that refreshing the docs after a deliberate change is a copy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

NUMBER = re.compile(r"(?<![\w.])[+-]?\d[\d,]*(?:\.\d+)?")
"""A figure in a cell: optional sign, thousands commas, decimals; not part of a name
(``H100``, ``Llama-3.1-8B``) or of a word."""


def section(doc: Path, heading: str) -> str:
    """The text of ``doc`` from the line ``heading`` to the next heading of the same level."""
    text = doc.read_text()
    level = heading.split(" ", 1)[0]
    start = text.index(heading + "\n") if heading + "\n" in text else text.index(heading)
    rest = text[start + len(heading):]
    end = re.search(rf"^{level} ", rest, flags=re.MULTILINE)
    return rest if end is None else rest[:end.start()]


def table_rows(text: str, header_start: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first table in ``text`` whose header line begins
    with ``header_start``."""
    lines = text.splitlines()
    first = next(i for i, ln in enumerate(lines) if ln.startswith(header_start))
    rows = []
    for line in lines[first + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def numbers(cell: str) -> list[str]:
    """The figures of a cell as written."""
    return NUMBER.findall(cell)


def _decimals(number: str) -> int:
    return len(number.split(".")[1]) if "." in number else 0


def value_of(number: str) -> float:
    return float(number.replace(",", ""))


def agrees(number: str, value: float) -> bool:
    """``number`` as written is ``value`` rounded at its precision (half a unit of its last
    digit, and a hair more for the binary floats)."""
    return abs(value_of(number) - value) <= 0.5 * 10.0 ** -_decimals(number) + 1e-9


def written(number: str, value: float) -> str:
    """``value`` written as ``number`` is: the same decimals, sign style and thousands commas."""
    spec = f"{'+' if number[0] in '+-' else ''}{',' if ',' in number else ''}.{_decimals(number)}f"
    return format(value, spec)


def rewrite(cell: str, values: Sequence[float]) -> str:
    """``cell`` with its figures replaced by ``values``, each at its figure's precision."""
    found = list(NUMBER.finditer(cell))
    if len(found) != len(values):
        raise AssertionError(f"{cell!r}: {len(found)} figures, {len(values)} values")
    out, last = [], 0
    for m, v in zip(found, values, strict=True):
        out.append(cell[last:m.start()] + written(m.group(), v))
        last = m.end()
    return "".join(out) + cell[last:]


def stale(cell: str, values: Sequence[float]) -> bool:
    """Whether any figure of ``cell`` disagrees with its value (or the counts differ)."""
    found = numbers(cell)
    return len(found) != len(values) or not all(
        agrees(n, v) for n, v in zip(found, values, strict=True))


def row_line(cells: Sequence[str]) -> str:
    """A table row as the docs write it (an empty cell is ``| |``)."""
    return "|" + "|".join(f" {c} " if c else " " for c in cells) + "|"
