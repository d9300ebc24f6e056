"""Workloads: synthetic generators and real trace formats, all producing one :class:`Workload`."""

from workloads.workload import Workload, from_columns

__all__ = ["Workload", "from_columns"]
