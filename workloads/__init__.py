"""Workloads: synthetic generators and real trace formats, all producing one :class:`Workload`.

- :mod:`workloads.synthetic`: arrival processes, length distributions, tier mixes.
- :mod:`workloads.spec`: the ``[workload]`` table of a scenario file and ``build_workload``.
- :mod:`workloads.traces`: ``load_trace`` for the public trace formats, ``save_workload``.
- :mod:`workloads.stats`: the statistics ``kvbudget trace stats`` prints.
- :mod:`workloads.fetch`: download the public originals, checksum-verified.
"""

from workloads.errors import SpecError, TraceError
from workloads.workload import Workload, from_columns

__all__ = ["SpecError", "TraceError", "Workload", "from_columns"]
