"""The performance model: hardware and model specifications, KV-cache capacity, step-time cost
models and their fitting. SimPy-free, so the simulator and the live side share it."""
