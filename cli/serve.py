"""``kvbudget serve``: the tuned policy as an admission gateway in front of OpenAI-compatible
servers (docs/serve.md)."""

import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer

from kvbudget.cli.errors import CliError, user_errors
from kvbudget.cli.help_text import POLICY_NAMES
from kvbudget.live.serve_reload import Reloaded
from kvbudget.live.serve_request import KeyTable
from kvbudget.live.serve_tokenizer import LocalTokenizer
from kvbudget.policies import DEFAULT_TIERS, make_policy
from kvbudget.simulator.scenario import load_scenario
from kvbudget.workloads.fetch import is_loopback_host

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.live.gateway_server import CountTokens
    from kvbudget.live.serve_run import ServeSettings
    from kvbudget.policies import BasePolicy
    from kvbudget.simulator.scenario import Scenario

UpstreamOpt = Annotated[list[str], typer.Option(
    "--upstream", help="An upstream server root (OpenAI-compatible: vLLM, SGLang, TGI), e.g. "
    "http://127.0.0.1:8000; repeat for several.")]
ScenarioOpt = Annotated[Path | None, typer.Option(
    "--scenario", help="A scenario file (docs/scenarios.md): its tiers, front door, lease TTL, "
    "policy and gateway_capacity_tokens. Default: the default tiers and conservative.")]
PolicyOpt = Annotated[str | None, typer.Option(
    "--policy", help=f"The admission policy, over the scenario's: {POLICY_NAMES}.")]
HostOpt = Annotated[str, typer.Option("--host", help="The address to listen on.")]
PortOpt = Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="The port to listen on (0: a free one, printed).")]
KeysOpt = Annotated[Path | None, typer.Option(
    "--keys", help="The key file: '<sha256 hex of an API key> <tier>' per line.")]
TrustOpt = Annotated[bool, typer.Option(
    "--trust-tier-header", help="Take the tier from the x-kvbudget-tier header, a request "
    "without one in the first tier (interactive with the default tiers); the default on a "
    "loopback address without --keys, elsewhere only behind a proxy that sets it.")]
CapacityOpt = Annotated[int | None, typer.Option(
    "--capacity-tokens", min=1, help="The token budget. Default: the scenario's "
    "gateway_capacity_tokens, else the upstreams' KV capacity from their /metrics.")]
PeriodOpt = Annotated[float, typer.Option(
    "--capacity-period-s", min=0.1, help="With the capacity from /metrics: read it again "
    "every this many seconds.")]
CountOpt = Annotated[str, typer.Option(
    "--count-tokens", help="How prompts are counted before admission: 'upstream' (its "
    "/tokenize, exact), 'local' (the model's tokenizer loaded here from --tokenizer: exact "
    "when it is the served model's, no round trip) or 'bytes' (one token a UTF-8 byte plus a "
    "margin: never fewer than the tokenizer's, about 4x more for English text).")]
TokenizerOpt = Annotated[str | None, typer.Option(
    "--tokenizer", help="With --count-tokens local: the served model's tokenizer, a directory "
    "or a model name already in the local Hugging Face cache (never downloaded; needs "
    "transformers).")]
StatusOpt = Annotated[int, typer.Option(
    "--overload-status", help="The answer to an overloaded request: 429 or 503.")]
RetryOpt = Annotated[float, typer.Option(
    "--retry-after-s", min=0.001, help="Retry-After of a refusal when the policy gives none.")]
MaxTokensOpt = Annotated[int, typer.Option(
    "--default-max-tokens", min=1, help="max_tokens of a request that does not say.")]
RouterOpt = Annotated[str, typer.Option(
    "--router", help="How requests go to upstreams: round_robin, least_tokens (the fewest "
    "reserved tokens in flight) or prefix_affinity (the one that took the prompt's longest "
    "leading blocks last, unless imbalanced).")]
OutOpt = Annotated[Path | None, typer.Option(
    "--out", help="Write run directories (requests.parquet, timeline.parquet, summary.json) "
    "under this directory: run-0001, run-0002, ...")]
RotateOpt = Annotated[int, typer.Option(
    "--rotate-requests", min=1, help="Requests per run directory.")]
DrainOpt = Annotated[float, typer.Option(
    "--drain-timeout-s", min=1.0, help="On SIGTERM: how long requests in flight may finish.")]
BodyOpt = Annotated[int, typer.Option("--max-body-bytes", min=1, help="The largest body taken.")]
UpKeyOpt = Annotated[str | None, typer.Option(
    "--upstream-api-key", envvar="KVBUDGET_UPSTREAM_API_KEY",
    help="Bearer token the upstreams want (never passed to clients).")]


def _policy_maker(scenario: Path | None, policy: str | None
                  ) -> "tuple[Scenario | None, Callable[[], BasePolicy]]":
    """The scenario (or ``None``) and a function making the policy from the file as it is now
    (a reload reads it again)."""
    if scenario is None:
        name = policy or "conservative"
        try:
            make_policy(name)
        except ValueError as exc:
            raise CliError(f"--policy: {exc}") from None
        return None, lambda: make_policy(name)

    def fresh() -> "BasePolicy":
        scn = load_scenario(scenario)
        return scn.make_policy(policy)

    loaded = load_scenario(scenario)
    try:  # refused before the upstreams are asked anything
        loaded.make_policy(policy)
    except ValueError as exc:
        raise CliError(f"--policy: {exc}" if policy is not None else str(exc)) from None
    return loaded, fresh


def _reloader(scenario: Path, policy: str | None, sets_capacity: bool
              ) -> "Callable[[], Reloaded]":
    """A function reading the scenario file again: its policy (``--policy`` over it), tiers,
    front door, lease TTL, and, when ``sets_capacity`` (the running budget is the file's, not
    ``--capacity-tokens``'s nor the upstreams' ``/metrics``'), its
    ``gateway_capacity_tokens``."""

    def reload() -> "Reloaded":
        scn = load_scenario(scenario)
        sim = scn.sim_config()
        return Reloaded(scn.make_policy(policy), scn.tiers(),
                        sim.gateway_capacity_tokens if sets_capacity else None,
                        sim.front_door, sim.lease_ttl_s)

    return reload


def _check_serve_extra() -> None:
    """One line, not a traceback, when the ``serve`` extra (starlette, uvicorn, aiohttp) is missing:
    the gateway's modules load them, so they are imported where used (a plain install lists
    and parses every command without them)."""
    try:
        import aiohttp  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise CliError(f"kvbudget serve needs the serve extra ({exc.name} is not installed): "
                       "pip install 'kvbudget[serve]'") from None


def _local_tokenizer(count_tokens: str, tokenizer: str | None) -> LocalTokenizer | None:
    """``--count-tokens``'s tokenizer: loaded for ``local`` (from ``--tokenizer``), none for
    the others."""
    from kvbudget.live.gateway_server import COUNT_TOKENS

    if count_tokens not in COUNT_TOKENS:
        raise CliError(f"--count-tokens must be one of {', '.join(COUNT_TOKENS)}, "
                       f"got {count_tokens!r}")
    if count_tokens != "local":
        if tokenizer is not None:
            raise CliError("--tokenizer goes with --count-tokens local")
        return None
    if tokenizer is None:
        raise CliError("--count-tokens local needs --tokenizer (a directory or a model name "
                       "in the local Hugging Face cache)")
    return LocalTokenizer(tokenizer)


def settings_from_flags(upstream: list[str], scenario: Path | None, policy: str | None,
                        host: str, port: int, keys: Path | None, trust_tier_header: bool,
                        capacity_tokens: int | None, capacity_period_s: float,
                        count_tokens: str, overload_status: int, retry_after_s: float,
                        default_max_tokens: int, router: str, out: Path | None,
                        rotate_requests: int, drain_timeout_s: float, max_body_bytes: int,
                        upstream_api_key: str | None,
                        tokenizer: str | None = None) -> "ServeSettings":
    """Everything checked before anything listens (each problem one line naming the flag)."""
    _check_serve_extra()
    from kvbudget.live.gateway_server import ServeConfig
    from kvbudget.live.serve_run import ServeSettings
    from kvbudget.live.serve_upstream import ROUTERS, UpstreamOptions

    scn, new_policy = _policy_maker(scenario, policy)
    tiers = scn.tiers() if scn is not None else DEFAULT_TIERS
    table = KeyTable.load(keys, {t.name: t for t in tiers}) if keys is not None else KeyTable()
    trust = trust_tier_header or (keys is None and is_loopback_host(host))
    if not trust and keys is None:
        raise CliError(f"--host {host} is not a loopback address: give --keys (or "
                       "--trust-tier-header behind a proxy that sets x-kvbudget-tier)")
    capacity = capacity_tokens
    front_door = lease_ttl_s = None
    if scn is not None:
        sim = scn.sim_config()
        front_door, lease_ttl_s = sim.front_door, sim.lease_ttl_s
        capacity = capacity or sim.gateway_capacity_tokens
    if overload_status not in (429, 503):
        raise CliError(f"--overload-status must be 429 or 503, got {overload_status}")
    if router not in ROUTERS:
        raise CliError(f"--router must be one of {', '.join(ROUTERS)}, got {router!r}")
    options = UpstreamOptions(tuple(upstream), upstream_api_key, router)
    config = ServeConfig(
        keys=table, trust_tier_header=trust, default_tier=tiers[0].name,
        overload_status=overload_status, retry_after_s=retry_after_s,
        default_max_tokens=default_max_tokens, max_body_bytes=max_body_bytes,
        count_tokens=cast("CountTokens", count_tokens),
        tokenizer=_local_tokenizer(count_tokens, tokenizer),
        capacity_period_s=capacity_period_s if capacity is None else None)
    return ServeSettings(tiers, new_policy, options, config,
                         host=host, port=port, out=out, rotate_requests=rotate_requests,
                         drain_timeout_s=drain_timeout_s, watch=scenario,
                         capacity_tokens=capacity, front_door=front_door,
                         lease_ttl_s=lease_ttl_s,
                         capacity_from="--capacity-tokens" if capacity_tokens is not None
                         else f"the scenario's gateway_capacity_tokens ({scenario})",
                         reload=None if scenario is None else _reloader(
                             scenario, policy, capacity_tokens is None and capacity is not None))


async def _run(settings: "ServeSettings") -> None:
    from kvbudget.live.serve_run import serve
    from kvbudget.live.serve_upstream import UpstreamError

    try:
        await serve(settings, lambda line: print(line, file=sys.stderr, flush=True))
    except UpstreamError as exc:
        raise CliError(f"{exc}; give --capacity-tokens") from None
    except OSError as exc:
        if exc.filename is None and exc.strerror:  # the port is taken, or not ours to bind
            raise CliError(f"--host {settings.host} --port {settings.port}: "
                           f"{exc.strerror}") from None
        raise


def serve_cmd(
    upstream: UpstreamOpt,
    scenario: ScenarioOpt = None,
    policy: PolicyOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8100,
    keys: KeysOpt = None,
    trust_tier_header: TrustOpt = False,
    capacity_tokens: CapacityOpt = None,
    capacity_period_s: PeriodOpt = 10.0,
    count_tokens: CountOpt = "upstream",
    overload_status: StatusOpt = 429,
    retry_after_s: RetryOpt = 1.0,
    default_max_tokens: MaxTokensOpt = 256,
    router: RouterOpt = "round_robin",
    out: OutOpt = None,
    rotate_requests: RotateOpt = 10_000,
    drain_timeout_s: DrainOpt = 30.0,
    max_body_bytes: BodyOpt = 1 << 20,
    upstream_api_key: UpKeyOpt = None,
    tokenizer: TokenizerOpt = None,
) -> None:
    """Run the admission gateway: an OpenAI-compatible server that admits each request with the
    policy (tier limit, token lease, queue or Overloaded) before forwarding it upstream."""
    with user_errors():
        settings = settings_from_flags(
            upstream, scenario, policy, host, port, keys, trust_tier_header, capacity_tokens,
            capacity_period_s, count_tokens, overload_status, retry_after_s,
            default_max_tokens, router, out, rotate_requests, drain_timeout_s, max_body_bytes,
            upstream_api_key, tokenizer)
        from kvbudget.live.serve_run import event_loop

        with asyncio.Runner(loop_factory=event_loop()) as runner:
            runner.run(_run(settings))


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_cmd)
