"""Real trace formats: load any of them as a :class:`~kvbudget.workloads.workload.Workload`.

Importing this package is cheap (numpy only); pyarrow and pandas load when a file is read.
"""

from kvbudget.workloads.errors import TraceError
from kvbudget.workloads.traces.load import detect_format, load_trace
from kvbudget.workloads.traces.options import (
    CANONICAL_COLUMNS,
    DEFAULT_MAX_OUTPUT_TOKENS,
    FORMATS,
    TraceOptions,
)
from kvbudget.workloads.traces.report import LoadedTrace, LoadReport
from kvbudget.workloads.traces.save import SAVE_SUFFIXES, save_workload

__all__ = [
    "CANONICAL_COLUMNS",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "FORMATS",
    "SAVE_SUFFIXES",
    "LoadReport",
    "LoadedTrace",
    "TraceError",
    "TraceOptions",
    "detect_format",
    "load_trace",
    "save_workload",
]
