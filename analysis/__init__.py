"""Analysis of run results, simulated or measured: tables, plots, the HTML report, Pareto
fronts and simulated-vs-measured validation. Reads :mod:`kvbudget.results`; never runs a
simulation."""
