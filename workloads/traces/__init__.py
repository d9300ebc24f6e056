"""Real trace formats: load any of them as a :class:`~workloads.workload.Workload`.

Importing this package is cheap (numpy only); pyarrow and pandas load when a file is read.
"""

from workloads.errors import TraceError
from workloads.traces.load import detect_format, load_trace
from workloads.traces.options import (
    CANONICAL_COLUMNS,
    DEFAULT_MAX_OUTPUT_TOKENS,
    FORMATS,
    TraceOptions,
)
from workloads.traces.report import LoadedTrace, LoadReport
from workloads.traces.save import SAVE_SUFFIXES, save_workload

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
