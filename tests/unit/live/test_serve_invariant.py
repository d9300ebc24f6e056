"""The gateway's invariant through ``kvbudget serve``: no request reaches the upstream without a
lease that fits its tier's limit and the capacity of the moment it was admitted, under a
bounded concurrent burst during which the upstream holds many requests at once and its reported
KV capacity changes."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from kvbudget.live.gateway_server import REQUEST_ID_HEADER
from kvbudget.policies.gateway import Action, Admit
from tests.unit.live.serve_harness import BLOCK_SIZE, FakeUpstream, stack, until

NUM_REQUESTS = 48
CAPACITY_BLOCKS = (40, 16)  # the upstream's usable blocks before and after the change


@pytest.mark.timeout(90)
def test_no_request_reaches_the_upstream_without_a_fitting_lease() -> None:
    violations: list[str] = []
    capacities: list[int] = []

    async def main() -> None:
        fake = FakeUpstream(num_gpu_blocks=CAPACITY_BLOCKS[0] + 1)
        gateway_state: dict[str, Any] = {}

        def on_action(action: Action) -> None:
            gw = gateway_state.get("gw")
            if not isinstance(action, Admit) or gw is None:
                return
            capacity = gw.config.capacity_tokens
            if gw.budget.reserved_tokens > capacity:  # the new lease included
                violations.append(f"admitted {action.request.request_id} with "
                                  f"{gw.budget.reserved_tokens} reserved > {capacity}")

        def on_request(request: Request, body: dict[str, Any]) -> None:
            gw = gateway_state["gw"]
            rid = int(request.headers[REQUEST_ID_HEADER])
            entry = gw.admitted.get(rid)
            if entry is None or entry.lease.released:
                violations.append(f"{rid} reached the upstream with no live lease")
                return
            need = entry.request.max_sequence_tokens
            if entry.lease.reserved_tokens < need:
                violations.append(f"{rid}: lease {entry.lease.reserved_tokens} < {need}")
            if need > gw.tiers[entry.request.tier].max_sequence_tokens:
                violations.append(f"{rid}: over its tier's limit")
            if body["max_tokens"] != entry.request.max_output_tokens:
                violations.append(f"{rid}: forwarded max_tokens {body['max_tokens']} is not the "
                                  f"admitted {entry.request.max_output_tokens}")

        fake.on_request = on_request
        async with stack(fake, capacity_tokens=10_000, on_action=on_action) as (server, url):
            gw = server.admission.gateway
            gateway_state["gw"] = gw
            await server.refresh_capacity()  # the upstream's figure, not the scenario's
            capacities.append(gw.config.capacity_tokens)
            limits = httpx.Limits(max_connections=NUM_REQUESTS)
            async with httpx.AsyncClient(limits=limits, timeout=60) as client:
                tiers = ("interactive", "batch")
                tasks = [asyncio.create_task(client.post(
                    url + "/v1/completions",
                    json={"model": "fake", "prompt": "hello " * (1 + i % 5),
                          "max_tokens": 10 + (7 * i) % 40, "stream": i % 3 == 0},
                    headers={"x-kvbudget-tier": tiers[i % 2]})) for i in range(NUM_REQUESTS)]
                # the upstream holds a full budget's worth at once, the rest wait at the gateway
                await until(lambda: fake.held >= 5 and gw.num_waiting() > 0,
                            lambda: fake.changed, lambda: server.admission.changed)
                fake.num_gpu_blocks = CAPACITY_BLOCKS[1] + 1  # the engine's KV shrank
                await server.refresh_capacity()
                capacities.append(gw.config.capacity_tokens)
                fake.release.set()
                answers = await asyncio.gather(*tasks)
            assert [r.status_code for r in answers] == [200] * NUM_REQUESTS
            assert len(fake.received) == NUM_REQUESTS
            assert fake.peak_held >= 5  # many at once, not one at a time

    asyncio.run(main())
    assert capacities == [b * BLOCK_SIZE for b in CAPACITY_BLOCKS]
    assert not violations, violations[:5]
