"""A load tool's file given where a trace is asked for, named as that tool's.

Users pass the file their load tool wrote (a ``vllm bench serve`` result, a GuideLLM report,
AIPerf's ``profile_export.jsonl``, Locust's CSVs, llama-benchy's table ...) to ``kvbudget
simulate --trace`` and every other command that takes a trace (``compare``, ``sweep``,
``tune``, ``capacity``, ``plan``, ``replay`` and ``validate --url``, ``trace stats``, a
scenario's ``[workload]`` trace). The trace loader tells none of its formats in such a file
and said only that "a load tool's result (vllm bench serve, GuideLLM, ...) is a recording";
llama-benchy's files alone were named (``cli/errors.py``'s special case). Here the
recordings' own detection (:func:`~kvbudget.results.recordings.detect_recording_format` and
the ``recorded_*`` readers, which name every known tool's file) says which tool's file it is:

- a file of per-request rows: the tool and its version (where the file says), what file it
  is and how many requests it holds, and the commands that read it (``kvbudget validate
  --records F``, ``calibrate --records``, ``trace convert F --out T.csv`` for a trace);
- a tool's file of aggregates (or a console, a server log): the reader's own refusal, which
  names the file to pass instead; so too a table of runs' figures of no tool (a CSV or JSON
  lines file, a row or line a run), which ``validate --records`` refuses as aggregate figures,
  and request objects of no tool with no send time among their keys (a harness's answers, each
  its elapsed time and usage), which no trace can be made of either;
- a file the recordings' reader cannot name either (:class:`~kvbudget.workloads.errors.
  UnknownFileError`: an unknown JSON, an empty file): None, and the trace loader's line stands.

Called on the refusal path only: importing the readers costs ~140 ms, which no start of
``kvbudget simulate`` pays (``cli/errors.py`` reaches this module through the front door's
lazy names).
"""

from __future__ import annotations

from pathlib import Path

from kvbudget.results.recorded_aggregates import NO_SEND_TIME
from kvbudget.results.recorded_dirs import tool_dir_refusal
from kvbudget.results.recorded_evalscope import DB_NAME, is_evalscope_db
from kvbudget.results.recorded_genai_bench import METADATA
from kvbudget.results.recorded_simulators import simulated_output_refusal
from kvbudget.results.recordings import (
    Recording,
    detect_recording_format,
    read_recording,
    recording_tool,
    refuse_unreadable_records,
)
from kvbudget.workloads.counted import counted
from kvbudget.workloads.errors import TraceError, UnknownFileError
from kvbudget.workloads.text_files import head_utf8
from kvbudget.workloads.traces.options import DEFAULT_PREFIX_BLOCK_TOKENS

FILE_KINDS: dict[str, str] = {
    "vllm-bench": "result",
    "guidellm": "report",
    "aiperf": "per-request records (profile_export.jsonl)",
    "inference-perf": "per-request report (per_request_lifecycle_metrics.json)",
    "llm-load-test": "output.json",
    "multi-round-qa": "summary.csv",
    "evalscope": "run database (benchmark_data.db)",
    "genai-bench": "result",
    "otel": "llm_request spans (OTLP JSON)",
    "llmd-report": "report",
    "dynamo-trace": "per-request trace (DYN_REQUEST_TRACE)",
}
"""What each recording format's file is, as its tool calls it (``validate --records``' help)."""

_TOOL_OF_FORMAT = {"otel": "vLLM", "dynamo-trace": "NVIDIA Dynamo"}
"""Where the format's reader names what wrote it, not a tool (``otel``: "vLLM llm_request
spans (OTLP JSON)"), the tool that wrote it."""


def _whose(tool: str, fmt: str, path: Path) -> str:
    """``vllm bench serve's result``, ``guidellm 0.8.1's report``."""
    kind = FILE_KINDS.get(fmt, "file")
    if fmt == "genai-bench" and path.name == METADATA:  # read with its experiment's results
        kind = f"experiment ({METADATA} and the run results beside it)"
    return f"{_TOOL_OF_FORMAT.get(fmt, tool)}'s {kind}"


def _ways_in(path: Path, out: str = "T.csv") -> str:
    return (
        f"pass it to kvbudget validate --records {path} (or calibrate --records), which "
        f"simulates its requests and compares; kvbudget trace convert {path} --out {out} "
        f"writes them as a trace {out} for a what-if (--trace {out} --rate-scale 2: twice its "
        "rate)"
    )


def _trace_file(rec: Recording) -> str:
    """The trace file ``trace convert`` can write a recording's requests to: a CSV, unless
    their prefix blocks are of another size than a CSV's ``hash_ids`` say (Mooncake's
    :data:`~kvbudget.workloads.traces.options.DEFAULT_PREFIX_BLOCK_TOKENS`), which only a
    Parquet trace keeps (``trace convert`` refuses the CSV)."""
    w = rec.workload
    other = w.prefix_hashes is not None and w.prefix_block_tokens != DEFAULT_PREFIX_BLOCK_TOKENS
    return "T.parquet" if other else "T.csv"


def _refused(path: Path, problem: str) -> str:
    """A tool's file the recordings' reader refuses by name (aggregates, a console)."""
    first = problem.split(" ", 1)[0]
    return f"{path}: not a trace: {'it ' if first in ('is', 'holds', 'was') else ''}{problem}"


NO_REQUEST_SAID = ("holds aggregate figures", "holds a configuration")
"""How the recordings' reader begins its refusal of a file of no tool it knows that holds no
request at all (:mod:`kvbudget.results.recorded_aggregates`): said where a trace is asked for
too, not sent on to ``validate --records``, which refuses it."""

_NOT_A_RUN = "is not a kvbudget run directory"
"""How :func:`~kvbudget.results.recorded_dirs.tool_dir_refusal` begins where it names no tool
(a folder of data files, of aggregates, of runs below it)."""


def _folder_named(path: Path) -> str | None:
    """A file no reader names in a load tool's run folder (evalscope perf's
    ``benchmark_args.json``, inference-perf's ``config.yaml`` and ``validation.json``,
    vllm_bench's ``response.json``): the folder, as the recordings' reader names it, and what
    to pass from it; None for any other folder."""
    folder = path.parent
    if (folder / DB_NAME).is_file() and is_evalscope_db(folder / DB_NAME):
        return (
            f"{path}: not a trace: it is a file of evalscope perf's run folder {folder}, whose "
            f"requests are in {DB_NAME}: a recording; pass the folder to kvbudget validate "
            f"--records {folder}"
        )
    said = tool_dir_refusal(folder, "kvbudget validate --records {}")
    if not said or said.startswith(_NOT_A_RUN):
        return None
    return f"{path}: not a trace: it is a file of the folder {folder}, which {said}"


def _aggregates_said(path: Path) -> str | None:
    """A CSV or JSON lines file of aggregate figures, one row or line a run (a harness's
    ``throughput.csv``: ``pp_tok_s``, ``tg_tok_s`` a model and depth, github.com/ryanilano/
    localai-16gb-bench-results 7033c75 ``results/2026-07-01_202112-debian-llm/``), as
    ``validate --records`` refuses it (:func:`~kvbudget.results.recordings.
    refuse_unreadable_records`); where a trace was asked for, the trace loader said it could
    not "tell the trace format from the header" and to "pass a format", or, of JSON lines, to
    map the missing ``output_tokens`` column (``--column output_tokens=COLUMN``) in a file of
    figures; None for any other file (a dataset, a trace, unsent results: the trace loader's
    own line says more of those)."""
    try:
        refuse_unreadable_records(path)
    except TraceError as refusal:
        if refusal.problem.startswith(NO_REQUEST_SAID[0]):
            return _refused(path, refusal.problem)
    return None


def _read_named(path: Path, rec: Recording) -> str:
    num = rec.counts.get("num_rows_read", len(rec))
    return (
        f"{path} is {_whose(rec.tool or rec.format, rec.format, path)} "
        f"({counted(num, 'request')}): "
        f"a recording, not a trace; {_ways_in(path, _trace_file(rec))}"
    )


def recording_named(path: str | Path) -> str | None:
    """The one line that says what ``path``, a file no trace format reads, is where it is a
    load tool's (see the module docstring); None where the recordings' reader cannot place it
    either, or cannot read it (the trace loader's own line says more of it)."""
    path = Path(path)
    try:
        fmt = detect_recording_format(path)
        if fmt == "run":
            return None
        if fmt == "records":  # a table of no tool named: another simulator's, or not said
            said = path.suffix.lower() == ".csv" and simulated_output_refusal(
                head_utf8(path, 1 << 16).split(b"\n", 1)[0].decode("utf-8", "replace").split(",")
            )
            return _refused(path, said) if said else _aggregates_said(path)
    except UnknownFileError as unknown:  # no tool's file this reader knows: its folder may be one's
        if unknown.problem.startswith(NO_REQUEST_SAID) or NO_SEND_TIME in unknown.problem:
            return _refused(path, unknown.problem)  # figures or settings, or requests never sent
        try:
            return _folder_named(path) if path.is_file() else None
        except (OSError, ValueError, LookupError, RecursionError):  # TraceError included
            return None
    except TraceError as refusal:  # a tool's file of aggregates, a console, a server log
        return _refused(path, refusal.problem)
    except (OSError, ValueError, LookupError, RecursionError):
        return None
    try:
        rec = read_recording(path, format=fmt)
    except TraceError as refusal:  # a tool's file of requests that its reader refuses
        if refusal.problem.startswith("is "):  # the reader names the file itself
            return _refused(path, refusal.problem)
        whose = _whose(recording_tool(path, fmt), fmt, path)
        return (
            f"{path} is {whose}: a recording, not a trace, and one kvbudget validate "
            f"--records refuses too: {refusal.problem}"
        )
    except (OSError, ValueError, LookupError, RecursionError):
        return None
    return _read_named(path, rec)
