"""The live replay's prompts share the blocks the workload's prefix hashes say they share.

A workload with prefix hashes (Mooncake's ``hash_ids``) was replayed with each prompt ids of
its own: a server with prefix caching on had no hit to serve, while the simulation it was
compared with shared the hashed blocks' KV, so its TTFT was too low by that prefill and the
difference read as the model's error."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from kvbudget.live.openai_client import ServerTarget
from kvbudget.live.replay import ReplayConfig, ReplayMeta, prompt_of, replay
from kvbudget.policies import BATCH, INTERACTIVE, make_policy
from kvbudget.workloads import from_columns
from tests.unit.live.test_backends_live_gateway import Fake, fake  # noqa: F401 (the fixture)

BLOCK = 16


def test_prompts_naming_the_same_hashes_send_the_same_ids(fake: Fake, tmp_path: Path  # noqa: F811
                                                          ) -> None:
    fake.state.token_s = 0.001
    # rows 0 and 1 share two whole blocks (hashes 7, 8), row 2 shares the first (7) and then
    # differs (9), row 3 names none; row 1 has a third hash beyond its whole blocks (40 tokens:
    # two whole blocks), which no block of it takes
    prompt = [40, 40, 48, 33]
    hashes = [[7, 8], [7, 8, 11], [7, 9, 10], []]
    offsets = np.cumsum([0] + [len(h) for h in hashes])
    w = from_columns([0.0, 0.01, 0.02, 0.03], prompt, [4, 4, 4, 4], tiers=["batch"] * 4)
    w = replace(w, prefix_hashes=np.array([h for hs in hashes for h in hs], np.int64),
                prefix_offsets=offsets.astype(np.int64), prefix_block_tokens=BLOCK)
    config = ReplayConfig(ServerTarget(fake.url), poll_period_s=0.02, tiers=(INTERACTIVE, BATCH))
    meta = ReplayMeta(trace="test", policy="unlimited", policy_params={}, time_scale=1.0,
                      seed=0, url=fake.url)
    out = replay(w, make_policy("unlimited"), config, tmp_path / "run", meta=meta)
    assert out.complete
    bodies = sorted(fake.state.bodies, key=lambda b: (len(b["prompt"]), b["prompt"]))
    assert sorted(len(b["prompt"]) for b in bodies) == sorted(prompt)
    forty = [b["prompt"] for b in bodies if len(b["prompt"]) == 40]  # rows 0 and 1, as sent
    assert len(forty) == 2 and forty[0][: 2 * BLOCK] == forty[1][: 2 * BLOCK] != forty[0][:0]
    sent = {tuple(b["prompt"]) for b in bodies}
    made = [prompt_of(w, i, prompt[i], 0, config.token_ids) for i in range(4)]
    assert sent == {tuple(p) for p in made}
    assert made[0][: 2 * BLOCK] == made[1][: 2 * BLOCK]  # two shared blocks
    assert made[0][2 * BLOCK:] != made[1][2 * BLOCK:]  # then their own ids
    assert made[2][:BLOCK] == made[0][:BLOCK] and made[2][BLOCK:2 * BLOCK] != made[0][BLOCK:2 * BLOCK]
    assert made[3][:BLOCK] != made[0][:BLOCK]
    assert any("prompts from the workload's prefix hashes" in a and
               "(3 of 4 requests share a block with another)" in a
               for a in out.summary["assumed"]), out.summary["assumed"]
