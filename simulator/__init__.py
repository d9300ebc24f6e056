"""The engine model: a SimPy model of vLLM-style serving engines (paged KV blocks, continuous
batching, chunked prefill, preemption), its variants for other engines, fleets, scenarios and the
run driver. Step times come from :mod:`kvbudget.perf`; records from :mod:`kvbudget.results`."""
