"""Whether ``kvbudget serve``'s upstreams can be reached, for ``GET /ready``.

With ``--capacity-tokens`` the gateway reads no upstream ``/metrics``, so without a probe
nothing noticed every upstream gone: ``/ready`` answered 200 and a load balancer kept sending
requests that could only get 502. :class:`Reachability` asks each upstream's ``/health`` every
``period_s`` (and at start); any HTTP answer (even a 404, from a server without that path)
is an upstream that can be reached, a failed connection or a timeout one that cannot.
``/ready`` answers 503 while none can be.

Readiness is Kubernetes's: whether the gateway should be sent traffic now (a failed readiness
probe takes the pod out of its Service's endpoints until it passes again, without a restart:
https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/), so it
follows the latest evidence, not the last probe's: a completion forwarded to an upstream that
refuses the connection marks that upstream down at once (it stayed "ready" until the next
probe, up to ``period_s`` of clients sent to a gateway that could only answer 502), and any
HTTP answer a completion gets marks it up. A probe's verdict on an upstream stands only when
no completion said otherwise while the probe ran (it began before that evidence). ``/health``,
liveness, stays 200: restarting the gateway cannot bring an upstream back.
"""

from __future__ import annotations

import asyncio

from kvbudget.live.serve_upstream import UpstreamError, Upstreams

PROBE_PERIOD_S = 5.0
"""How often the upstreams' ``/health`` is asked (a GET each, cheap)."""
PROBE_TIMEOUT_S = 2.0
"""How long an upstream's ``/health`` may take to answer before it counts as unreachable (a
host that takes the connection and never answers would hold the probe for the read timeout)."""


class Reachability:
    """The upstreams' reachability as last probed: ``down`` maps an upstream's index to why
    it could not be reached; ``changed`` is set (and replaced) after each probe."""

    def __init__(self, upstreams: Upstreams, period_s: float = PROBE_PERIOD_S,
                 timeout_s: float = PROBE_TIMEOUT_S) -> None:
        self.upstreams = upstreams
        self.period_s = period_s
        self.timeout_s = timeout_s
        self.down: dict[int, str] = {}
        self.num_probes = 0
        self.changed = asyncio.Event()
        self._num_said = 0  # pieces of evidence from completions so far
        self._said_at: dict[int, int] = {}  # upstream -> its latest piece's number

    @property
    def problem(self) -> str:
        """Empty while an upstream can be reached, else why none can."""
        if len(self.down) < len(self.upstreams.urls):
            return ""
        return "no upstream reachable: " + "; ".join(self.down[i] for i in sorted(self.down))

    async def _why_down(self, base: str) -> str:
        """Empty when ``base`` answers its ``/health`` in time, else why it did not."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.upstreams.get(base + "/health")
        except UpstreamError as exc:
            return str(exc)
        except TimeoutError:
            return f"{base}/health: no answer in {self.timeout_s:g} s"
        return ""

    async def probe(self) -> None:
        """Ask each upstream's ``/health`` once, all at once; a completion's evidence on an
        upstream that came while the probe ran stands over the probe's."""
        began = self._num_said
        whys = await asyncio.gather(*(self._why_down(base) for base in self.upstreams.urls))
        for index, why in enumerate(whys):
            if self._said_at.get(index, -1) < began:
                self._mark(index, why)
        self.num_probes += 1
        self._changed()

    def refused(self, index: int, why: str) -> None:
        """A completion could not connect to upstream ``index`` (``why``): down now."""
        self._said(index, f"{self.upstreams.urls[index]}: {why} (a completion forwarded)")

    def answered(self, index: int) -> None:
        """Upstream ``index`` answered a completion (any HTTP status): reachable now."""
        self._said_at[index] = self._num_said
        self._num_said += 1
        if self.down.pop(index, None) is not None:
            self._changed()

    def _said(self, index: int, why: str) -> None:
        self._said_at[index] = self._num_said
        self._num_said += 1
        self._mark(index, why)
        self._changed()

    def _mark(self, index: int, why: str) -> None:
        if why:
            self.down[index] = why
        else:
            self.down.pop(index, None)

    def _changed(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    async def run(self) -> None:
        """Probe now and every ``period_s`` (until cancelled)."""
        while True:
            await self.probe()
            await asyncio.sleep(self.period_s)
