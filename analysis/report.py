"""``kvbudget report``: one self-contained HTML file (PNG figures embedded as base64) and the
same figures as PNG files, for one or more run directories (simulated or replayed).

The report holds: the runs and their settings, outcomes per run and tier, latency quantiles
with bootstrap confidence intervals, KV-cache figures, and the plots of :mod:`kvbudget.analysis.plots`
(latency CDFs and tails, p99 with intervals, p99 TTFT over time, TTFT attainment, where the TTFT
tail comes from, KV used and reserved over time, queue depth, requests that did not complete),
plus simulated against measured quantiles when a measured run is given.
"""

from __future__ import annotations

import base64
import html
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kvbudget.analysis import plots
from kvbudget.analysis import tables as analysis
from kvbudget.perf.hardware import gpu_label
from kvbudget.results.features_said import feature_lines
from kvbudget.results.recording import read_replay_meta
from kvbudget.results.run_result import RunResult, read_run
from kvbudget.workloads.errors import TraceError

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

REPORT_FILE = "report.html"
REPORT_QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class Report:
    """What :func:`build_report` wrote."""

    html_path: Path
    png_paths: tuple[Path, ...]


def run_labels(run_dirs: Sequence[Path], summaries: Sequence[Mapping[str, Any]]) -> list[str]:
    """A unique label per run: its policy, with the directory name added where two runs share a
    policy (and a number where even that repeats)."""
    policies = [str(s.get("policy", "") or d.name) for d, s in zip(run_dirs, summaries, strict=True)]
    labels = [
        p if policies.count(p) == 1 else f"{p} ({d.name})"
        for p, d in zip(policies, run_dirs, strict=True)
    ]
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
        out.append(label if labels.count(label) == 1 else f"{label} #{seen[label]}")
    return out


def load_runs(run_dirs: Sequence[Path]) -> dict[str, RunResult]:
    """Read every run directory (errors name the directory), keyed by :func:`run_labels`."""
    if not run_dirs:
        raise ValueError("no run directories given")
    results = [read_run(Path(d)) for d in run_dirs]
    labels = run_labels([Path(d) for d in run_dirs], [r.summary for r in results])
    return dict(zip(labels, results, strict=True))


# --- formatting ---------------------------------------------------------------------------------


def _fmt(value: Any, *, kind: str = "num") -> str:
    if value is None:
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return f"{int(value):,}"
    if isinstance(value, float | np.floating):
        v = float(value)
        if not math.isfinite(v):
            return "–"
        if kind == "pct":
            return f"{v:.1%}"
        if kind == "signed_pct":
            return f"{v:+.1%}"
        if kind == "s":
            return f"{v:.3g}"
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        return f"{v:.3g}"
    return str(value)


class _Raw(str):
    """A table cell that is already HTML (everything else is escaped)."""


_NUMERIC = re.compile(r"^[-+]?[\d,.]+(%|e[-+]?\d+)?$|^–$")


def _cell(c: str) -> str:
    text = c if isinstance(c, _Raw) else html.escape(c)
    plain = re.sub(r"<[^>]+>", "", c) if isinstance(c, _Raw) else c
    cls = ' class="n"' if _NUMERIC.match(plain.split(" ")[0].split("[")[0]) else ""
    return f"<td{cls}>{text}</td>"


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, caption: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "\n".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table>"


def served_model(run_dir: Path) -> str:
    """The model a replay's or ``kvbudget serve``'s server said it loaded (``replay.json``'s
    ``server``, or its upstreams' ``servers`` where all said one), as ``"served: NAME"``; a
    simulated run names its model in its summary. ``–`` where nothing said one."""
    try:
        meta = read_replay_meta(run_dir / "replay.json")
    except (TraceError, OSError):
        return "–"
    told = [meta["server"]] if isinstance(meta.get("server"), dict) else list(
        meta.get("servers") or [])
    names = {str(t.get("model_root") or t.get("model") or "") for t in told}
    return f"served: {names.pop()}" if len(names) == 1 and "" not in names else "–"


def gpu_shown(summary: Mapping[str, Any]) -> str:
    """A run's GPU as simulate and validate name it (:func:`~kvbudget.perf.hardware.gpu_label`:
    ``H100-SXM`` for ``H100-80GB``, the ``name`` a GPU file gives): the name the run resolved
    (its cost model's ``gpu``), else the given one's label, else the name as given (a GPU file
    no longer there, a replay's server); ``–`` where the run names none."""
    cost = summary.get("cost_model")
    resolved = cost.get("gpu") if isinstance(cost, dict) else None
    if isinstance(resolved, str) and resolved:
        return resolved
    given = summary.get("gpu")
    if not isinstance(given, str) or not given:
        return "–"
    try:
        return gpu_label(given)
    except (ValueError, OSError):
        return given


def _runs_table(runs: Mapping[str, RunResult], dirs: Sequence[Path]) -> str:
    rows = []
    for (label, run), d in zip(runs.items(), dirs, strict=True):
        s = run.summary
        workload = s.get("workload") if isinstance(s.get("workload"), dict) else {}
        rows.append(
            [
                label,
                str(d),
                str(s.get("policy", "")),
                _params(s.get("policy_params")),
                gpu_shown(s),
                str(s.get("model") or served_model(d)),
                str(workload.get("name", "–")) if workload else "–",
                _fmt(len(run.records)),
                _fmt(s.get("duration_s"), kind="s"),
                _fmt(s.get("kv_capacity_tokens")),
                _fmt(s.get("seed")),
            ]
        )
    headers = ["run", "directory", "policy", "parameters", "GPU", "model", "workload",
               "requests", "duration (s)", "KV capacity (tokens)", "seed"]
    return _table(headers, rows, caption="duration: first arrival to last finish, the arrival "
                  "window and the drain after the last arrival (the span of the output tokens "
                  "per second below).")


def _assumed_list(runs: Mapping[str, RunResult]) -> str:
    """What the runs' inputs left unsaid and the runs took (the summary's
    ``workload.warnings``/``.assumed`` and ``assumed``), and what a live replay's server did
    that changes its answer (``said``: outputs cut at the context, as ``kvbudget replay``
    prints it), each once, with the runs it concerns;
    ``""`` when nothing was."""
    said: dict[str, list[str]] = {}
    for label, run in runs.items():
        s = run.summary
        workload = s.get("workload")
        if not isinstance(workload, dict):
            workload = {}
        lines = [*s.get("said", ()),  # what the server did that changes the answer (a replay's)
                 *(f"warning: {t}" for t in workload.get("warnings", ())),
                 *(f"assumed: {t}" for t in workload.get("assumed", ())),
                 *(f"assumed: {t}" for t in s.get("assumed", ())),
                 *(f"warning: {t}" for t in s.get("warnings", ()))]
        for line in lines:
            said.setdefault(line, []).append(label)
    if not said:
        return ""
    items = "".join(f"<li>{html.escape(line)} <span class=\"note\">({html.escape(', '.join(labels))})"
                    "</span></li>" for line, labels in said.items())
    return f"<p>What the inputs did not say and the runs assumed:</p><ul>{items}</ul>"


def _features(runs: Mapping[str, RunResult]) -> str:
    """What each run's engine features assumed and did (queue caps, speculative decoding, a
    CPU KV offload tier, an autoscaled fleet, a disaggregated deployment), the lines ``kvbudget
    simulate`` prints, each run by its label; ``""`` when no run had any."""
    lines = feature_lines([{**run.summary, "policy": label} for label, run in runs.items()])
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return ("<h2>Engine features</h2>\n<p>What the runs' engine features assumed and did, as "
            f"<code>kvbudget simulate</code> says it:</p><ul>{items}</ul>")


def _params(params: Any) -> str:
    if not isinstance(params, dict) or not params:
        return "–"
    return ", ".join(f"{k}={v}" for k, v in params.items() if k != "name") or "–"


def _outcomes_table(records: pd.DataFrame, runs: Mapping[str, RunResult]) -> str:
    b = analysis.breakdown(records, by=("policy", "tier"))
    rows = []
    for _, r in b.iterrows():
        label, tier = str(r["policy"]), str(r["tier"])
        block = runs[label].summary.get("tiers", {}).get(tier, {})
        rows.append(
            [
                label,
                tier,
                _fmt(int(r["offered"])),
                _fmt(int(r["completed"])),
                _fmt(int(r["rejected_too_large"])),
                _fmt(int(r["rejected_overloaded"])),
                _fmt(int(r["expired"])),
                _fmt(int(r["preempted_dropped"])),
                _fmt(int(r["num_preemptions"])),
                _reasons(records, label, tier),
                _fmt(block.get("slo_attainment"), kind="pct"),
                _fmt(block.get("goodput_rps")),
                _fmt(block.get("sustained_output_tokens_per_s")),
            ]
        )
    headers = ["run", "tier", "offered", "completed", "too large", "overloaded", "expired",
               "dropped", "preemptions", "reasons", "SLO attainment", "goodput (req/s)",
               "output tok/s over the run"]
    return _table(headers, rows, caption="Outcomes per run and tier (preemptions include "
                  "gateway revocations; SLO attainment is over offered requests; goodput per "
                  "second of the arrival window, first to last arrival; output tokens over the "
                  "time the work took, first arrival to last finish, as the command line "
                  "tables' out tok/s).")


def _clients_table(runs: Mapping[str, RunResult]) -> str:
    """Retries and client timeouts per run and tier, for the runs whose clients are modelled
    (their summaries have :data:`kvbudget.results.metrics.CLIENT_SUMMARY_KEYS`); '' if none."""
    rows = []
    for label, run in runs.items():
        clients = run.summary.get("clients", {}).get("by_tier", {})
        for tier, block in run.summary.get("tiers", {}).items():
            if "eventual_completion" not in block or not block.get("offered"):
                continue
            done = block.get("time_to_eventual_completion_s") or {}
            rows.append([
                label,
                tier,
                str(clients.get(tier, {}).get("name", "no-retry")),
                _fmt(block.get("num_attempts")),
                _fmt(block.get("retry_amplification")),
                _fmt(block.get("eventual_completion"), kind="pct"),
                _fmt(block.get("first_attempt_completion"), kind="pct"),
                _fmt(block.get("client_timeout")),
                _fmt(done.get("p50"), kind="s"),
                _fmt(done.get("p99"), kind="s"),
                _fmt(block.get("goodput_rps")),
                _fmt(block.get("goodput_first_attempt_rps")),
            ])
    if not rows:
        return ""
    headers = ["run", "tier", "client", "attempts", "attempts/request", "eventual completion",
               "first-attempt completion", "client timeouts", "p50 time to completion (s)",
               "p99 time to completion (s)", "goodput (req/s)", "first-attempt goodput"]
    return "<h2>Clients and retries</h2>\n" + _table(
        headers, rows, caption="Attempts per request, completion whatever the attempts it took "
        "(and on the first attempt), and time from the first attempt to the last token; "
        "goodput with and without the completions retries rescued: requests completed within "
        "their tier's SLO per second of the arrival window, first to last arrival, not of the "
        "time the retries took (the run's drain).")


UNNAMED_REASONS = {"rejected_too_large": "too_large", "rejected_overloaded": "overloaded",
                   "expired": "expired", "preempted_dropped": "preempted"}
"""What the reasons column calls a refusal whose row names no reason, by its status: the
gateway's own refusal of a request over its tier's limit or the capacity is
``rejected_too_large`` with reason ``""`` in every executor's records (the simulator's, a
replay's, ``kvbudget serve``'s), ``too_large`` as ``serve``'s ``kvbudget_refused_total`` names
it."""


def _reasons(records: pd.DataFrame, label: str, tier: str) -> str:
    """Refusal and expiry reasons of one run and tier, most frequent first: every row the
    gateway or its upstream refused, expired or dropped, by its reason (by its status where it
    names none: :data:`UNNAMED_REASONS`)."""
    sel = (records["policy"].astype(str) == label) & (records["tier"].astype(str) == tier)
    given = records.loc[sel, "reason"].fillna("").astype(str)
    unnamed = records.loc[sel, "status"].astype(str).map(UNNAMED_REASONS).fillna("")
    reasons = given.where(given != "", unnamed)
    counts = reasons[reasons != ""].value_counts()
    if counts.empty:
        return "–"
    return ", ".join(f"{k}: {int(v):,}" for k, v in counts.items())


def _latency_table(table: pd.DataFrame) -> str:
    names = [analysis.quantile_name(q) for q in REPORT_QUANTILES]
    headers = ["run", "tier", "completed"]
    for m in analysis.METRICS:
        headers += [f"{n} {analysis.METRIC_LABELS[m]} (s)" for n in names]
    rows = []
    for (label, tier), grp in table.groupby(["policy", "tier"], sort=False, observed=True):
        row = [str(label), str(tier), _fmt(int(grp["n"].max()) if len(grp) else 0)]
        for m in analysis.METRICS:
            for q in REPORT_QUANTILES:
                sel = grp[(grp["metric"] == m) & np.isclose(grp["quantile"], q)]
                if sel.empty or not math.isfinite(float(sel["value"].iloc[0])):
                    row.append("–")
                    continue
                v, lo, hi = (float(sel[c].iloc[0]) for c in ("value", "ci_low", "ci_high"))
                ci = (f"<br><small>[{lo:.3g}, {hi:.3g}]</small>"
                      if math.isfinite(lo) and math.isfinite(hi) else "")
                row.append(_Raw(f"{v:.3g}{ci}"))
        rows.append(row)
    return _table(headers, rows, caption="Latency quantiles of completed requests, with 95% "
                  "bootstrap confidence intervals in brackets.")


def _itl_table(runs: Mapping[str, RunResult]) -> str:
    """Inter-token latency (the gaps between a request's tokens, over every token of the
    completed requests: ``summary.json``'s ``itl_s``), per run and tier (a tier no request was
    offered in has no row, as in the outcomes table); nothing when no run has it (a run
    directory written before it was recorded)."""
    rows = []
    for label, run in runs.items():
        parts = [("all", run.summary.get("overall", {}))]
        parts += sorted((str(t), v) for t, v in (run.summary.get("tiers") or {}).items()
                        if not (isinstance(v, Mapping) and v.get("offered") == 0))
        for tier, part in parts:
            itl = part.get("itl_s") if isinstance(part, Mapping) else None
            if not isinstance(itl, Mapping):
                continue
            rows.append([label, tier, *(_fmt(itl.get(k), kind="s")
                                        for k in ("mean", "p50", "p90", "p99"))])
    if not rows:
        return ""
    return _table(["run", "tier", "mean (s)", "p50 (s)", "p90 (s)", "p99 (s)"], rows,
                  caption="Inter-token latency: the gaps between consecutive tokens of the "
                  "completed requests, over all their tokens.")


def _kv_table(runs: Mapping[str, RunResult]) -> str:
    rows = []
    for label, run in runs.items():
        k = analysis.kv_summary(run.timeline) if len(run.timeline) else {}
        skv = run.summary.get("kv", {}) or {}
        engine = run.summary.get("engine", {}) or {}
        rows.append(
            [
                label,
                _fmt(k.get("used_mean_fraction"), kind="pct"),
                _fmt(k.get("used_p99_fraction"), kind="pct"),
                _fmt(k.get("reserved_mean_fraction"), kind="pct"),
                _fmt(k.get("idle_reserved_mean_fraction"), kind="pct"),
                _fmt(skv.get("reservation_efficiency"), kind="pct"),
                _fmt(int(k["num_preemptions"]) if "num_preemptions" in k else None),
                _fmt(engine.get("num_gateway_revocations")),
                _fmt(k.get("max_waiting")),
            ]
        )
    headers = ["run", "KV used (mean)", "KV used (p99)", "KV reserved (mean)",
               "reserved but idle (mean)", "used / reserved", "engine preemptions",
               "gateway revocations", "max waiting requests"]
    return _table(headers, rows, caption="KV cache as a share of capacity, time-weighted over "
                  "the timeline samples (an autoscaled fleet's: of the capacity serving at "
                  "each sample, up or draining replicas, as simulate's KV table has it).")


_CSS = """
body { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; margin: 2em auto;
       max-width: 1200px; color: #222; line-height: 1.4; padding: 0 1em; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }
caption { caption-side: bottom; text-align: left; color: #555; padding-top: 0.4em; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.n { text-align: right; white-space: nowrap; }
small { color: #666; }
figure { margin: 1.5em 0; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
.note { color: #555; font-size: 0.9em; }
"""


# --- the report ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Fig:
    name: str
    caption: str
    make: Callable[[], Figure]


def build_report(
    run_dirs: Sequence[Path],
    out_dir: Path,
    *,
    measured: Path | None = None,
    seed: int = 0,
    num_resamples: int = 1000,
    window_s: float | None = None,
    title: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Report:
    """Read the runs, write ``report.html`` and one PNG per figure into ``out_dir``.

    ``measured`` is a run directory (a live replay) to compare every run against, request by
    request. ``seed`` seeds the bootstrap. ``window_s`` is the window of the p99-over-time plot
    (default: a twentieth of the longest run). ``progress(done, total)`` is called as the
    work advances: the bootstrap intervals, then each figure.
    """
    dirs = [Path(d) for d in run_dirs]
    runs = load_runs(dirs)
    meas = read_run(Path(measured)) if measured is not None else None
    if meas is not None and meas.summary.get("executor") is None:
        raise ValueError(f"--measured: {measured}: a simulated run (simulate or compare --out: "
                         "its summary names no executor), not a measured one: it would be "
                         "reported as measured; --measured takes a live run (replay or serve "
                         "--out); give simulated runs side by side as run directories")
    records = analysis.label_runs({k: r.records for k, r in runs.items()})
    rng = np.random.default_rng(seed)
    pct = analysis.percentile_table(
        records, by=("policy", "tier"), quantiles=REPORT_QUANTILES, rng=rng,
        num_resamples=num_resamples,
    )
    if window_s is None:
        span = float(np.nanmax(records["arrival_s"])) if len(records) else 1.0
        window_s = max(span / 20.0, 1e-3)
    figs = _figures(records, pct, runs, window_s)
    compare_html = ""
    if meas is not None:
        for run_dir, run in zip(dirs, runs.values(), strict=True):
            _refuse_other_workload(run_dir, run, meas, measured)
        tables, compare_figs = _measured_comparison(runs, meas, measured)
        figs.extend(compare_figs)
        compare_html = "<h2>Simulated against measured</h2>\n" + "\n".join(tables)

    out_dir.mkdir(parents=True, exist_ok=True)
    pngs, fig_html = _write_figures(figs, out_dir, progress)
    heading = title or f"kvbudget report: {', '.join(runs)}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(heading)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{html.escape(heading)}</h1>",
        '<p class="note">Times are seconds from the start of each run. Latency statistics are '
        "over completed requests; attainment is over offered requests.</p>",
        "<h2>Runs</h2>",
        _runs_table(runs, dirs),
        _assumed_list(runs),
        "<h2>Outcomes</h2>",
        _outcomes_table(records, runs),
        _clients_table(runs),
        "<h2>Latency</h2>",
        _latency_table(pct),
        _itl_table(runs),
        "<h2>KV cache</h2>",
        _kv_table(runs),
        _features(runs),
        compare_html,
        "<h2>Figures</h2>",
        *fig_html,
        "</body></html>",
    ]
    html_path = out_dir / REPORT_FILE
    html_path.write_text("\n".join(p for p in parts if p) + "\n", encoding="utf-8")
    return Report(html_path=html_path, png_paths=tuple(pngs))


def _figures(records: pd.DataFrame, pct: pd.DataFrame, runs: Mapping[str, RunResult],
             win: float) -> list[_Fig]:
    """The report's figures of the runs (``win``: the window of the p99-over-time plot)."""
    timelines = {k: r.timeline for k, r in runs.items()}
    notes = {
        k: f"{r.summary['engine']['num_gateway_revocations']:,} gateway revocations"
        for k, r in runs.items()
        if isinstance(r.summary.get("engine"), dict)
        and "num_gateway_revocations" in r.summary["engine"]
    }
    return [
        _Fig("latency_cdf", "Distributions of TTFT, TPOT and E2E latency of completed requests "
             "(log latency axis). Colour: run; line style: tier.",
             lambda: plots.latency_cdfs(records)),
        _Fig("latency_tail", "The same distributions as tails, P(X ≥ x) on a log axis: the "
             "p99 is where a curve crosses 10⁻².", lambda: plots.latency_cdfs(records,
                                                                              complementary=True)),
        _Fig("p99_intervals", "p99 per run and tier with 95% bootstrap confidence intervals.",
             lambda: plots.percentile_intervals(pct)),
        _Fig("p99_ttft_over_time", f"p99 TTFT of the requests arriving in each {win:.3g} s "
             "window.", lambda: plots.windowed_quantile(
                 analysis.windowed_percentiles(records, window_s=win, by=("policy", "tier")))),
        _Fig("ttft_attainment", "Share of offered requests whose TTFT is within a target, "
             "against the target (requests that did not complete count as misses).",
             lambda: plots.slo_attainment(
                 analysis.slo_attainment_curve(records, by=("policy", "tier")))),
        _Fig("ttft_tail_sources", "Mean TTFT of the requests below (body) and at or above "
             "(tail) their group's p99, split into gateway queueing and the engine's part.",
             lambda: plots.tail_attribution(
                 analysis.tail_attribution(records, by=("policy", "tier")))),
        _Fig("kv_timeline", "KV cache used (allocated blocks) and reserved (gateway leases) as "
             "a share of capacity; triangles mark engine preemptions.",
             lambda: plots.kv_timeline(timelines, notes=notes)),
        _Fig("queue_depth", "Waiting requests (gateway queues plus the engine's waiting queue) "
             "and running requests over time.", lambda: plots.queue_depth(timelines)),
        _Fig("not_completed", "Requests that did not complete, by outcome and reason.",
             lambda: plots.rejections(records)),
    ]


def _refuse_other_workload(run_dir: Path, run: RunResult, meas: RunResult,
                           measured: Path | None) -> None:
    """A run of another workload than the measured run's (the requests they share by
    ``request_id`` of other tiers or prompts) is refused in one line naming both runs and
    what differs: paired on ``request_id``, its errors would compare other requests."""
    sim, real = run.records, meas.records
    if not {"request_id", "tier"} <= set(sim.columns) & set(real.columns):
        return  # join_measured names the missing column
    cols = ["request_id", "tier", *(["prompt_tokens"] if "prompt_tokens" in sim.columns
                                    and "prompt_tokens" in real.columns else [])]
    both = real[cols].merge(sim[cols], on="request_id", suffixes=("_meas", "_sim"))
    differ = [(name, both[f"{name}_sim"].astype(str) != both[f"{name}_meas"].astype(str))
              for name in cols[1:]]
    said = [f"{int(mask.sum()):,} in {name.replace('_', ' ')}" for name, mask in differ
            if mask.any()]
    if not said:
        return
    name, mask = next((n, m) for n, m in differ if m.any())
    i = int(np.argmax(mask.to_numpy()))
    raise ValueError(
        f"{run_dir}: another workload than --measured {measured}: of the {len(both):,} requests "
        f"both hold ({len(sim):,} in the run, {len(real):,} measured), {', '.join(said)} differ "
        f"(request {int(both['request_id'].iloc[i])}: {name} {both[f'{name}_sim'].iloc[i]!r} "
        f"simulated, {both[f'{name}_meas'].iloc[i]!r} measured); compare a simulation of the "
        "trace the measured run replayed")


def _measured_comparison(runs: Mapping[str, RunResult], meas: RunResult, measured: Path | None
                         ) -> tuple[list[str], list[_Fig]]:
    """Each run against the measured run ``meas`` (read from ``measured``): its table of
    errors and its figure."""
    label_m = str(meas.summary.get("policy", "measured"))
    tables: list[str] = []
    figs: list[_Fig] = []
    for label, run in runs.items():
        err = analysis.quantile_errors(run.records, meas.records, quantiles=REPORT_QUANTILES)
        joined = analysis.join_measured(run.records, meas.records)
        per_req = analysis.per_request_errors(joined)
        tables.append(_errors_table(label, err, per_req))
        figs.append(
            _Fig(
                f"sim_vs_measured_{len(tables)}",
                f"{label} against the measured run {measured} (paired on request_id).",
                partial(plots.sim_vs_measured, err,
                        title=f"{label}: simulated against measured ({label_m})"),
            )
        )
    return tables, figs


def _write_figures(figs: Sequence[_Fig], out_dir: Path,
                   progress: Callable[[int, int], None] | None) -> tuple[list[Path], list[str]]:
    """Draw each figure, write it as a numbered PNG into ``out_dir``; the paths and the
    figures' HTML (the PNG inline)."""
    pngs: list[Path] = []
    fig_html: list[str] = []
    if progress is not None:
        progress(1, 1 + len(figs))
    for i, f in enumerate(figs, start=1):
        fig = f.make()
        if progress is not None:
            progress(1 + i, 1 + len(figs))
        data = plots.png_bytes(fig)
        path = out_dir / f"{i:02d}_{f.name}.png"
        path.write_bytes(data)
        pngs.append(path)
        b64 = base64.b64encode(data).decode("ascii")
        fig_html.append(
            f'<figure id="{f.name}"><img alt="{html.escape(f.name)}" '
            f'src="data:image/png;base64,{b64}"><figcaption>{html.escape(f.caption)}'
            "</figcaption></figure>"
        )
    return pngs, fig_html


def _errors_table(label: str, err: pd.DataFrame, per_req: pd.DataFrame) -> str:
    names = [analysis.quantile_name(q) for q in REPORT_QUANTILES]
    rows = []
    for (tier, metric), grp in err.groupby(["tier", "metric"], sort=False):
        row = [str(tier), analysis.METRIC_LABELS.get(str(metric), str(metric))]
        for name in names:
            sel = grp[grp["name"] == name]
            if sel.empty:
                row.append("–")
                continue
            r = sel.iloc[0]
            rel = _fmt(float(r["relative_error"]), kind="signed_pct")
            row.append(_Raw(f"{_fmt(float(r['simulated']), kind='s')} / "
                            f"{_fmt(float(r['measured']), kind='s')}<br><small>{rel}</small>"))
        pr = per_req[(per_req["tier"] == tier) & (per_req["metric"] == metric)]
        row.append(_fmt(float(pr["mape"].iloc[0]) if len(pr) else math.nan, kind="pct"))
        row.append(_fmt(int(grp["n_meas"].max())))
        rows.append(row)
    headers = ["tier", "metric", *[f"{n}: simulated / measured (s)" for n in names],
               "per-request MAPE", "paired requests"]
    return _table(headers, rows, caption=f"{label}: simulated against measured over the requests "
                  "completed in both; the small figure is the relative error of the quantile, "
                  "(simulated - measured) / measured: + where the simulation is higher.")
