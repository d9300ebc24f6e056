"""Client models: retries, backoff, Retry-After and client timeouts, in the simulator.

The known answers use one server whose every step takes exactly 1 s (a linear cost model with
only an intercept) and a KV budget that holds one request at a time (2 blocks of 16 tokens; a
request of 16 prompt + 4 output tokens reserves 32). Request A (t = 0) prefills in the step
[0, 1] (first token at 1) and decodes its other three tokens at 2, 3 and 4: it finishes at 4.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.perf.cost_model import LinearCostModel
from kvbudget.policies import Gateway, GatewayConfig, Overloaded, Reject, TierConfig, make_policy
from kvbudget.policies.clients import (
    BATCH_PIPELINE,
    CLIENT_PRESETS,
    OPENAI_SDK,
    ClientModel,
    client_model,
    client_models,
    parse_clients,
)
from kvbudget.policies.request import Request
from kvbudget.results.run_result import RunResult, read_run
from kvbudget.simulator.engine_config import EngineConfig
from kvbudget.simulator.run import SimConfig, simulate
from kvbudget.workloads import from_columns
from tests.model.test_properties import FLEET_GRID, _grid_fleet_case

STEP = LinearCostModel(1.0, 0.0, 0.0, 0.0)
INTERACTIVE = TierConfig("interactive", priority=0, queue_timeout_s=10.0, ttft_s=2.0, tpot_s=1.0)
BATCH = TierConfig("batch", priority=1, queue_timeout_s=600.0, retryable_on_overload=True,
                   ttft_s=60.0, tpot_s=1.0)
REJECT = {"batch_on_overload": "reject"}


class _Fixed:
    """A uniform source that always draws ``u``."""

    def __init__(self, u: float) -> None:
        self.u = u

    def random(self) -> float:
        return self.u


def _one_at_a_time(
    arrivals: list[float],
    tiers: list[str],
    clients: tuple[tuple[str, ClientModel], ...],
    *,
    params: dict[str, object] | None = None,
    timeout_s: list[float] | None = None,
    seed: int = 0,
) -> object:
    w = from_columns(arrivals, [16] * len(arrivals), [4] * len(arrivals), tiers=tiers,
                     timeout_s=timeout_s)
    cfg = SimConfig(engine=EngineConfig(num_gpu_blocks=2, block_size=16), cost_model=STEP,
                    tiers=(INTERACTIVE, BATCH), clients=clients, seed=seed)
    return simulate(w, make_policy("conservative", params if params is not None else REJECT), cfg)


def _constant(delay: float, **kw: object) -> ClientModel:
    return client_model({"preset": "batch-pipeline", "backoff": "constant",
                         "initial_backoff_s": delay, "jitter": "none", "timeout_s": None, **kw})


# --- the client model alone ----------------------------------------------------------------------
def test_openai_sdk_preset_is_the_sdks_documented_defaults() -> None:
    # openai-python _constants.py: DEFAULT_MAX_RETRIES 2, INITIAL_RETRY_DELAY 0.5,
    # MAX_RETRY_DELAY 8.0, MAX_RETRY_AFTER_DELAY 120, DEFAULT_TIMEOUT 600
    assert OPENAI_SDK.max_attempts == 3
    assert OPENAI_SDK.timeout_s == 600.0
    assert OPENAI_SDK.max_retry_after_s == 120.0
    # min(0.5 * 2**r, 8) * (1 - 0.25 * u): u = 0 gives the bare backoff, u = 1 three quarters
    bare = [OPENAI_SDK.backoff_s(r, _Fixed(0.0)) for r in range(1, 7)]
    assert bare == [0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    assert OPENAI_SDK.backoff_s(2, _Fixed(1.0)) == 0.75
    assert "too_large" not in OPENAI_SDK.retry_on
    assert {"overloaded_retryable", "overloaded", "backend_error", "timeout"} <= set(
        OPENAI_SDK.retry_on)


def test_jitter_kinds_bound_the_wait() -> None:
    full = client_model({"preset": "batch-pipeline", "jitter": "full"})
    equal = client_model({"preset": "batch-pipeline", "jitter": "equal"})
    # batch-pipeline: 1 s doubled per retry, capped at 60 s
    assert full.backoff_s(3, _Fixed(0.25)) == 1.0
    assert equal.backoff_s(3, _Fixed(0.0)) == 2.0 and equal.backoff_s(3, _Fixed(1.0)) == 4.0
    assert full.backoff_s(20, _Fixed(1.0)) == 60.0


def test_next_attempt_follows_answer_attempts_retry_after_and_budget() -> None:
    rng = _Fixed(0.0)
    kw = {"now_s": 10.0, "first_s": 0.0, "retry_after_s": None, "rng": rng}
    assert OPENAI_SDK.next_attempt_s("too_large", attempt=1, **kw) is None  # type: ignore[arg-type]
    assert OPENAI_SDK.next_attempt_s("overloaded", attempt=1, **kw) == 10.5  # type: ignore[arg-type]
    assert OPENAI_SDK.next_attempt_s("overloaded", attempt=3, **kw) is None  # type: ignore[arg-type]
    # a Retry-After is slept as it stands (no jitter); beyond 120 s the SDK does not retry
    kw["retry_after_s"] = 7.0
    assert OPENAI_SDK.next_attempt_s("overloaded_retryable", attempt=1, **kw) == 17.0  # type: ignore[arg-type]
    kw["retry_after_s"] = 121.0
    assert OPENAI_SDK.next_attempt_s("overloaded_retryable", attempt=1, **kw) is None  # type: ignore[arg-type]
    # batch-pipeline stops when the next attempt would start after its hour
    late = {"now_s": 3599.5, "first_s": 0.0, "retry_after_s": None, "rng": _Fixed(1.0)}
    assert BATCH_PIPELINE.next_attempt_s("timeout", attempt=5, **late) is None  # type: ignore[arg-type]
    assert BATCH_PIPELINE.next_attempt_s("overloaded", attempt=1, **late) is None  # type: ignore[arg-type]


def test_parse_clients_and_tables_name_what_is_wrong() -> None:
    assert parse_clients("batch=batch-pipeline, interactive=impatient-user") == {
        "batch": "batch-pipeline", "interactive": "impatient-user"}
    for bad, word in (("batch", "tier=preset"), ("batch=nope", "nope"),
                      ("batch=no-retry,batch=no-retry", "twice")):
        with pytest.raises(ValueError, match=word):
            parse_clients(bad)
    with pytest.raises(ValueError, match=r"clients\.batch\.max_atempts"):
        client_models({"batch": {"preset": "openai-sdk", "max_atempts": 2}})
    with pytest.raises(ValueError, match=r"clients\.bulk: no such tier"):
        client_models({"bulk": "no-retry"}, {"batch": BATCH})
    with pytest.raises(ValueError, match="needs max_attempts"):
        ClientModel(retry_on=("timeout",), max_attempts=None)
    assert set(CLIENT_PRESETS) == {"no-retry", "openai-sdk", "batch-pipeline", "impatient-user"}


# --- known answers --------------------------------------------------------------------------------
def test_known_answer_constant_backoff_retries_until_capacity_frees() -> None:
    # B (t = 0.5) is refused (A holds the budget until 4) at 0.5, 2.0 and 3.5, and admitted
    # at 5.0: its first token at 6, its last at 9; four attempts; TTFT and E2E from 0.5
    r = _one_at_a_time([0.0, 0.5], ["batch", "batch"], (("batch", _constant(1.5)),))
    rec = r.records.set_index("request_id")  # type: ignore[attr-defined]
    assert rec.loc[1, "status"] == "completed"
    assert rec.loc[1, "num_attempts"] == 4
    assert (rec.loc[1, "first_token_s"], rec.loc[1, "finished_s"]) == (6.0, 9.0)
    assert (rec.loc[1, "ttft_s"], rec.loc[1, "e2e_s"]) == (5.5, 8.5)
    att = r.attempts  # type: ignore[attr-defined]
    b = att[att.request_id == 1]
    assert b.sent_s.tolist() == [0.5, 2.0, 3.5, 5.0]
    assert b.answer.tolist() == ["overloaded_retryable"] * 3 + ["completed"]
    assert b.next_attempt_s.tolist()[:3] == [2.0, 3.5, 5.0]
    s = r.summary  # type: ignore[attr-defined]
    assert s["tiers"]["batch"]["num_attempts"] == 5
    assert s["tiers"]["batch"]["retry_amplification"] == 2.5
    assert s["tiers"]["batch"]["eventual_completion"] == 1.0
    assert s["tiers"]["batch"]["first_attempt_completion"] == 0.5
    assert s["tiers"]["batch"]["retried_completion_s"]["mean"] == 8.5


def test_known_answer_exponential_backoff_and_max_attempts() -> None:
    # waits 1, 2, 4: attempts at 0.5, 1.5, 3.5, 7.5; admitted at 7.5, done at 11.5
    expo = client_model({"preset": "batch-pipeline", "initial_backoff_s": 1.0, "jitter": "none",
                         "timeout_s": None})
    r = _one_at_a_time([0.0, 0.5], ["batch", "batch"], (("batch", expo),))
    b = r.attempts[r.attempts.request_id == 1]  # type: ignore[attr-defined]
    assert b.sent_s.tolist() == [0.5, 1.5, 3.5, 7.5]
    assert r.records.finished_s[1] == 11.5  # type: ignore[attr-defined]
    # three attempts at most: the third refusal (3.5) is final
    r = _one_at_a_time([0.0, 0.5], ["batch", "batch"],
                       (("batch", _constant(1.5, max_attempts=3, budget_s=None)),))
    rec = r.records  # type: ignore[attr-defined]
    assert rec.status[1] == "rejected_overloaded" and rec.num_attempts[1] == 3
    assert math.isnan(r.attempts.next_attempt_s.iloc[-1])  # type: ignore[attr-defined]


def test_known_answer_retry_after_from_the_leases_expected_ends() -> None:
    # the policy answers B at 0.5 with the end of A's lease: 4 output tokens to go at the
    # tier's 1 s per token = 4 s. B comes back at 4.5 (A finished at 4): done at 8.5
    r = _one_at_a_time([0.0, 0.5], ["batch", "batch"], (("batch", _constant(1.5)),),
                       params={**REJECT, "retry_after": "lease_ends"})
    b = r.attempts[r.attempts.request_id == 1]  # type: ignore[attr-defined]
    assert b.retry_after_s.tolist()[0] == 4.0
    assert b.sent_s.tolist() == [0.5, 4.5]
    assert r.records.finished_s[1] == 8.5  # type: ignore[attr-defined]
    assert r.summary["attempts"]["num_retry_after"] == 1  # type: ignore[attr-defined]


def test_gateway_refusal_carries_the_policys_retry_after() -> None:
    policy = make_policy("conservative", {**REJECT, "retry_after": "lease_ends"})
    gw = Gateway(GatewayConfig(capacity_tokens=32, tiers=(INTERACTIVE, BATCH)), policy)
    gw.arrive(Request(0, "batch", 0.0, 16, 16), 0.0)
    (reject,) = gw.arrive(Request(1, "batch", 1.0, 16, 16), 1.0)
    assert isinstance(reject, Reject) and isinstance(reject.error, Overloaded)
    assert reject.error.retryable and reject.error.retry_after_s == 16.0
    plain = Gateway(GatewayConfig(capacity_tokens=32, tiers=(INTERACTIVE, BATCH)),
                    make_policy("conservative", REJECT))
    plain.arrive(Request(0, "batch", 0.0, 16, 16), 0.0)
    (reject,) = plain.arrive(Request(1, "batch", 1.0, 16, 16), 1.0)
    assert isinstance(reject.error, Overloaded) and reject.error.retry_after_s is None


def test_client_timeout_aborts_the_request_and_frees_its_kv() -> None:
    # A's own timeout (trace column) is 2.5 s: it disconnects mid-decode; the gateway admits
    # B at once and the engine aborts A at the end of the step in progress (3), so B
    # prefills in [3, 4] and finishes at 7. B keeps its tier's 30 s (impatient-user).
    r = _one_at_a_time([0.0, 0.5], ["interactive"] * 2,
                       (("interactive", CLIENT_PRESETS["impatient-user"]),),
                       params={}, timeout_s=[2.5, float("nan")])
    rec = r.records  # type: ignore[attr-defined]
    assert rec.status.tolist() == ["client_timeout", "completed"]
    assert rec.output_tokens[0] == 2  # tokens at 1 and 2; the step ending at 3 was aborted
    assert (rec.admitted_s[1], rec.first_token_s[1], rec.finished_s[1]) == (2.5, 4.0, 7.0)
    assert r.summary["tiers"]["interactive"]["client_timeout"] == 1  # type: ignore[attr-defined]
    assert r.attempts.answer.tolist() == ["timeout", "completed"]  # type: ignore[attr-defined]


def test_client_timeout_while_waiting_at_the_gateway() -> None:
    # impatient at 2 s: B waits behind A (which holds the budget until 4) and leaves at 2.5
    quick = client_model({"preset": "impatient-user", "timeout_s": 2.0})
    r = _one_at_a_time([0.0, 0.5], ["batch", "interactive"], (("interactive", quick),),
                       params={})
    rec = r.records  # type: ignore[attr-defined]
    assert rec.status.tolist() == ["completed", "client_timeout"]
    assert math.isnan(rec.admitted_s[1])
    assert r.attempts.ended_s.tolist() == [4.0, 2.5]  # type: ignore[attr-defined]


def test_retry_after_a_timeout_reports_the_final_attempts_first_token() -> None:
    # batch client with a 2.5 s timeout that retries after 0.5 s: A times out at 2.5 (it
    # had its first token at 1), retries at 3.0, and the retry runs alone: first token 4, end 7
    c = _constant(0.5, timeout_s=2.5)
    w_r = _one_at_a_time([0.0], ["batch"], (("batch", c),), params={})
    rec = w_r.records  # type: ignore[attr-defined]
    assert rec.status[0] == "client_timeout"  # every attempt of 4 steps outlives 2.5 s
    c = _constant(0.5, timeout_s=4.5)
    r = _one_at_a_time([0.0, 0.0], ["batch", "batch"], (("batch", c),), params={})
    rec = r.records  # type: ignore[attr-defined]
    # request 1 waits behind 0 (admitted at 4), times out at 4.5 mid-prefill... its retry
    # at 5.0 starts afresh: prefill [5, 6], last token 9
    assert rec.status.tolist() == ["completed", "completed"]
    assert rec.num_attempts.tolist() == [1, 2]
    assert (rec.first_token_s[1], rec.finished_s[1]) == (6.0, 9.0)


# --- seeds and the default -----------------------------------------------------------------------
def _jittered(seed: int) -> object:
    arrivals = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    return _one_at_a_time(arrivals, ["batch"] * 6, (("batch", BATCH_PIPELINE),), seed=seed)


def test_same_seed_same_records_and_attempts() -> None:
    a, b, c = _jittered(3), _jittered(3), _jittered(4)
    assert a.records.equals(b.records)  # type: ignore[attr-defined]
    assert a.attempts.equals(b.attempts)  # type: ignore[attr-defined]
    assert not a.attempts.sent_s.equals(c.attempts.sent_s)  # type: ignore[attr-defined]


def test_no_client_models_leave_the_records_and_summary_as_they_were() -> None:
    r = _one_at_a_time([0.0, 0.5], ["batch", "batch"], ())
    assert r.attempts is None  # type: ignore[attr-defined]
    assert "num_attempts" not in r.records.columns  # type: ignore[attr-defined]
    assert "client_timeout" not in r.summary["overall"]  # type: ignore[attr-defined]
    assert "retry_amplification" not in r.summary["tiers"]["batch"]  # type: ignore[attr-defined]
    assert r.records.status.tolist() == ["completed", "rejected_overloaded"]  # type: ignore[attr-defined]


# --- command line and files ------------------------------------------------------------------------
def test_cli_clients_flag_writes_attempts(tmp_path: Path) -> None:
    runner = CliRunner()
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        json.dumps({"arrival_s": 0.01 * i, "prompt_tokens": 400, "output_tokens": 50,
                    "max_output_tokens": 50,
                    "tier": "batch" if i % 2 else "interactive"}) + "\n" for i in range(60)))
    out = tmp_path / "run"
    res = runner.invoke(app, ["simulate", "--trace", str(trace), "--num-gpu-blocks", "64",
                              "--set", "policy_params.batch_on_overload=\"reject\"",
                              "--clients", "batch=batch-pipeline,interactive=impatient-user",
                              "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    run = read_run(out)
    assert run.attempt_columns is not None
    assert "num_attempts" in run.record_columns
    s = run.summary
    assert s["tiers"]["batch"]["num_attempts"] > s["tiers"]["batch"]["offered"]
    assert s["clients"]["by_tier"]["batch"]["name"] == "batch-pipeline"
    assert len(run.attempt_columns["attempt"]) == s["overall"]["num_attempts"]
    bad = runner.invoke(app, ["simulate", "--trace", str(trace), "--clients", "batch=forever"])
    assert bad.exit_code == 2 and "forever" in bad.output
    # the retries table says what its columns are: "done" there is a share, not a count as in
    # the table above it, and the goodput is over the arrival window
    res = runner.invoke(app, ["simulate", "--trace", str(trace), "--num-gpu-blocks", "64",
                              "--set", "policy_params.batch_on_overload=\"reject\"",
                              "--clients", "batch=batch-pipeline"])
    assert res.exit_code == 0, res.output
    said = " ".join(res.stdout.split())
    assert "done share: the share of offered requests completed whatever the attempts" in said
    assert ("1st-try goodput: requests completed within their tier's SLO on their first "
            "attempt, per second of the arrival window") in said


def test_trace_timeout_column_is_read(tmp_path: Path) -> None:
    from kvbudget.workloads.traces import TraceOptions, load_trace

    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"arrival_s": 0, "prompt_tokens": 10, "output_tokens": 5, "timeout_s": 3.5}\n'
        '{"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 5, "timeout_s": null}\n')
    w = load_trace(trace, TraceOptions()).workload
    assert w.timeout_s is not None
    assert w.timeout_s[0] == 3.5 and np.isnan(w.timeout_s[1])


@pytest.mark.parametrize("command", ["simulate", "compare", "sweep", "tune", "capacity",
                                     "replay"])
def test_every_study_command_takes_clients(command: str) -> None:
    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0 and "--clients" in res.output


# --- under overload -----------------------------------------------------------------------------
def _overloaded(client: ClientModel, **params: str) -> object:
    """The default scenario's traffic at about 1.3x what the server sustains (4 req/s against
    ~3.05 measured by benchmarks/bench_clients.py), batch refused retryably, for 200 s; on the
    engine defaults that figure was measured with (kvbudget 0.1's: the vllm-v1 step model
    sustains about twice the rate)."""
    from dataclasses import replace

    from kvbudget.simulator.scenario import default_scenario

    scn = default_scenario(["workload.arrival.rate_rps=4.0", "workload.duration_s=200",
                            'engine_defaults="kvbudget-0.1"',
                            'policy_params.batch_on_overload="reject"',
                            *(f'policy_params.{k}="{v}"' for k, v in params.items())])
    config = replace(scn.sim_config(), clients=(("batch", client),))
    return simulate(scn.workload(), scn.make_policy(), config)


def test_under_overload_retries_complete_batch_and_storms_multiply_attempts() -> None:
    plain = _overloaded(CLIENT_PRESETS["no-retry"]).summary  # type: ignore[attr-defined]
    pipeline = _overloaded(BATCH_PIPELINE).summary  # type: ignore[attr-defined]
    storm = _overloaded(_constant(0.1, timeout_s=300.0)).summary  # type: ignore[attr-defined]
    b0, b1, b2 = (s["tiers"]["batch"] for s in (plain, pipeline, storm))
    assert b0["rejected_overloaded"] > 0 and b0["eventual_completion"] < 0.95
    assert b0["retry_amplification"] == 1.0  # no-retry: what the run was without clients
    assert b1["eventual_completion"] > b0["eventual_completion"]
    assert b2["eventual_completion"] >= b1["eventual_completion"]
    # a storm sends an order of magnitude more attempts for the same completions
    assert b2["retry_amplification"] > 10 * b1["retry_amplification"]
    # retried completions count in goodput but not in first-attempt goodput
    assert pipeline["overall"]["goodput_first_attempt_rps"] < pipeline["overall"]["goodput_rps"]
    # the interactive tier never retries: its offered requests are the same in every run
    assert plain["tiers"]["interactive"]["num_attempts"] == \
        pipeline["tiers"]["interactive"]["offered"]


def test_client_metrics_reach_studies_regress_and_report(tmp_path: Path) -> None:
    from kvbudget.analysis.report import build_report
    from kvbudget.studies.regress import default_metrics, get_metric, infer_worse
    from kvbudget.studies.sweep import flatten_summary
    from kvbudget.studies.tune import Constraint

    r = _one_at_a_time([0.0, 0.5], ["batch", "batch"], (("batch", _constant(1.5)),))
    s = r.summary  # type: ignore[attr-defined]
    row = flatten_summary(s)
    assert row["batch_eventual_completion"] == 1.0
    assert row["batch_time_to_eventual_completion_p99_s"] > 8.0
    c = Constraint.parse("tiers.batch.eventual_completion>=0.99")
    assert c.metric == "batch_eventual_completion"
    assert "tiers.batch.eventual_completion" in default_metrics(s)
    assert get_metric(s, "tiers.batch.retry_amplification") == 2.5
    assert infer_worse("tiers.batch.eventual_completion") == "lower"
    assert infer_worse("tiers.batch.retry_amplification") == "higher"
    r.write(tmp_path / "run")  # type: ignore[attr-defined]
    report = build_report([tmp_path / "run"], tmp_path / "report", num_resamples=20)
    text = report.html_path.read_text()
    assert "Clients and retries" in text and "attempts/request" in text
    # the retries finish long after the last arrival: the goodput's span is said
    assert s["drain_s"] > 10 * s["offered_window_s"]
    assert ("goodput with and without the completions retries rescued: requests completed "
            "within their tier's SLO per second of the arrival window, first to last arrival"
            ) in " ".join(html.unescape(text).split())


def test_client_events_give_the_same_run_stepping_or_skipping_ahead() -> None:
    """Timeouts that abort requests mid-decode and retries arriving during decode runs: the
    engine's skip-ahead must give exactly what stepping one step at a time gives."""
    from dataclasses import replace

    from kvbudget.simulator.scenario import default_scenario

    quick = client_model({"preset": "impatient-user", "timeout_s": 4.0})
    results = []
    for skip in (True, False):
        scn = default_scenario(["workload.arrival.rate_rps=5.0", "workload.duration_s=60",
                                'policy_params.batch_on_overload="reject"',
                                f"engine.skip_ahead={str(skip).lower()}"])
        config = replace(scn.sim_config(), clients=(("batch", BATCH_PIPELINE),
                                                    ("interactive", quick)))
        results.append(simulate(scn.workload(), scn.make_policy(), config))
    a, b = results
    assert a.summary["tiers"]["interactive"]["client_timeout"] > 0
    assert a.summary["tiers"]["batch"]["retry_amplification"] > 1.0
    assert a.records.equals(b.records)
    assert a.attempts.equals(b.attempts)  # type: ignore[union-attr]


@pytest.mark.parametrize(("seed", "router", "budget", "blocks", "step_s", "name", "timeout_s",
                          "backoff_s", "policy"), [
    (1, "least_tokens", "global", 20, 0.25, "tgi", 2.0, 0.25, "preemptive"),
    (4, "least_tokens", "per_replica", 20, 0.25, "vllm-swap", 2.0, 0.5, "preemptive"),
    (58, "least_tokens", "per_replica", 20, 0.25, "vllm", 2.0, 0.5, "overcommit"),
])
def test_a_clients_timer_armed_during_a_replicas_run_keeps_stepping_order(
        seed: int, router: str, budget: str, blocks: int, step_s: float, name: str,
        timeout_s: float, backoff_s: float, policy: str) -> None:
    """The fleet grid (step ends on a grid, other replicas' step ends and arrivals falling on
    them) with clients that time out and retry on that grid: a client's timeout or retry armed
    while a replica's decode run is in flight, due at the run's last step end, must run before
    that step's end as in stepping (the clients' alarm is URGENT, ``simulator/alarm.py``). It
    used to go untold to the fleet (then told through ``Alarm.on_arm``, since removed), and skip-ahead then
    differed from stepping in 6 of 60 such cases."""
    from dataclasses import replace

    from tests.conftest import assert_skip_ahead_matches_stepping

    w, cfg = _grid_fleet_case(seed, router, budget, blocks, step_s, name)
    client = ClientModel(timeout_s=timeout_s, max_attempts=3, retry_on=("overloaded", "timeout"),
                         backoff="constant", initial_backoff_s=backoff_s,
                         honor_retry_after=False)
    cfg = replace(cfg, clients=(("interactive", client), ("batch", client)))
    a, _ = assert_skip_ahead_matches_stepping(w, cfg, policy)
    assert a.attempts is not None and (a.attempts["answer"] == "timeout").any()


def _client_grid_runs(seed: int, router: str, budget: str, blocks: int, step_s: float, name: str,
                      timeout_s: float, backoff_s: float, policy: str, fleet: bool,
                      per_prefill_seq_s: float = 0.0) -> tuple[RunResult, RunResult]:
    """The fleet grid (``test_properties._grid_fleet_case``: arrivals, steps and queue timeouts
    on one grid) with every tier's client timing out after ``timeout_s`` and retrying after
    ``backoff_s`` (on a refusal or a timeout, 3 attempts), on its two replicas or (``fleet``
    False) one engine (``per_prefill_seq_s``: steps longer with prefills); stepping and
    skip-ahead: records, timeline, gaps and attempts identical. Returns both runs."""
    from dataclasses import replace

    from tests.conftest import assert_token_gaps_equal

    w, cfg = _grid_fleet_case(seed, router, budget, blocks, step_s, name, per_prefill_seq_s)
    client = ClientModel(timeout_s=timeout_s, max_attempts=3, retry_on=("overloaded", "timeout"),
                         backoff="constant", initial_backoff_s=backoff_s,
                         honor_retry_after=False)
    cfg = replace(cfg, clients=(("interactive", client), ("batch", client)),
                  fleet=cfg.fleet if fleet else None)
    a, b = (simulate(w, make_policy(policy), replace(cfg, engine=replace(cfg.engine, skip_ahead=s)))
            for s in (False, True))
    assert a.records.equals(b.records)
    assert a.timeline.equals(b.timeline)
    assert_token_gaps_equal(a, b)
    assert a.attempts is not None and a.attempts.equals(b.attempts)
    return a, b


@pytest.mark.parametrize(("seed", "router", "budget", "blocks", "step_s", "name", "timeout_s",
                          "backoff_s", "policy", "fleet"), [
    # an engine (the minimal case): at 14.75 three clients time out during a decode run
    # planned (at 14.375, behind a refused head) past the arrival at 14.5 to the sample at 15;
    # its last step starts at 14.75. The clients' timeout, armed at 14.5, ran after that
    # step's start (an event made when the run started) and the aborts waited a step (rows 28
    # and 29 got their first tokens a step late); stepping made that step's start at 14.625,
    # after the timeout. Now client events run before every step ending at their instant.
    (56, "least_tokens", "global", 40, 0.125, "vllm", 2.0, 0.0, "unlimited", False),
    # an engine: an arrival made during a run (at 5.25, due at 5.5, the run's last step start,
    # 5.0 -> 5.75) ran after the run's event at 5.5 and, from then on, after each step end it
    # tied: the sample at 6 counted two requests fewer waiting. Arrivals now run first too.
    (62, "round_robin", "per_replica", 40, 0.25, "tgi", 2.0, 0.25, "unlimited", False),
    (73, "prefix_affinity", "per_replica", 40, 0.25, "sglang", 2.0, 0.0, "overcommit", False),
    (73, "prefix_affinity", "per_replica", 40, 0.25, "sglang", 2.0, 0.0, "overcommit", True),
    (43, "round_robin", "per_replica", 60, 0.125, "tgi", 2.0, 0.25, "unlimited", True),
    (84, "least_tokens", "global", 40, 0.25, "tgi", 1.0, 0.0, "overcommit", True),
    # a fleet, global budget: a client's retry at once (backoff 0) came between two
    # replicas' tied step ends, and a revocation on the replica waiting for its turn was
    # applied before its step was committed (an AssertionError, skip-ahead only)
    (9, "prefix_affinity", "global", 20, 0.25, "sglang", 2.0, 0.0, "unlimited", True),
    # a fleet, per-replica budgets, TensorRT-LLM (async scheduling): request 49, re-admitted
    # at 16.25 during a run planned past it (behind a refused head, FCFS), was still held as
    # not yet schedulable when the gateway revoked it at 16.75, two steps after it became
    # schedulable: its abort freed it at once where stepping's waited for the step's end, and
    # the waiting queue's order differed (found once arrivals run before tied step ends)
    (73, "prefix_affinity", "per_replica", 60, 0.1, "trtllm", 2.0, 0.0, "preemptive", True),
])
def test_client_events_tied_with_step_ends_give_stepping_s_run(
        seed: int, router: str, budget: str, blocks: int, step_s: float, name: str,
        timeout_s: float, backoff_s: float, policy: str, fleet: bool) -> None:
    """Cases of the client grid (60 fleet-grid cases with timeouts and retries, on a fleet
    and on one engine) where skip-ahead differed from stepping; all with events of the
    outside world (clients' timeouts and retries, arrivals) due at an instant where a step
    ends. The run driver's events (arrivals, the gateway's and the clients' timers) now run
    before every step ending at their instant (SimPy's URGENT priority: ``alarm.UrgentTimeout``),
    whenever they were made, stepping or skipping ahead."""
    a, _ = _client_grid_runs(seed, router, budget, blocks, step_s, name, timeout_s, backoff_s,
                             policy, fleet)
    assert a.attempts is not None and (a.attempts["answer"] == "timeout").any()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(*FLEET_GRID, st.sampled_from([1.0, 2.0, 3.0]), st.sampled_from([0.0, 0.25, 0.5]))
def test_skip_ahead_matches_stepping_on_the_fleet_grid_with_a_global_budget_and_clients(
    seed: int, router: str, blocks: int, step_s: float, policy: str, name: str, prefill: int,
    timeout_s: float, backoff_s: float,
) -> None:
    """The fleet grid with one gateway for both replicas and few blocks (20 to 60 of 16
    tokens: preemptions, revocations, a queue), steps of one length or longer with prefills,
    and clients that time out and retry on that grid (a retry at once: ``backoff_s`` 0):
    skip-ahead byte-identical to stepping (records, timeline, gaps, attempts)."""
    _client_grid_runs(seed, router, "global", blocks, step_s, name, timeout_s, backoff_s,
                      policy, True, prefill * step_s)
