"""The live side: the same gateway policies in front of a real OpenAI-compatible server
(replay, calibration against a server, the local step-time profiler). Never imports the SimPy
engine (:mod:`kvbudget.simulator`)."""
