"""A directory that is no kvbudget run: a load tool's output folder, named with the file in it
to pass.

People pass the folder a load tool wrote (AIPerf's ``artifacts/<run>/``, inference-perf's
report directory, GuideLLM's output directory, a folder of ``vllm bench serve`` results) where
``--records`` takes one of its files. Such a folder was read as a ``kvbudget replay`` run
directory and refused as "not a run directory (requests.parquet is missing)", which named
neither the tool nor the file to pass. :func:`tool_dir_refusal` names them, one line.

The file names are the tools' defaults: AIPerf ``profile_export.jsonl`` beside
``profile_export_aiperf.json`` (ai-dynamo/aiperf ``docs/tutorials/working-with-profile-exports
.md``); inference-perf ``per_request_lifecycle_metrics.json`` beside its
``stage_N_lifecycle_metrics.json`` and ``summary_lifecycle_metrics.json`` (kubernetes-sigs/
inference-perf ``demos/kubecon-na-2025/*/results/``), and, collecting the server's metrics, its
``summary_prometheus_metrics.json`` and ``stage_N_prometheus_metrics.json`` (inference-perf
0.7.0 ``reportgen/base.py``, ``generate_prometheus_metrics_report``; written also where
``report.request_lifecycle`` writes nothing), its ``adapter_<name>[_stage_N]_lifecycle_metrics
.json`` (per LoRA adapter) and a trace session replay's ``per_session_``, ``summary_session_``
and ``stage_N_session_lifecycle_metrics.json`` (``generate_session_reports``); GuideLLM ``benchmarks.json`` (or
``.yaml``); genai-perf ``profile_export.json`` beside ``profile_export_genai_perf.json``; LLMPerf
``<model>_<input>_<output>_individual_responses.json`` beside its ``_summary.json``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from kvbudget.results.recorded_locust import locust_dir_refusal
from kvbudget.results.recorded_summaries import summary_refusal
from kvbudget.results.recorded_vllm_benchmark import vllm_benchmark_dir_refusal
from kvbudget.results.run_result import REQUESTS_FILE, SUMMARY_FILE, TIMELINE_FILE
from kvbudget.workloads.text_files import open_utf8, read_text

PER_REQUEST_FILES: dict[str, str] = {
    "profile_export.jsonl": "AIPerf",
    "per_request_lifecycle_metrics.json": "inference-perf",
    "benchmarks.json": "GuideLLM",
    "benchmarks.yaml": "GuideLLM",
}
"""A load tool's per-request file by its default name, and the tool."""
SUMMARY_FILES: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (re.compile(r"(stage_\d+|summary|adapter_.+)_lifecycle_metrics\.json"), "inference-perf",
     "rerun it with report.request_lifecycle.per_request: true in its config, which writes "
     "per_request_lifecycle_metrics.json"),
    (re.compile(r"(stage_\d+|summary)_prometheus_metrics\.json"), "inference-perf",
     "they are the model server's Prometheus metrics over the run (report.prometheus), not "
     "the requests' send times or tokens; rerun it with report.request_lifecycle.per_request: "
     "true in its config, which writes per_request_lifecycle_metrics.json"),
    (re.compile(r"(per_session|summary_session|stage_\d+_session)_lifecycle_metrics\.json"),
     "inference-perf",
     "they are its session reports of a trace session replay (report.session_lifecycle: per "
     "session or over sessions), not the requests' send times or tokens; rerun it with "
     "report.request_lifecycle.per_request: true in its config, which writes "
     "per_request_lifecycle_metrics.json"),
    (re.compile(r"profile_export_aiperf\.(json|csv)"), "AIPerf",
     "its profile_export.jsonl (the per-request records) is missing beside it"),
    (re.compile(r"profile_export_genai_perf\.(json|csv)"), "genai-perf",
     "genai-perf keeps no token counts per request: rerun with AIPerf"),
)
"""A load tool's aggregates file (a name pattern), its tool, and what to do instead."""
KVBUDGET_FILES = (REQUESTS_FILE, TIMELINE_FILE, SUMMARY_FILE, "replay.json")
"""A kvbudget run directory's files (``results/run_result.py``; ``replay.json`` a replay's or
a serve run's meta, written first; ``*.part.jsonl`` a serve run's rows as they end)."""
DATA_SUFFIXES = (".json", ".jsonl", ".yaml", ".yml", ".csv", ".parquet", ".db")
SHOWN = 3
RECORDS_USAGE = "--records {}"
"""How a command that reads a recording with ``--records`` (validate, calibrate, replay) is
given one file: the default form a folder's refusal names its file in. ``trace convert`` takes
the file positionally and ``report`` none (it takes the simulated run validate writes): each
passes its own form (``{}`` the file)."""


def _listed(paths: list[Path], base: Path) -> str:
    names = [str(p.relative_to(base)) for p in paths[:SHOWN]]
    more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
    return ", ".join(names) + more


def _per_request(path: Path, usage: str) -> str | None:
    """The per-request files of a known tool in ``path``, one folder down (a sweep's runs:
    AIPerf's ``rate_4.0/``...) or else two (AIPerf's ``--num-profile-runs``:
    ``profile_runs/run_0001/``...), named, the first in the command's form ``usage``."""
    here = [path / n for n in PER_REQUEST_FILES if (path / n).is_file()]
    if here:
        tool = PER_REQUEST_FILES[here[0].name]
        return (f"is {tool}'s output directory, not a kvbudget run directory (no "
                f"{REQUESTS_FILE}): pass its per-request file, {usage.format(here[0])}")
    below = next((found for depth in ("*/", "*/*/")
                  if (found := sorted(p for n in PER_REQUEST_FILES
                                      for p in path.glob(f"{depth}{n}") if p.is_file()))), [])
    if not below:
        return None
    tool = PER_REQUEST_FILES[below[0].name]
    if tool == "AIPerf" and all(_profile_run(p) for p in below):
        return (f"holds {len(below)} runs of AIPerf's --num-profile-runs, {len(below)} "
                f"repeats of one load (profile_runs/run_NNNN/, by default only the first with "
                f"AIPerf's "
                f"warm-up), not a kvbudget run directory (no {REQUESTS_FILE}); any one of them "
                f"can be validated: pass its per-request file ({_listed(below, path)}), e.g. "
                f"{usage.format(below[0])}")
    return (f"holds {len(below)} {tool} run(s) in its folders, not a kvbudget run directory "
            f"(no {REQUESTS_FILE}): pass one run's per-request file ({_listed(below, path)}), "
            f"e.g. {usage.format(below[0])}")


PROFILE_RUN = re.compile(r"run_\d{4}")
"""A run's folder of AIPerf's ``--num-profile-runs N`` (N > 1, no sweep): each run of the same
benchmark in ``<artifacts>/profile_runs/run_NNNN/`` beside ``aggregate/`` (its statistics over
the runs); AIPerf runs its warm-up before the first only unless told otherwise (ai-dynamo/aiperf
0.13.0 ``orchestrator/strategies.py``, ``FixedTrialsStrategy``: ``get_run_path``,
``disable_warmup_after_first``; ``orchestrator/orchestrator.py``, the artifact layouts). A
sweep's repeats are ``trial_NNNN`` folders of one of its points, not named so."""


def _profile_run(path: Path) -> bool:
    """Whether ``path`` is a per-request file of one of AIPerf's ``--num-profile-runs``."""
    return PROFILE_RUN.fullmatch(path.parent.name) is not None and \
        path.parent.parent.name == "profile_runs"


GENAI_PERF_REQUESTS = "profile_export.json"
"""genai-perf's per-request file (perf_analyzer's export): each request's timestamps and text,
no token counts (``recorded_summaries``), so none kvbudget can replay."""


LLMPERF_REQUESTS = re.compile(r".+_individual_responses\.json")
"""LLMPerf's per-request file (github.com/ray-project/llmperf ``token_benchmark_ray.py``:
``<model>_<input>_<output>_individual_responses.json`` beside its ``_summary.json``), which
lists no send time (``recorded_summaries``), so none kvbudget can replay."""


PROMETHEUS_SUMMARY_KEYS = frozenset({"kv_cache_usage_percentage", "num_requests_running",
                                     "queue_len"})
"""Keys of the ``successes`` of inference-perf's summary of the server's Prometheus metrics
(0.7.0 ``reportgen/base.py``, ``summarize_prometheus_metrics``), which its summary of the
requests (``summarize_requests``) does not write."""


def inference_perf_prometheus_refusal(doc: dict[str, object]) -> str | None:
    """Why inference-perf's ``summary_prometheus_metrics.json`` or
    ``stage_N_prometheus_metrics.json`` (its summary layout, ``load_summary`` and
    ``successes``, filled from the server's metrics) cannot be read, or None for another
    file."""
    successes = doc.get("successes")
    if "load_summary" not in doc or not isinstance(successes, dict) or \
            not PROMETHEUS_SUMMARY_KEYS & set(successes):
        return None
    return ("is inference-perf's summary of the model server's Prometheus metrics "
            "(summary_ or stage_N_prometheus_metrics.json, report.prometheus): what the server "
            "reported over the run, not the requests' send times or tokens; pass "
            "per_request_lifecycle_metrics.json (report.request_lifecycle.per_request: true in "
            "its config)")


INPUTS_JSON = "inputs.json"
"""The request bodies genai-perf and AIPerf write into an artifact folder before sending
(``recorded_summaries._inputs_json_refusal``): ``{"data": [`` first, indented; AIPerf's
records open with ``session_id`` and hold ``payloads`` (a body a turn)."""


def _inputs_only(where: Path, base: Path) -> str | None:
    """``is <tool>'s artifact folder ...`` where ``where`` holds genai-perf's or AIPerf's
    ``inputs.json`` and none of the tool's summaries nor (AIPerf) per-request records, or
    None."""
    inputs = where / INPUTS_JSON
    try:
        with open_utf8(inputs) as f:
            head = b"".join(f.read(256).split())
    except OSError:
        return None
    if not head.startswith(b'{"data":['):
        return None
    bodies = (f"its {inputs.relative_to(base)} holds the request bodies it generated, no "
              "measurement")
    if head.startswith(b'{"data":[{"session_id":') or b'"payloads":[' in head:
        return (f"is AIPerf's artifact folder without its per-request records: {bodies}, and "
                "profile_export.jsonl is not beside it; pass that file of the run")
    measured = where / GENAI_PERF_REQUESTS
    said = (f"perf_analyzer's {measured.relative_to(base)}, each request's timestamps but no "
            "token counts" if measured.is_file()
            else f"no {GENAI_PERF_REQUESTS} (perf_analyzer's measurements)")
    return (f"is genai-perf's artifact folder: {bodies}, beside {said}, so none can be "
            "replayed: rerun with AIPerf, genai-perf's successor, whose profile_export.jsonl "
            "records each request's times and token counts")


def _summaries_in(where: Path, base: Path) -> str | None:
    """``is <tool>'s output directory ...`` for a known tool's aggregates in ``where`` (``base``
    or a folder of it, named relative to ``base``), or None."""
    llmperf = sorted(p for p in where.iterdir()
                     if p.is_file() and LLMPERF_REQUESTS.fullmatch(p.name))
    if llmperf:
        return (f"is LLMPerf's results directory, whose per-request files "
                f"({_listed(llmperf, base)}) list each request's TTFT, E2E and tokens but no "
                "send time nor which of its concurrent clients sent it, so its load cannot be "
                "replayed (its _summary.json files are aggregates): record the run with a tool "
                "kvbudget reads (docs/recordings.md)")
    for pattern, tool, instead in SUMMARY_FILES:
        found = sorted(p for p in where.iterdir() if p.is_file() and pattern.fullmatch(p.name))
        if not found:
            continue
        if tool == "genai-perf" and (where / GENAI_PERF_REQUESTS).is_file():
            return (f"is {tool}'s output directory, whose per-request file, "
                    f"{(where / GENAI_PERF_REQUESTS).relative_to(base)} (perf_analyzer's), keeps "
                    "each request's timestamps and text but no token counts (genai-perf counts "
                    "them with its tokenizer), so none can be replayed: rerun with AIPerf, "
                    "genai-perf's successor, whose profile_export.jsonl records them")
        held = "reports per session" if "session" in pattern.pattern else "aggregates only"
        return (f"is {tool}'s output directory holding {held} "
                f"({_listed(found, base)}), no per-request file: {instead}")
    return _inputs_only(where, base)


def _summaries_below(path: Path) -> str | None:
    """A known tool's aggregates one folder down (genai-perf's ``artifacts/``, one folder a
    run), where its per-request file is missing or holds no token counts, named."""
    for folder in sorted(p for p in path.iterdir() if p.is_dir()):
        below = _summaries_in(folder, path)
        if below:
            return (f"is not a kvbudget run directory (no {REQUESTS_FILE}) but a folder of a "
                    f"load tool's runs; the first, {folder.name}/, {below}")
    return None


REQUEST_LISTS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "e2els",
                 "start_times", "details")
"""The per-request lists of a serving benchmark's result (vLLM's, SGLang's nested under
``details``, TensorRT-LLM's ``e2els``): a file with any lists requests, whatever else it holds."""
SCANNED_BYTES = 1 << 20
"""A larger JSON file is not opened there (a load tool's per-request file can be)."""
SCANNED_TOTAL_BYTES = 32 << 20
"""How many bytes of a folder's JSON files are read, in all, to tell whether any lists
requests: a sweep's hundreds of small summaries are all read (each is opened until one is not
a summary), a folder of large files is not read whole."""


def _first_document(path: Path) -> object:
    """The first JSON value of a small JSON or JSON-lines file, or None."""
    try:
        if path.stat().st_size > SCANNED_BYTES:
            return None
        text = read_text(path, errors="replace")
    except (OSError, ValueError):
        return None
    for candidate in (text, text.lstrip().split("\n", 1)[0]):
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    return None


def _aggregates_only(data: list[Path], base: Path) -> str | None:
    """``is a folder of N results ...`` where each of the folder's data files is a JSON file
    that :func:`~kvbudget.results.recorded_summaries.summary_refusal` names as holding no
    request (a folder of ``vllm bench serve`` results saved without ``--save-detailed``); None
    where any is another file, large, or one kvbudget may read. The files are read in turn
    until one is not a summary or :data:`SCANNED_TOTAL_BYTES` are read; where the bytes ran out
    first, it says how many it read and that the rest were not."""
    if any(p.suffix.lower() not in (".json", ".jsonl") for p in data):
        return None
    first, num_read, budget = "", 0, SCANNED_TOTAL_BYTES
    for p in data:
        try:
            budget -= p.stat().st_size
        except OSError:
            return None
        if budget < 0:
            break
        doc = _first_document(p)
        if isinstance(doc, dict) and any(k in doc for k in REQUEST_LISTS):
            return None  # a per-request result (summary_refusal is asked only without them)
        said = summary_refusal(doc)
        if said is None:
            return None
        first = first or f"{p.relative_to(base)}, {said}"
        num_read += 1
    head = f"is not a kvbudget run directory (no {REQUESTS_FILE}) but a folder of "
    if num_read == len(data):
        return (f"{head}{len(data)} result file(s), none of which lists a request; the first, "
                f"{first}")
    if not num_read:
        return None
    return (f"{head}{len(data)} result files: the first {num_read} (the first "
            f"{SCANNED_TOTAL_BYTES / 2 ** 20:.3g} MiB read) list no request and the other "
            f"{len(data) - num_read} were not read; the first, {first}; pass one of the others "
            "if it lists its requests")


def tool_dir_refusal(path: Path, usage: str = RECORDS_USAGE) -> str | None:
    """Why the directory ``path`` cannot be read as a run, naming the file to pass in the
    command's form ``usage`` (:data:`RECORDS_USAGE`), or None where it has any file of a
    kvbudget run directory (read, and refused, as one)."""
    harness = vllm_benchmark_dir_refusal(path)  # its reports/ holds a summary.json too
    if harness:
        return harness
    if any((path / n).exists() for n in KVBUDGET_FILES) or next(path.glob("*.part.jsonl"), None):
        return None  # kvbudget's own (a damaged run, or a serve run left open): said as one
    said = _per_request(path, usage) or _summaries_in(path, path) or locust_dir_refusal(path)
    if said:
        return said
    data = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() in DATA_SUFFIXES)
    if data:
        aggregates = _aggregates_only(data, path)
        if aggregates:
            return aggregates
        return (f"is not a kvbudget run directory (no {REQUESTS_FILE}); a load tool's "
                f"recording is one of its files: it holds {len(data)} data file(s) "
                f"({_listed(data, path)}): pass one of them")
    return _summaries_below(path)


def no_data_refusal(path: Path) -> str | None:
    """Why a folder given as a recording with no data file in it or in any folder below it is
    none (it was told "not a run directory (requests.parquet is missing)", as if one file were
    missing), naming what it holds in it and one folder down; None where a data file lies
    anywhere below (a sweep's or AIPerf's profile runs' folders, named by the readers).
    ``report``, which takes a run directory, keeps its own words."""
    if any(p.suffix.lower() in DATA_SUFFIXES and p.is_file() for p in path.rglob("*")):
        return None  # (the walk stops at the first)
    held = sorted(p for p in (*path.iterdir(), *path.glob("*/*")) if p.is_file())
    kinds = ", ".join(DATA_SUFFIXES)
    if not held:
        return f"is an empty folder: no file of a recording ({kinds}) in it"
    return (f"holds no file a recording is read from ({kinds}), in it or any folder below: it "
            f"has {_listed(held, path)}")
