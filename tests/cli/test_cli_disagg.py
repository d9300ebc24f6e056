"""Issue 38's bad input for disaggregated serving and CPU offload, given on the command line
(``--set``; tests/model/test_disagg.py and test_cli_offload.py give them in scenario files):
exit 2 and one line naming the field."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from kvbudget.cli.main import app

runner = CliRunner()
BOTH = ["--set", "disaggregation.prefill.num_replicas=1",
        "--set", "disaggregation.decode.num_replicas=1"]


@pytest.mark.parametrize(("args", "line"), [
    # a disaggregated deployment without a decode pool
    (["--set", "disaggregation.prefill.num_replicas=2"],
     "error: disaggregation.decode: a disaggregated deployment needs a decode pool "
     "([disaggregation.decode] with num_replicas)"),
    (["--set", "disaggregation.prefill.num_replicas=2",
      "--set", "disaggregation.decode.num_replicas=0"],
     "error: disaggregation.decode.num_replicas: input should be greater than or equal to 1, "
     "got 0"),
    # a transfer link of zero bandwidth
    ([*BOTH, "--set", "disaggregation.link_bandwidth_gb_s=0"],
     "error: disaggregation.link_bandwidth_gb_s: input should be greater than 0, got 0"),
    ([*BOTH, "--set", "disaggregation.link_bandwidth_gb_s=inf"],
     "error: disaggregation.link_bandwidth_gb_s must be > 0, got inf"),
    ([*BOTH, "--set", "disaggregation.link_latency_s=-1"],
     "error: disaggregation.link_latency_s: input should be greater than or equal to 0, got -1"),
    ([*BOTH, "--set", 'disaggregation.first_token="proxy"'],
     "error: disaggregation.first_token must be 'decode' or 'prefill', got 'proxy'"),
    ([*BOTH, "--set", 'disaggregation.link="nvlink"', "--gpu", "L40S"],
     "error: disaggregation.link: L40S has no NVLink; use pcie, infiniband-ndr, "
     "infiniband-hdr or roce-200"),
    ([*BOTH, "--set", 'disaggregation.decode.gpu="H7"'],
     "error: disaggregation.decode.gpu: unknown GPU preset 'H7'"),
    # offload larger than host memory
    (["--gpu", "H100-SXM", "--set", "engine.kv_offloading_size=300"],
     "error: engine.kv_offloading_size 300 GiB is more than the host memory of the replica's "
     "1 GPU(s) (256 GiB: 256 GiB per H100-SXM, GPUSpec.host_memory_bytes)"),
    # a pool's engine knob by its own path (was "disaggregation.decode.engine: kv_offloading_...")
    ([*BOTH, "--set", 'disaggregation.decode.engine.kv_offloading_backend="disk"'],
     "error: disaggregation.decode.engine.kv_offloading_backend must be one of native, lmcache, "
     "got 'disk'"),
    ([*BOTH, "--set", "disaggregation.decode.engine.kv_offloading_size=64"],
     "error: disaggregation.decode.engine.kv_offloading_size: not modelled with disaggregated "
     "serving yet"),
    # a decode pool's own prefix caching, which the model turns off (was dropped, exit 0)
    ([*BOTH, "--set", "disaggregation.decode.engine.enable_prefix_caching=true"],
     "error: disaggregation.decode.engine.enable_prefix_caching: not modelled: a decode replica "
     "runs without prefix caching"),
    # a decode pool's queue cap, never applied (was dropped, exit 0), and the scenario's
    # [engine] cap, which the decode pool took too
    ([*BOTH, "--set", "disaggregation.decode.engine.max_num_queued_reqs=5"],
     "error: disaggregation.decode.engine.max_num_queued_reqs: not modelled: a decode replica "
     "takes its requests from the prefill pool's hand-off"),
    ([*BOTH, "--set", "engine.max_num_queued_tokens=5000"],
     "error: engine.max_num_queued_tokens: with [disaggregation] it is each pool's server's own "
     "cap and a decode replica's is not modelled: give it to the prefill pool "
     "(disaggregation.prefill.engine.max_num_queued_tokens)"),
])
def test_bad_disaggregation_on_the_command_line_is_one_line(args: list[str], line: str) -> None:
    res = runner.invoke(app, ["simulate", "--set", "workload.duration_s=2", *args])
    assert res.exit_code == 2, res.output
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith(line), err
    assert "Traceback" not in res.output


def test_a_disaggregated_runs_knobs_are_its_pools() -> None:
    """The summary's ``engine_knobs`` of a disaggregated run are each pool's own (a pool's
    engine table where it gives one), not the scenario's [engine] table, which no pool ran."""
    res = runner.invoke(app, [
        "simulate", "--set", "workload.duration_s=2", "--max-num-seqs", "64", *BOTH,
        "--set", "disaggregation.decode.engine.max_num_seqs=32", "--json"])
    assert res.exit_code == 0, res.output
    knobs = json.loads(res.stdout)["engine_knobs"]
    assert set(knobs) == {"prefill", "decode"}
    assert knobs["decode"]["max_num_seqs"] == 32
    assert knobs["prefill"]["max_num_seqs"] == 64  # the pool gives none: the run's


def test_the_scenarios_prefix_caching_is_the_prefill_pools() -> None:
    """[engine] enable_prefix_caching = true is the prefill pool's (the decode pool runs
    without, and is not refused for it); the decode pool's own false is taken as it is."""
    res = runner.invoke(app, [
        "simulate", "--set", "workload.duration_s=2", *BOTH,
        "--set", "engine.enable_prefix_caching=true",
        "--set", "disaggregation.decode.engine.enable_prefix_caching=false", "--json"])
    assert res.exit_code == 0, res.output
    knobs = json.loads(res.stdout)["engine_knobs"]
    assert knobs["prefill"]["enable_prefix_caching"] is True
    assert knobs["decode"]["enable_prefix_caching"] is False


def test_the_screen_says_the_transfers_and_each_pools_kv(tmp_path: Path) -> None:
    """simulate's screen of a disaggregated run said nothing of its transfers or of the
    prefill pool (only summary.json had them): a 'disaggregated:' line says both, each figure
    recomputed here from the run's own files (the transfers from the records, the pools' KV
    from summary.json, whose decode pool's is the KV table's)."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--set", "workload.duration_s=5", *BOTH,
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    screen = " ".join(res.stdout.split())
    rec = pd.read_parquet(out / "requests.parquet")
    moved = rec["transfer_end_s"].notna()
    mean_ms = 1e3 * (rec["transfer_end_s"] - rec["transfer_start_s"])[moved].mean()
    pools = json.loads((out / "summary.json").read_text())["engine"]["disaggregation"]
    assert ("disaggregated, over infiniband-ndr (50 GB/s a GPU + 0.401 ms a transfer, 131,072 "
            "bytes a token a GPU): conservative: first tokens from the decode replicas (vLLM's "
            f"P/D: TTFT counts the transfer), {int(moved.sum()):,} KV transfers, "
            f"{mean_ms:.3g} ms mean; KV used (mean) prefill pool "
            f"{pools['prefill']['kv_used_mean_fraction']:.3g} of 438,192 tokens, decode pool "
            f"{pools['decode']['kv_used_mean_fraction']:.3g} of 438,192 tokens (the decode pool's "
            "is the KV table's)"
            ) in screen
    kv_row = next(ln for ln in res.stdout.splitlines() if ln.startswith("conservative  ")
                  and "438,192" in ln)
    assert f"{pools['decode']['kv_used_mean_fraction']:.3g}" in kv_row.split()


def test_the_prefill_pools_queue_cap_is_said_with_what_it_refused(tmp_path: Path) -> None:
    """A prefill pool's queue cap refused requests that the screen counted only as a bare
    reason ('refused: unlimited: 125 engine_max_num_queued_reqs'), with no cap said and no
    'engine queue caps:' line; the line now says the cap, the pool and what it refused, as
    the records count it."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--set", "workload.duration_s=10",
                              "--set", "workload.arrival.rate_rps=20", "--policy", "unlimited",
                              *BOTH, "--set", "disaggregation.prefill.engine.max_num_queued_reqs=5",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    rec = pd.read_parquet(out / "requests.parquet")
    refused = int((rec["reason"] == "engine_max_num_queued_reqs").sum())
    assert refused > 0
    screen = " ".join(res.stdout.split())
    assert (f"engine queue caps: unlimited: vllm prefill pool max_num_queued_reqs=5 (refused "
            f"{refused:,})") in screen
    assert "refused: unlimited" not in screen  # counted once, on the caps' line


def test_the_records_replicas_are_the_last_attempts(tmp_path: Path) -> None:
    """A request whose client retried after the prefill pool's queue cap refused it, and whose
    last attempt then waited past its deadline at the gateway, reached no replica on that
    attempt, yet its record carried the refusing replica as ``prefill_replica`` (0 of one
    replica, which reads as a default), beside ``decode_replica`` -1. The records now give the
    last attempt's replicas (records.DISAGG_RECORD_COLUMNS): -1 where it reached none; a
    request the queue cap refused carries the replica whose server refused it."""
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--set", "workload.duration_s=12",
                              "--set", "workload.arrival.rate_rps=150", *BOTH,
                              "--set", "disaggregation.prefill.engine.max_num_queued_reqs=8",
                              "--clients", "batch=openai-sdk,interactive=openai-sdk",
                              "--out", str(out)])
    assert res.exit_code == 0, res.output
    rec = pd.read_parquet(out / "requests.parquet").set_index("request_id")
    tries = pd.read_parquet(out / "attempts.parquet")
    capped = set(tries.loc[tries["reason"] == "engine_max_num_queued_reqs", "request_id"])
    expired = rec[rec["status"] == "expired"]
    # the case: expired at the gateway on the last attempt, an earlier one refused by a replica
    assert expired.index.isin(list(capped)).any()
    assert (expired["prefill_replica"] == -1).all() and (expired["decode_replica"] == -1).all()
    assert expired[["transfer_start_s", "transfer_end_s"]].isna().all().all()
    refused = rec[rec["reason"] == "engine_max_num_queued_reqs"]
    assert len(refused) and (refused["prefill_replica"] == 0).all()
    assert (refused["decode_replica"] == -1).all()
    done = rec[rec["status"] == "completed"]
    assert (done["prefill_replica"] == 0).all() and (done["decode_replica"] == 0).all()


@pytest.mark.parametrize(("sets", "where"), [
    (["disaggregation.prefill.num_replicas=1", "disaggregation.decode.num_replicas=2",
      'disaggregation.decode.gpu="H200"'],
     # the prefill pool on the run's GPU, which nobody gave, said so; the pools' knobs
     "on disaggregated pools (prefill: 1 replica of H100-SXM (assumed: the default scenario's "
     "H100-80GB), routed least_tokens, max_num_seqs 1,024, max_num_batched_tokens 8,192, prefix "
     "caching on (no prefixes to share); decode: 2 replicas of H200, routed least_tokens, "
     "max_num_seqs 1,024, max_num_batched_tokens 8,192, prefix caching off), engine vllm (vLLM "
     "0.32.0's defaults for unset knobs, max_model_len 131,072, chunked prefill on, bfloat16 "
     "weights, 16-bit KV, block_size 16, gpu_memory_utilization 0.92), KV capacity 1,792,128 "
     "tokens (the decode pool's), the gateway's budget; workload"),
    # a fleet of one GPU: its engine and KV capacity too, as simulate's line says them
    (["fleet.num_replicas=2"], "on 2 replicas of H100-SXM (assumed: the default scenario's "
     "H100-80GB), routed round_robin, one token budget over them, engine vllm (vLLM 0.32.0's "
     "defaults for unset knobs, max_num_seqs 1,024, max_num_batched_tokens 8,192, max_model_len "
     "131,072, chunked prefill on, prefix caching on (no prefixes to share), bfloat16 weights, "
     "16-bit KV, block_size 16, gpu_memory_utilization 0.92), KV capacity 876,384 tokens, the gateway's budget; "
     "workload"),
    (["fleet.autoscale.max_replicas=3", 'fleet.gpus=["H100-80GB","H200","H200"]'],
     "on 1 to 3 replicas (autoscaled) (1 of H100-SXM (given as H100-80GB); 2 of H200), routed "
     "round_robin, one "
     "token budget over them, engine vllm (vLLM 0.32.0's defaults for unset knobs, max_num_seqs "
     "1,024, max_num_batched_tokens 8,192, max_model_len 131,072, chunked prefill on, prefix "
     "caching on (no prefixes to share), bfloat16 weights, 16-bit KV, block_size 16, "
     "gpu_memory_utilization 0.92), KV capacity 2,230,320 tokens (at 3 replicas); workload"),
])
def test_a_studys_setting_names_the_deployment_its_per_gpu_figure_is_over(
        tmp_path: Path, sets: list[str], where: str) -> None:
    """capacity of a fleet or a disaggregated deployment printed 'model Llama-3.1-8B
    (assumed: ...); workload ...', naming no GPU and no deployment, beside a 'per GPU' column
    over GPUs it did not name (3 here: 1 + 2); it now names them as simulate's line does."""
    args = [a for kv in sets for a in ("--set", kv)]
    res = runner.invoke(app, ["capacity", "--set", "workload.duration_s=10", *args,
                              "--policies", "conservative", "-r", "1",
                              "--out", str(tmp_path / "cap")])
    assert res.exit_code == 0, res.output
    screen = " ".join((res.stderr + res.stdout).split())
    assert ("model Llama-3.1-8B (assumed: the default scenario's) " + where) in screen, screen


def test_the_first_tokens_pool_is_said() -> None:
    """Whose token is the client's first (disaggregation.first_token: TTFT counts the transfer
    or not) was in neither the summary nor the screen; both say it now."""
    res = runner.invoke(app, ["simulate", "--set", "workload.duration_s=2", *BOTH,
                              "--set", 'disaggregation.first_token="prefill"', "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["engine"]["disaggregation"]["first_token"] == "prefill"
    res = runner.invoke(app, ["simulate", "--set", "workload.duration_s=2", *BOTH,
                              "--set", 'disaggregation.first_token="prefill"'])
    assert "conservative: first tokens from the prefill replicas (DistServe's), " in " ".join(
        res.stdout.split())


def test_a_sweep_over_one_pools_replicas(tmp_path: Path) -> None:
    """sweep --grid disaggregation.decode.num_replicas=1,2 with the prefill pool --set: the
    base scenario was refused as having no decode pool, and a --set of it as unused, so the
    decode pool alone could not be swept; it runs now, each point with its decode pool (the
    runs' decode replicas, from the records' column, are the axis's values), and two pools'
    axes are told apart in the table's header (both read 'num_replicas')."""
    res = runner.invoke(app, ["sweep", "--set", "workload.duration_s=5",
                              "--set", "disaggregation.prefill.num_replicas=1",
                              "--grid", "disaggregation.decode.num_replicas=1,2",
                              "--policies", "conservative", "-r", "1",
                              "--out", str(tmp_path / "sw"), "--no-plot"])
    assert res.exit_code == 0, res.output
    table = pd.read_parquet(tmp_path / "sw" / "sweep.parquet")
    # each run's KV capacity is its decode pool's: 438,192 tokens a replica (an H100's)
    assert sorted(zip(table["disaggregation.decode.num_replicas"], table["kv_capacity_tokens"],
                      strict=True)) == [(1, 438_192), (2, 876_384)]
    res = runner.invoke(app, ["sweep", "--set", "workload.duration_s=5",
                              "--grid", "disaggregation.decode.num_replicas=1,2",
                              "--grid", "disaggregation.prefill.num_replicas=1,2",
                              "--policies", "conservative", "-r", "1",
                              "--out", str(tmp_path / "sw2"), "--no-plot"])
    assert res.exit_code == 0, res.output
    header = next(ln for ln in res.stdout.splitlines() if ln.startswith("policy"))
    assert header.split()[1:3] == ["decode.num_replicas", "prefill.num_replicas"], header
