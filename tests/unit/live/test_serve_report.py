"""``kvbudget report`` on a run directory ``kvbudget serve`` wrote: its Outcomes table's reasons
column counts every request the gateway refused, by the reason its row records, beside those
its upstream refused (the gateway's own refusal of a request too large for its tier names no
reason in the records: it was left out of the column, though counted as too large)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import httpx
import pandas as pd
import pytest

from kvbudget.analysis.report import build_report
from kvbudget.live.serve_records import ServeRecorder
from tests.unit.live.serve_harness import TIERS, FakeUpstream, stack, until

pytestmark = pytest.mark.timeout(120)


def _body(max_tokens: int = 8) -> dict[str, Any]:
    return {"model": "fake", "prompt": "hello", "max_tokens": max_tokens}


async def _record(root: Path) -> Path:
    """One run directory: per tier, one completion and the gateway's refusals (interactive: too
    large and past its deadline; batch: overloaded) while the first request holds the room."""
    fake = FakeUpstream()
    recorder = ServeRecorder(root, tiers=TIERS, policy={"name": "conservative"},
                             rotate_requests=100, meta={"executor": "serve"})
    # room for one request: the bound of "hello" (5 + 16) + 8 = 29 tokens
    async with stack(fake, capacity_tokens=40, recorder=recorder,
                     params={"batch_on_overload": "reject"}) as (_server, url), \
            httpx.AsyncClient() as client:
        first = asyncio.create_task(client.post(url + "/v1/completions", json=_body()))
        await until(lambda: fake.held == 1, lambda: fake.changed)
        batch = await client.post(url + "/v1/completions", json=_body(),
                                  headers={"x-kvbudget-tier": "batch"})
        late = await client.post(url + "/v1/completions", json=_body(),
                                 headers={"x-kvbudget-deadline-s": "0"})
        large = await client.post(url + "/v1/completions", json=_body(max_tokens=4000))
        assert (batch.status_code, late.status_code, large.status_code) == (429, 429, 400)
        fake.release.set()
        assert (await first).status_code == 200
    recorder.close(1.0)
    return recorder.closed[0]


def _outcomes(html: str) -> dict[str, dict[str, str]]:
    """The Outcomes table's rows by tier, each cell by its column's header."""
    start = html.rindex("<table", 0, html.index("Outcomes per run and tier"))
    table = html[start:html.index("</table>", start)]
    rows = [[re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<t[dh][^>]*>(.*?)</t[dh]>",
                                                                    row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table, re.S)]
    return {row[1]: dict(zip(rows[0], row, strict=True)) for row in rows[1:]}


def test_the_reasons_column_counts_the_gateways_own_refusals(tmp_path: Path) -> None:
    run_dir = asyncio.run(_record(tmp_path / "runs"))
    records = pd.read_parquet(run_dir / "requests.parquet")
    said = sorted(zip(records["tier"], records["status"], records["reason"], strict=True))
    assert said == [("batch", "rejected_overloaded", "no_capacity"),
                    ("interactive", "completed", ""), ("interactive", "expired", "deadline"),
                    ("interactive", "rejected_too_large", "")]  # the records name no reason
    report = build_report([run_dir], tmp_path / "report", num_resamples=10)
    rows = _outcomes(report.html_path.read_text())
    assert (rows["interactive"]["too large"], rows["interactive"]["expired"]) == ("1", "1")
    # every refusal in the reasons column: the gateway's too large under /metrics' name for it
    assert sorted(rows["interactive"]["reasons"].split(", ")) == ["deadline: 1", "too_large: 1"]
    assert rows["batch"]["reasons"] == "no_capacity: 1"
