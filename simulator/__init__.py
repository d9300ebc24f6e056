"""The engine model: a SimPy model of vLLM-style serving engines, cost models, presets, metrics.

Kept import-light on purpose: ``simulator.records``, ``simulator.metrics``, ``simulator.results``
and ``simulator.cost_model`` never import SimPy or the engine, so ``backends`` can use them.
"""
