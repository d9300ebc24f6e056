"""Plain-text tables for the terminal (no dependency, fast to import)."""

from __future__ import annotations

import math
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from kvbudget.analysis.validation import FEW_FOR_P99
from kvbudget.results.features_said import feature_lines
from kvbudget.results.said import (
    CONTEXT_DEFAULT_REFUSED,
    TIME_LIMIT_REASONS,
    figure,
    fill,
    setting_lines,
)
from kvbudget.results.said import WIDTH as WIDTH  # re-exported: the CLI modules take it here
from kvbudget.workloads.context_limit import CUTTING_ENGINES
from kvbudget.workloads.counted import counted

_fmt = figure


def render(headers: Sequence[str], rows: Sequence[Sequence[Any]], gap: int = 2) -> str:
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    sep = " " * gap
    lines = [sep.join(h.rjust(w) if i else h.ljust(w) for i, (h, w) in
                      enumerate(zip(headers, widths, strict=True)))]
    lines.append(sep.join("-" * w for w in widths))
    for r in cells:
        lines.append(sep.join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in
                              enumerate(zip(r, widths, strict=True))))
    return "\n".join(lines)




def render_fitting(headers: Sequence[str], rows: Sequence[Sequence[Any]],
                   width: int = WIDTH, gap: int = 2) -> str:
    """:func:`render` in as few tables as keep every line within ``width``: the columns after
    the first (the rows' key, repeated in each) split in order, one blank line between
    tables; a column wider than ``width`` on its own still gets a table."""
    cells = [[_fmt(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    groups: list[list[int]] = [[]]
    line = widths[0]
    for i in range(1, len(headers)):
        if groups[-1] and line + gap + widths[i] > width:
            groups.append([])
            line = widths[0]
        groups[-1].append(i)
        line += gap + widths[i]
    return "\n\n".join(
        render([headers[0], *(headers[i] for i in g)], [[r[0], *(r[i] for i in g)] for r in rows],
               gap)
        for g in groups)


def _sustained(b: dict[str, Any]) -> Any:
    """Output tokens over first arrival to last finish (a summary written before the figure
    existed has only the arrival-window rate: ``-``)."""
    return b.get("sustained_output_tokens_per_s")
"""Columns a table fits in by default (``--wide`` shows every column)."""

# (header, block -> value); the first group is what fits WIDTH, --wide adds the rest
_NARROW: tuple[tuple[str, Any], ...] = (
    ("offered", lambda b: b["offered"]),
    ("done", lambda b: b["completed"]),
    ("refused", lambda b: b["rejected_too_large"] + b["rejected_overloaded"]
     + b["preempted_dropped"]),
    ("expired", lambda b: b["expired"]),
    ("TTFT p99", lambda b: b["ttft_s"]["p99"]),
    ("TPOT p99", lambda b: b["tpot_s"]["p99"]),
    ("out tok/s", lambda b: _sustained(b)),
    ("SLO att", lambda b: b["slo_attainment"]),
)
_WIDE: tuple[tuple[str, Any], ...] = (
    ("offered", lambda b: b["offered"]),
    ("done", lambda b: b["completed"]),
    ("rej", lambda b: b["rejected_too_large"] + b["rejected_overloaded"]),
    ("expired", lambda b: b["expired"]),
    ("dropped", lambda b: b["preempted_dropped"]),
    ("preempt", lambda b: b["num_preemptions"]),
    ("TTFT p50", lambda b: b["ttft_s"]["p50"]),
    ("TTFT p99", lambda b: b["ttft_s"]["p99"]),
    ("TPOT p50", lambda b: b["tpot_s"]["p50"]),
    ("TPOT p99", lambda b: b["tpot_s"]["p99"]),
    ("ITL p99", lambda b: b.get("itl_s", {}).get("p99")),
    ("E2E p99", lambda b: b["e2e_s"]["p99"]),
    ("out tok/s", lambda b: _sustained(b)),
    ("tok/s arr. win", lambda b: b["output_tokens_per_s"]),
    ("goodput/s", lambda b: b["goodput_rps"]),
    ("SLO att", lambda b: b["slo_attainment"]),
)
SUMMARY_HEADERS = ("policy", "tier", *(h for h, _ in _WIDE))


def summary_rows(summary: dict[str, Any], wide: bool = True) -> list[list[Any]]:
    rows = []
    blocks = [("all", summary["overall"]), *summary["tiers"].items()]
    for tier, b in blocks:
        if not b["offered"]:
            continue
        rows.append([summary["policy"], tier, *(f(b) for _, f in (_WIDE if wide else _NARROW))])
    return rows


def kv_rows(summary: dict[str, Any], wide: bool = True) -> list[Any]:
    kv = summary["kv"]
    row = [summary["policy"], kv["used_mean_fraction"], kv["reserved_mean_fraction"],
           kv["reservation_efficiency"], kv["used_p99"], summary["kv_capacity_tokens"],
           summary["engine"]["num_engine_preemptions"],
           summary["engine"]["num_gateway_revocations"], summary.get("drain_s")]
    return [*row, summary["wall_time_s"]] if wide else row


KV_HEADERS = ("policy", "KV used", "KV reserved", "res. eff.", "KV used p99", "KV capacity",
              "engine preempt", "gw revoke", "drain s", "wall s")
KV_NARROW = ("policy", "KV used", "KV reserved", "res. eff.", "used p99", "KV capacity",
             "preempt", "revoke", "drain s")


def params_line(summary: dict[str, Any]) -> str:
    """``policy: k=v, ...`` (the parameters in force), or ``policy: no parameters``."""
    params = {k: v for k, v in (summary.get("policy_params") or {}).items() if k != "name"}
    text = ", ".join(f"{k}={_fmt(v)}" for k, v in params.items()) or "no parameters"
    return f"{summary['policy']}: {text}"


def client_lines(summaries: Sequence[dict[str, Any]]) -> list[str]:
    """The retries table of runs whose clients are modelled (and a blank line); none else."""
    rows = []
    for s in summaries:
        by_tier = s.get("clients", {}).get("by_tier", {})
        for tier, block in s.get("tiers", {}).items():
            if "eventual_completion" in block and block.get("offered"):
                done = block.get("time_to_eventual_completion_s") or {}
                rows.append([s.get("policy"), tier, by_tier.get(tier, {}).get("name", "no-retry"),
                             block.get("retry_amplification"), block.get("eventual_completion"),
                             block.get("client_timeout"), done.get("p50"),
                             block.get("goodput_first_attempt_rps")])
    if not rows:
        return []
    headers = ("policy", "tier", "client", "att/req", "done share", "timeouts", "p50 done s",
               "1st-try goodput")
    return [render(headers, rows), textwrap.fill(CLIENTS_SAID, WIDTH, subsequent_indent="  "),
            ""]


CLIENTS_SAID = ("(att/req: attempts per offered request; done share: the share of offered "
                "requests completed whatever the attempts it took; timeouts: requests whose "
                "client gave up; p50 done s: median seconds from the first attempt to the last "
                "token, over those completed; 1st-try goodput: requests completed within their "
                "tier's SLO on their first attempt, per second of the arrival window)")
"""What the retries table's columns are, as the line under it says."""


def slo_line(targets: Mapping[str, tuple[float | None, ...]]) -> str:
    """``SLO att: share of offered requests with TTFT <= x s and TPOT <= y s (tier: x, y; ...)``,
    then each tier's queue timeout where a target's third figure gives it (the deadline
    ``expired`` counts, which the units note above it defines: a deadline nobody set must be
    said, the default tiers' 10 s and 600 s; the definition is not said twice)."""
    parts = "; ".join(f"{tier} TTFT<={_fmt(float(t[0] or 0))} s, TPOT<={_fmt(float(t[1] or 0))} s"
                      for tier, t in targets.items())
    waits = ", ".join(f"{tier} {t[2]:,g} s" if t[2] is not None and math.isfinite(t[2]) else
                      f"{tier} none" for tier, t in targets.items() if len(t) > 2)
    whose = "tiers' queue timeouts" if len(targets) > 1 else "tier's queue timeout"
    return ("SLO att: share of offered requests completed within their tier's targets ("
            + parts + ")" + (f"; the {whose}: {waits}" if waits else ""))


CONTEXT_REASONS = ("prompt_too_long", "context_length")
"""The reasons of a refusal for the model's context (``workloads/context_limit.py``)."""
ENGINE_TOO_LARGE = "max_model_len"
"""The reason of the engine's own too-large refusal (``simulator/run.py`` ``_admit``: a request
``ServingEngine.fits`` says could never run there, its prompt's blocks over the whole KV cache)."""
NOT_REFUSED = ("deadline", "end_of_run")
"""Reasons of requests that expired (``simulator/run.py``): the table's own ``expired`` column."""


def _said_elsewhere(s: Mapping[str, Any]) -> set[str]:
    """The refusal reasons of ``s`` another line counts already: the model's context's when
    its ``assumed`` line (``simulator/limits_said.py``, vLLM's default ``max_model_len``) says
    them, the engine's queue caps' when the summary has caps (``results.features_said.queue_caps_line``), and
    never a time-limited stage's requests not sent or cancelled at the tool's limit: the
    client's, not refusals (``results.said.time_limit_said`` says them)."""
    said: set[str] = set()
    if any(CONTEXT_DEFAULT_REFUSED in str(a) for a in s.get("assumed", ())):
        said.update(CONTEXT_REASONS)
    if (s.get("engine") or {}).get("queue_caps"):
        said.update(f"engine_{knob}" for knob in (s.get("engine") or {})["queue_caps"])
    said.update(TIME_LIMIT_REASONS)
    return said


def _refused_line(summaries: Sequence[dict[str, Any]]) -> str:
    """Why each run refused what it refused (``overall.rejections_by_reason``, and the
    gateway's own refusals, which carry no reason), or ``""`` when none refused any: the
    table's ``refused`` column counts them all, and a reader must not guess which limit.
    Refusals another line counts (:func:`_said_elsewhere`; the default tiers' limit's, the
    summary's ``gateway_too_large``) are not said again here; the gateway's refusals of
    requests beyond the model's context are said as the context's, as the assumed lines say
    them (``simulator/limits_said.py``)."""
    parts = []
    for s in summaries:
        overall = s.get("overall") or {}
        reasons = dict(overall.get("rejections_by_reason") or {})
        # the gateway's refusals (no reason) the assumed lines count: the default tiers'
        # limit's, and those beyond the model's context, said as the context's
        first = dict(s.get("gateway_too_large") or {})
        assumed_tiers = int(first.pop("default_tiers", 0))
        for r, n in first.items():
            reasons[r] = int(reasons.get(r, 0)) + int(n)
        elsewhere = _said_elsewhere(s)
        context = (s.get("engine_knobs") or {}).get("max_model_len")
        words = {"prompt_too_long": "prompt_too_long (prompt over the model's context"
                 + (f", {int(context):,} tokens)" if context else ")"),
                 "context_length": "context_length (max_tokens over it)" if (
                     s.get("engine") or {}).get("engine") in CUTTING_ENGINES else
                 "context_length (prompt + max_tokens over it)",
                 ENGINE_TOO_LARGE: f"{ENGINE_TOO_LARGE} (the engine's: it could never run "
                 "them, prompt + output over its max_model_len or the prompt's blocks over its "
                 "whole KV cache)"}
        gateway = int(overall.get("rejected_too_large") or 0) - assumed_tiers - sum(
            int(reasons.get(r, 0)) for r in (*CONTEXT_REASONS, ENGINE_TOO_LARGE))
        said = ([f"{gateway:,} too large for the gateway (a tier's max_sequence_tokens or the "
                 "KV capacity)"] if gateway > 0 else [])
        said += [f"{int(n):,} {words.get(r, r)}" for r, n in reasons.items()
                 if n and r not in NOT_REFUSED and r not in elsewhere]
        if said:
            parts.append(f"{s.get('policy', '')}: " + ", ".join(said))
    return "refused: " + "; ".join(parts) if parts else ""


QUANTILES_OVER = ("over the completed requests (refused and expired ones have none), TTFT from "
                  "arrival at the gateway, its wait included")
"""Which requests a run's latency quantiles are over and where its TTFT starts: the runs'
tables (:func:`units_note`) and the studies' (``sweep``, ``compare -r``, ``plan``), whose
figures are means of the runs' own, say it in these words."""


def units_note(wide: bool, window: Any) -> str:
    """The note under the runs' tables (without its closing parenthesis): units, the requests
    each figure is over, the spans of the rates; ``wide`` explains the --wide columns."""
    quantiles = "TTFT, TPOT, ITL and E2E quantiles" if wide else "TTFT and TPOT p99"
    refused = ("rej: answered too-large or overloaded; dropped: dropped after preemption; "
               "preempt: the engine preemptions and gateway revocations of the tier's requests"
               if wide else "refused: answered too-large or overloaded, or dropped after "
               "preemption")
    kv = (f"{'KV used p99' if wide else 'used p99'}: the tokens in use, 99th percentile of the "
          "timeline's samples, and KV capacity in tokens; res. eff.: KV used over KV reserved"
          + ("; wall s: the wall-clock time the run itself took to compute or replay" if wide
             else "; preempt, revoke: the engine's preemptions, the gateway's revocations"))
    note = (f"(times in seconds; {quantiles}: {QUANTILES_OVER}; "
            "KV used/reserved are time-weighted fractions of capacity over the same span as "
            f"out tok/s; {kv}; {refused}; expired: "
            "waited past the tier's queue timeout; out tok/s: output tokens of the completed "
            "requests over the time the run's work took, first arrival to last finish, one span "
            "for every tier's row (the tiers' add up to all)")
    if window is not None:
        note += (f"; goodput/s and 'tok/s arr. win'{'' if wide else ' (--wide)'} over the "
                 f"arrival window of {_fmt(float(window))} s, first to last arrival; drain s: "
                 "after the last arrival")
    return note


def _few(done: Sequence[int]) -> int | None:
    """The fewest completed requests of the rows that completed any, where a p99 over them
    rests on :data:`~kvbudget.analysis.validation.FEW_FOR_P99` or fewer; None otherwise."""
    fewest = min((n for n in done if n > 0), default=0)
    return fewest if 0 < fewest <= FEW_FOR_P99 else None


def few_completed_said(summaries: Sequence[dict[str, Any]]) -> str:
    """The clause of the note under the runs' tables where a row's p99 rests on 100 completed
    requests or fewer (:data:`~kvbudget.analysis.validation.FEW_FOR_P99`): it is then between
    the two largest values, about the maximum; ``""`` where every row has more."""
    fewest = _few([int(b.get("completed") or 0) for s in summaries
                   for b in (s.get("overall") or {}, *(s.get("tiers") or {}).values())
                   if isinstance(b, Mapping)])
    if fewest is None:
        return ""
    return (f"; a p99 over {FEW_FOR_P99} completed requests or fewer (a row's done; here as few "
            f"as {fewest:,}) lies between the two largest values, about the maximum, which one "
            "request moves")


def few_in_runs_said(runs: Sequence[Mapping[Any, Any]], tiers: Sequence[str]) -> str:
    """The clause of a study's note where a run's p99 of one of ``tiers`` (a runs table's
    ``{tier}_completed``, ``overall`` for every tier's) rests on 100 completed requests or
    fewer (:data:`~kvbudget.analysis.validation.FEW_FOR_P99`, as :func:`few_completed_said`
    says it under simulate's table): it is then between the two largest values, about the
    maximum; ``""`` where every run has more."""
    fewest = _few([int(n) for r in runs for t in tiers
                   if isinstance(n := r.get(f"{t}_completed"), int | float) and math.isfinite(n)])
    if fewest is None:
        return ""
    return (f" (a p99 over {FEW_FOR_P99} completed requests or fewer, here as few as "
            f"{fewest:,} in a run, lies between the two largest values, about the maximum, "
            "which one request moves)")


def render_summaries(summaries: Sequence[dict[str, Any]], wide: bool = False,
                     slo_targets: Mapping[str, tuple[float | None, ...]] | None = None,
                     conclusion: str | None = None, defaults: str | None = None) -> str:
    """The runs side by side: outcomes and latencies per tier, KV figures, the parameters,
    the notes on units; ``slo_targets`` (tier -> (TTFT s, TPOT s[, queue timeout s])) adds the
    targets behind ``SLO att``, ``conclusion`` a last line (:func:`kvbudget.analysis.conclusion.conclude`);
    ``defaults`` (:func:`kvbudget.cli.options.defaults_said`: the GPU or model left to the
    default scenario's) under the ``simulated:`` line it qualifies."""
    rows: list[list[Any]] = []
    for s in summaries:
        rows.extend(summary_rows(s, wide))
    kv = [kv_rows(s, wide) for s in summaries]
    headers = SUMMARY_HEADERS if wide else ("policy", "tier", *(h for h, _ in _NARROW))
    kv_headers = KV_HEADERS if wide else KV_NARROW
    window = summaries[0].get("offered_window_s") if summaries else None
    setting = setting_lines(summaries)
    if defaults is not None:
        setting.insert(1 if setting[:1] and setting[0].startswith("simulated:") else 0,
                       fill(defaults))
    lines = [*setting, render(headers, rows), "", *client_lines(summaries),
             render(kv_headers, kv),
             textwrap.fill("policy parameters: " + "; ".join(params_line(s) for s in summaries),
                           WIDTH, subsequent_indent="  ")]
    for extra in (_refused_line(summaries), *feature_lines(summaries)):
        if extra:
            lines.append(textwrap.fill(extra, WIDTH, subsequent_indent="  "))
    note = units_note(wide, window) + few_completed_said(summaries)
    lines.append(textwrap.fill(note + ")", WIDTH, break_on_hyphens=False))
    # the targets of the tiers the runs offered requests in (not a tier the workload never used)
    offered = {t for s in summaries for t, b in (s.get("tiers") or {}).items() if b.get("offered")}
    targets = {t: v for t, v in (slo_targets or {}).items() if t in offered or not offered}
    if targets:
        lines.append(textwrap.fill(slo_line(targets), WIDTH, subsequent_indent="  "))
    if conclusion:  # a figure and its per cent sign on one line ("67 %", not "67\n  %")
        lines.append(textwrap.fill(conclusion.replace(" %", "\xa0%"), WIDTH,
                                   subsequent_indent="  ").replace("\xa0%", " %"))
    return "\n".join(lines)


def plus_minus(mean: float, low: float, high: float) -> str:
    """``mean ± half-width`` (a t interval is symmetric), ``mean`` without one, ``-``."""
    if not math.isfinite(mean):
        return "-"
    if not (math.isfinite(low) and math.isfinite(high)):
        return _fmt(mean)
    return f"{_fmt(mean)} ± {_half_width((high - low) / 2)}"


def _half_width(half: float) -> str:
    """An interval's half-width to two significant digits, as the figure beside it is written
    (``120``, ``1,100``), never in exponent notation (``1.2e+02``)."""
    rounded = float(f"{half:.2g}")
    return f"{rounded:,.0f}" if abs(rounded) >= 100 else f"{half:.2g}"


def _p(p: float) -> str:
    if not math.isfinite(p):
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


# ``out tok/s`` is the single-run tables' label of the tokens over the run (first arrival to last
# finish); the rate over the arrival window is ``tok/s arr. win``, as in their --wide columns
_SHORT = (("sustained_output_tokens_per_s", "out_tok/s"),
          ("output_tokens_per_s", "tok/s_arr._win"), ("slo_attainment", "slo_att"),
          ("goodput_rps", "goodput/s"), ("offered_rate_rps", "offered_req/s"),
          ("interactive_", "inter._"))


def short_metric(column: str) -> str:
    """A runs-table column, shorter (``interactive_ttft_p99_s`` -> ``interactive ttft p99``)."""
    for long, short in _SHORT:
        column = column.replace(long, short)
    if column.endswith("_s") and not column.endswith("tok/s"):
        column = column[:-2]
    return column.replace("_", " ")


def render_comparison(comparison: Any, wide: bool = False) -> str:
    """A replicated comparison (:class:`kvbudget.studies.compare.Comparison`): per metric and
    policy the mean with its interval, and against the first policy the paired difference,
    its interval, p and the verdict."""
    c = comparison
    base = c.policies[0]
    level = f"{c.confidence:.0%}"
    rows = []
    records = c.table.to_dict(orient="records")
    shown = {r["metric"] for r in records if math.isfinite(r["mean"])}
    for r in records:
        if r["metric"] not in shown:  # e.g. a tier this workload does not offer
            continue
        diff = "" if r["policy"] == base else plus_minus(r["diff"], r["diff_low"], r["diff_high"])
        row = [short_metric(r["metric"]) if not wide else r["metric"], r["policy"],
               plus_minus(r["mean"], r["low"], r["high"]), diff]
        if wide:
            row.append("" if r["policy"] == base else _p(r["p"]))
        rows.append([*row, r["verdict"]])
    headers = ("metric", "policy", f"mean ± {level} CI", f"vs {base} ± {level} CI",
               *(("p",) if wide else ()), "verdict")
    params = "; ".join(
        f"{n}: " + (", ".join(f"{k}={_fmt(v)}" for k, v in c.params[n].items())
                    or "no parameters") for n in c.policies)
    notes = [
        f"{c.replications} replications per policy on common random numbers (replication r "
        "of every policy sees the same requests); paired t test of each policy against "
        f"{base}; 'within noise': the difference's interval holds 0.",
        "policy parameters: " + params,
        "times (ttft, tpot, itl, e2e, drain) in seconds; ttft, tpot and e2e quantiles: each "
        f"run's, {QUANTILES_OVER}; out tok/s: output tokens over the time the work took, first arrival to last finish; other rates (tok/s arr. win, "
        "goodput/s) over the offered window, first to last arrival; drain_s is the time after "
        "the last arrival.",
    ]
    return "\n".join([render(headers, rows), *(textwrap.fill(n, WIDTH, subsequent_indent="  ")
                                              for n in notes)])


INTERVAL_FIGURES = (  # (label, figure key of kvbudget.studies.intervals.headline)
    ("TTFT p50", "ttft_s.p50"), ("TTFT p99", "ttft_s.p99"), ("TPOT p50", "tpot_s.p50"),
    ("TPOT p99", "tpot_s.p99"), ("E2E p50", "e2e_s.p50"), ("E2E p99", "e2e_s.p99"),
    ("out tok/s", "sustained_output_tokens_per_s"), ("goodput/s", "goodput_rps"),
    ("SLO att", "slo_attainment"), ("completed", "completed"),
)


def render_intervals(figures: Mapping[str, Mapping[str, float]], intervals: Mapping[str, Any]
                     ) -> str:
    """The run's headline figures (``figures[scope][key]``) with their intervals (an
    :meth:`Intervals.to_json <kvbudget.studies.intervals.Intervals.to_json>`), a row each."""
    level = float(intervals["level"])
    pct = f"{level * 100:g} %"
    rows = []
    for scope, band in intervals["figures"].items():
        for label, key in INTERVAL_FIGURES:
            low, high = band.get(key, (None, None))
            rows.append([scope, label, figures.get(scope, {}).get(key), low, high])
    head = (f"{pct} intervals over {counted(intervals['num_draws'], 'draw')} ({intervals['method']}; "
            "docs/fidelity.md, \"Predictions with intervals\"):")
    said = ("(times in seconds; out tok/s: output tokens of the completed requests over the time "
            "the work took, first arrival to last finish; goodput/s: completed requests within "
            "their tier's SLO per second of the arrival window)")
    return "\n".join([textwrap.fill(head, WIDTH, subsequent_indent="  "),
                      render(("tier", "figure", "value", f"{pct} low", f"{pct} high"), rows),
                      textwrap.fill(said, WIDTH, subsequent_indent="  ")])
