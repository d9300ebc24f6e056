"""Workloads: synthetic generators and real trace formats, all producing one :class:`Workload`.

- :mod:`kvbudget.workloads.synthetic`: arrival processes, length distributions, tier mixes.
- :mod:`kvbudget.workloads.spec`: the ``[workload]`` table of a scenario file and ``build_workload``.
- :mod:`kvbudget.workloads.traces`: ``load_trace`` for the public trace formats, ``save_workload``.
- :mod:`kvbudget.workloads.stats`: the statistics ``kvbudget trace stats`` prints.
- :mod:`kvbudget.workloads.fetch`: download the public originals, checksum-verified.
"""

from kvbudget.workloads.errors import SpecError, TraceError
from kvbudget.workloads.workload import Workload, from_columns

__all__ = ["SpecError", "TraceError", "Workload", "from_columns"]
