"""``kvbudget simulate`` with vLLM's CPU KV offloading knobs: bad values end in one line naming
the file and the field (exit 2); a good one prints the tier's line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(("engine", "needle"), [
    ("kv_offloading_size = -1", "engine.kv_offloading_size: input should be greater than 0"),
    # each named the knob without the engine. that --set takes ("kv_offloading_backend must")
    ('kv_offloading_size = 8\nkv_offloading_backend = "disk"',
     ": engine.kv_offloading_backend must be one of native, lmcache, got 'disk'"),
    ('kv_offloading_size = 8\nkv_offloading_backend = "lmcache"',
     ": engine.kv_offloading_backend 'lmcache' is not modelled"),
    ('kv_offloading_size = 8\nname = "sglang"',
     ": engine.kv_offloading_size is vLLM v1's CPU offloading; engine 'sglang'"),
    ("kv_offloading_size = 8\nenable_prefix_caching = false",
     ": engine.kv_offloading_size needs engine.enable_prefix_caching"),
    ("kv_offloading_size = 100000", ": engine.kv_offloading_size must be in (0, 65536] GiB"),
    ("kv_offloading_size = 300",
     "engine.kv_offloading_size 300 GiB is more than the host memory of the replica's 1 GPU(s) "
     "(256 GiB: 256 GiB per H100-SXM"),
])
def test_bad_offloading_settings_end_in_one_line(tmp_path: Path, engine: str, needle: str) -> None:
    scenario = tmp_path / "offload.toml"
    scenario.write_text(f'policy = "unlimited"\ngpu = "H100-SXM"\n[engine]\n{engine}\n')
    res = runner.invoke(app, ["simulate", "--scenario", str(scenario)])
    assert res.exit_code == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and str(scenario) in lines[0] and needle in lines[0], res.stderr
    assert "Traceback" not in res.stderr + res.stdout


def test_a_run_with_the_tier_prints_what_it_did(shared: Path) -> None:
    trace = shared / "traces" / "mooncake" / "synthetic_trace.jsonl"
    res = runner.invoke(app, ["simulate", "--trace", str(trace), "--gpu", "H100-SXM",
                              "--policy", "unlimited", "--set", "engine.kv_offloading_size=64"])
    assert res.exit_code == 0, res.stderr
    out = " ".join(res.stdout.split())
    # 64 GiB of 16-token blocks at 128 KiB a token (Llama-3.1-8B): 2**36 / 2**21 = 32,768
    # blocks; the loads' tokens at 131,072 bytes a token: 1,458,688 x 131,072 = 191 GB (the
    # figures grouped as every other count on the screen, which they were not)
    assert ("CPU KV offload: unlimited: 64 GiB (32,768 blocks), 144 loads of 1,458,688 tokens "
            "(191 GB a GPU") in out
    # the 3 TB stored, grouped too (was '3.14e+03 GB a GPU stored')
    start = out.index("CPU KV offload:")
    line = out[start:out.index("(assumed:", start)]
    assert re.search(r"s\), 3,1\d\d GB a GPU stored", line) and "e+" not in line, line
    assert "assumed: loads at 0.7 of the GPU's host link" in out


def test_a_fleets_tiers_are_said_summed_over_its_replicas(shared: Path, tmp_path: Path) -> None:
    """A fleet of 2 with a 64 GiB tier each ran the tiers (each replica's summary block has
    its loads) but its screen had no 'CPU KV offload:' line (the fleet's summary had no
    kv_offloading of its own): the line now sums the replicas' loads, tokens and bytes, each
    recomputed here from summary.json."""
    trace = shared / "traces" / "mooncake" / "synthetic_trace.jsonl"
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--trace", str(trace), "--window", "0:300",
                              "--gpu", "H100-SXM", "--policy", "unlimited",
                              "--set", "fleet.num_replicas=2",
                              "--set", "engine.kv_offloading_size=64", "--out", str(out)])
    assert res.exit_code == 0, res.stderr
    tiers = [r["kv_offloading"] for r in json.loads((out / "summary.json").read_text())[
        "engine"]["fleet"]["replicas"]]
    assert len(tiers) == 2
    loads = sum(t["num_loads"] for t in tiers)
    tokens = sum(t["cpu_hit_tokens"] for t in tiers)
    moved = sum(t["load_bytes_per_gpu"] for t in tiers) / 1e9
    assert tokens * 131_072 / 1e9 == pytest.approx(moved)  # 128 KiB a token, tp 1
    out_text = " ".join(res.stdout.split())
    assert (f"CPU KV offload: unlimited: 64 GiB a replica (32,768 blocks) on 2 replicas, "
            f"together {loads:,} load{'' if loads == 1 else 's'} of {tokens:,} tokens "
            f"({moved:.3g} GB in ") in out_text, out_text
