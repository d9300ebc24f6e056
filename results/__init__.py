"""The run-record schema shared by the simulator and the live side: the columns of the records
and timeline tables, a run's result on disk, and its summary metrics. SimPy-free."""
