"""Which of vLLM's engine defaults moved after the release kvbudget's ``vllm`` engine mirrors.

The simulated ``vllm`` engine takes vLLM :data:`SIMULATED_VLLM`'s defaults
(``perf/vllm_defaults.py``, ``simulator/engine_config.py``; a test checks the two versions
agree). A recording whose server says it ran a later vLLM (genai-bench's ``--server-version``
beside ``--server-engine vLLM``), or a ``vllm bench serve`` file whose client was 0.33 or later,
gets a note naming what that release does otherwise and the flags that match the two
(:func:`release_note`); the engine's defaults are not changed here (that would change every
result: docs/fidelity.md says which release they are).

Read from the PyPI sdists of vLLM 0.32.0, 0.33.0 and 0.34.0 (paths and lines of the ``vllm``
package). What moved (:data:`CHANGES`):

* 0.33.0: async scheduling is no longer turned off by default for speculative decoding whose
  method is not EAGLE, GPU n-gram, draft-model, DSpark or DFlash (0.32.0
  ``config/vllm.py:1597-1610``, the CPU ``ngram`` method among them; 0.34.0
  ``config/vllm.py:1610-1637`` keeps only the pooling, executor and ROCm DeepEP exceptions);
* 0.34.0: the KV block holds 64 tokens, not 16 (``config/cache.py:185``; 0.32.0
  ``config/cache.py:72``), where the attention backend takes it
  (``platforms/interface.py:780-790``, ``get_preferred_block_size``);
* 0.34.0: the "extensible KV cache", on by default on CUDA and ROCm (``config/cache.py:395-405``,
  ``config/vllm.py:3180-3262``), sizes the cache from the memory free after warmup and CUDA-graph
  capture, the warmup's transient peak kept free (``v1/worker/gpu_worker.py:1022-1090``), with
  ``gpu_memory_utilization`` 1.0 unless given (``config/cache.py:216-227``, ``495-501``): 0.32
  took 0.92 of the GPU less the weights, the profiled peak and the CUDA graphs' estimate.

What did not (:data:`UNCHANGED`, each at 0.34.0): the ``max_num_seqs`` /
``max_num_batched_tokens`` tiers by GPU memory (``engine/arg_utils.py:3010-3042``; a GB10,
which kvbudget has no preset of, now stays on the small tier, ``arg_utils.py:2999``,
``3020-3024``), chunked prefill on (``config/scheduler.py:146``), prefix caching on
(``config/cache.py:267``), first come first served (``config/scheduler.py:171``), no long-prefill
threshold (``config/scheduler.py:90``), no watermark (``config/scheduler.py:208``), a stream
interval of 1 (``config/scheduler.py:251``), preemption of the last running request by
recompute (``v1/core/sched/scheduler.py:949-986``), the CUDA-graph capture sizes
(``config/vllm.py:2322-2451``), async scheduling on otherwise (``config/vllm.py:1610-1637``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SIMULATED_VLLM = "0.32.0"
"""The release whose defaults the ``vllm`` engine takes (``perf.vllm_defaults.VLLM_VERSION``,
which results may not import)."""

CHECKED_VLLM = (0, 34)
"""The newest release read: later ones are said as not read."""


@dataclass(frozen=True)
class DefaultChange:
    """One engine default that moved after :data:`SIMULATED_VLLM`."""

    since: tuple[int, int]
    """The first release (major, minor) with the new default."""
    knob: str
    now: str
    """What that release does."""
    simulated: str
    """What the simulated engine does (vLLM 0.32.0's)."""
    match: str
    """The flags that make the two agree."""


CHANGES: tuple[DefaultChange, ...] = (
    DefaultChange(
        (0, 33),
        "async scheduling with speculative decoding",
        "on with every speculative method, n-gram's included",
        "off with ngram",
        "--set engine.async_scheduling=true, or vllm serve --no-async-scheduling",
    ),
    DefaultChange(
        (0, 34),
        "block_size",
        "64 tokens a KV block",
        "16",
        "--block-size 64, or vllm serve --block-size 16",
    ),
    DefaultChange(
        (0, 34),
        "KV cache size",
        "the extensible KV cache on CUDA and ROCm, sized from the memory free after warmup "
        "and CUDA-graph capture, gpu_memory_utilization 1.0 unless given",
        "0.92 of the GPU's memory less the weights, the profiled peak and the CUDA graphs' "
        "estimate",
        "--num-gpu-blocks N with the server's figure (its log, or /metrics "
        "vllm:cache_config_info num_gpu_blocks), --set engine.gpu_memory_utilization=1.0 "
        "coming nearer, or vllm serve --no-enable-extensible-kv-cache",
    ),
)

UNCHANGED = (
    "max_num_seqs and max_num_batched_tokens by GPU",
    "chunked prefill",
    "prefix caching",
    "fcfs",
    "preemption by recompute",
    "stream interval 1",
    "CUDA-graph sizes",
)
"""What the note says held: the other defaults kvbudget mirrors, the same at 0.34.0."""

RELEASE_NOTE_SAID = "whose engine defaults differ from vLLM 0.32.0's"
"""The words that mark :func:`release_note` among a recording's notes (a vLLM engine's only)."""

V0_NOTE_SAID = "before vLLM 0.8.0 (March 2025) made its V1 engine the default"
"""The words that mark a note of a server that ran vLLM's V0 engine among a recording's notes
(:func:`kvbudget.results.recorded_vllm_bench_client.v0_engine_note`, by the run's date;
:func:`server_release_note`, by its version)."""

V0_DEFAULTS_SAID = (
    "whose defaults were prefix caching off, max_num_seqs 256 and chunked prefill only for a "
    "model of more than 32K context (then 512 tokens a step, else a whole prompt at once); the "
    "simulated vllm engine takes vLLM 0.32's (the 'simulated on' line) unless --set "
    "engine.enable_prefix_caching=false, --max-num-seqs 256 and --max-num-batched-tokens say "
    "the server's"
)
"""V0's defaults (``vllm/engine/arg_utils.py`` ``EngineArgs`` at commit e0191a95d: see
``recorded_vllm_bench_client.V1_DEFAULT_DATE``) and the flags that match them."""

V1_DEFAULT_RELEASE = (0, 8)
"""vLLM 0.8.0 made the V1 engine the default (PR #13726, ``V1_DEFAULT_DATE``)."""

_VERSION = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def release_of(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of a vLLM version as servers and tools spell it (``0.34.0``,
    ``v0.34.0``, ``0.34.0rc1``, ``0.33.1.dev12+g4ba787ec9``, ``0.34.0+cu129``), else None."""
    found = _VERSION.match(version.strip())
    return (int(found.group(1)), int(found.group(2))) if found else None


def changes_in(release: tuple[int, int]) -> tuple[DefaultChange, ...]:
    """The defaults of :data:`CHANGES` that ``release`` runs otherwise than the simulation."""
    return tuple(c for c in CHANGES if release >= c.since)


def release_note(release: tuple[int, int], lead: str) -> str | None:
    """The note for a server of vLLM ``release`` (``lead``: the note's opening, which says how
    the file or server told it): the defaults of :data:`CHANGES` it runs otherwise than the
    simulated engine, and the flags that match them; None for :data:`SIMULATED_VLLM` or
    earlier."""
    changes = changes_in(release)
    if not changes:
        return None
    unread = (
        f" (read up to vLLM {CHECKED_VLLM[0]}.{CHECKED_VLLM[1]}.0; later releases not read)"
        if release > CHECKED_VLLM
        else ""
    )
    said = "; ".join(
        f"{c.knob}: {c.now} (simulated: {c.simulated}; to match, {c.match})" for c in changes
    )
    return (
        f"{lead}, {RELEASE_NOTE_SAID}, which the simulated vllm engine takes{unread}: "
        f"{said}; the other defaults kvbudget mirrors ({', '.join(UNCHANGED)}) are "
        f"{CHECKED_VLLM[0]}.{CHECKED_VLLM[1]}.0's too"
    )


def server_release_note(config: Mapping[str, Any]) -> str | None:
    """:func:`release_note` for a recording whose file names its server vLLM and that server's
    version (``server_engine`` ``vllm`` and ``server_version``: genai-bench's
    ``--server-engine vLLM --server-version V``); for a release before
    :data:`V1_DEFAULT_RELEASE`, the V0 engine's defaults."""
    version = config.get("server_version")
    if config.get("server_engine") != "vllm" or not isinstance(version, str):
        return None
    release = release_of(version)
    if release is None:
        return None
    lead = f"the recording's server ran vLLM {version.strip()[:40]} (its file's server_version)"
    if release < V1_DEFAULT_RELEASE:
        return f"{lead}, {V0_NOTE_SAID}: it ran the V0 engine, {V0_DEFAULTS_SAID}"
    return release_note(release, lead)


SERVER_METRICS_KEYS = ("server_queue_times", "server_ttfts")
"""What ``vllm bench serve`` saves from 0.33.0 where the server sent per-request metrics
(0.33.0 ``vllm/benchmarks/serve.py``, ``_get_server_metrics_results``: nothing when no request
had them), which a vLLM server sends with ``--enable-per-request-metrics`` (0.34.0
``entrypoints/common/cli_args.py:158``; 0.32.0 ``entrypoints/launchers/cli_args.py``)."""


def client_release_note(doc: Mapping[str, Any], line: int | None) -> str | None:
    """For a ``vllm bench serve`` result its client wrote at 0.33 or later
    (:data:`SERVER_METRICS_KEYS`): the file does not record the server's release, so the
    defaults a 0.33 or 0.34 server runs otherwise are said, conditionally."""
    if not any(isinstance(doc.get(k), list) for k in SERVER_METRICS_KEYS):
        return None
    where = "" if line is None else f"line {line}: "
    return release_note(
        CHECKED_VLLM,
        (
            f"{where}the file was written by vllm bench serve 0.33 or later (it saves "
            "server_queue_times and server_ttfts, a vLLM server's per-request metrics) and does "
            "not record its server's release: if that server ran vLLM 0.34 (0.33: the first "
            "default below only)"
        ),
    )
