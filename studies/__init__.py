"""Studies built from many simulations: sweeps, tuning, capacity search, the regression gate,
and the executors that run them (local cores or Ray)."""
