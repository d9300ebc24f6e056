"""``kvbudget --help``'s panels and every command's two examples (shown under its ``--help``).

Kept apart from the commands so that the help stays one table to read and to test
(``tests/cli/test_help_panels.py`` checks that every command has a panel and two examples whose
flags its parser takes). The help stays click's plain format (``rich_markup_mode=None`` in
:mod:`kvbudget.cli.main`): the panels are click sections, the examples an epilog."""

from __future__ import annotations

PANELS: dict[str, tuple[str, ...]] = {
    "Simulate a what-if": ("simulate", "compare", "presets"),
    "Studies (many simulations)": ("sweep", "tune", "capacity", "plan", "regress"),
    "Your recordings and live servers": ("calibrate", "validate", "replay", "serve",
                                         "report"),
    "Inputs: traces and step times": ("trace", "profile", "profile-fit"),
}
"""The top-level commands by what a user comes to do, in the order ``kvbudget --help`` shows."""

SUMMARIES: dict[str, str] = {
    "simulate": "Simulate one policy on a scenario (the embedded default when none is given).",
    "compare": "Run the same workload and seed under each policy and print them side by side.",
    "presets": "List the GPU and model presets, vLLM's engine defaults per GPU and the KV "
               "capacity.",
    "profile": "Time prefill and decode steps of a model on this machine (needs "
               "kvbudget[profile]).",
    "profile-fit": "Fit the linear cost model to a profile; write a file for simulate "
                   "--cost-model.",
    "regress": "Run a suite of scenarios and compare their metrics with the baselines.",
    "replay": "Replay a trace (or a load tool's recording, --records) through an admission "
              "policy against a live OpenAI-compatible server.",
    "serve": "Run the admission gateway: an OpenAI-compatible server that admits each request "
             "with the policy (tier limit, token lease, queue or Overloaded) before forwarding it "
             "upstream.",
    "calibrate": "Fit the cost model for simulate --cost-model: to a live server's step times "
                 "(--url), or to a recorded run's latencies (--records, offline).",
    "validate": "Simulate with the calibrated model and compare per metric: against a live "
                "replay of a trace (--url), or against a recorded run (--records, offline).",
    "sweep": "Simulate a grid of configurations x replications into one table (a row per "
             "run).",
    "tune": "Find the parameters that optimise an objective subject to constraints.",
    "capacity": "The largest arrival rate each policy sustains at the SLO attainment target "
                "(DistServe's per-GPU goodput), by bisection on the load with replications.",
    "report": "Write one self-contained HTML report (figures embedded) and PNGs for one or more "
              "runs.",
    "plan": "The cheapest deployment meeting the SLOs: GPU type x tensor parallelism x replicas "
            "x admission policy (and its main parameter), ranked by dollars per hour.",
    "trace": "Inspect, convert, generate and download workload traces.",
}
"""Each command's first sentence, as its help starts: ``kvbudget --help`` lists the commands
from these without importing their modules (tests/cli/test_help_panels.py checks they match)."""

POLICY_NAMES = ("unlimited, conservative, overcommit, preemptive, quantile, adaptive, peak or "
                "early_reject (README.md, \"Policies\")")
"""The policies a ``--policy`` option takes, for its help (tests/cli/test_help_panels.py checks
the list against ``kvbudget.policies.POLICIES``)."""

EXAMPLES: dict[str, tuple[str, str]] = {
    "simulate": ("kvbudget simulate --policy overcommit --out runs/oc",
                 "kvbudget simulate --trace trace.csv --gpu H100-80GB --model Llama-3.1-8B"),
    "compare": ("kvbudget compare",
                "kvbudget compare --policies conservative,overcommit -r 5 --gpu H200"),
    "presets": ("kvbudget presets", "kvbudget presets > presets.txt"),
    "sweep": ("kvbudget sweep --policies overcommit --grid policy_params.overcommit_ratio=0.5:1:3 "
              "--out runs/sw",
              "kvbudget sweep --policies conservative,overcommit -r 3 --out runs/sw2"),
    "tune": ("kvbudget tune --policy overcommit --param policy_params.overcommit_ratio=0.1:1 "
             "--out runs/tuned",
             "kvbudget tune --param engine.max_num_seqs=64:512:int -r 3 --validate 5 "
             "--out runs/tuned2"),
    "capacity": ("kvbudget capacity --out runs/cap",
                 "kvbudget capacity --policies conservative --gpu H200 --out runs/cap2"),
    "plan": ("kvbudget plan --gpus H100-80GB,H200-141GB --replicas 1,2 --out runs/plan",
             "kvbudget plan --gpus H100-80GB --replicas 1,2,4 --top 5 --out runs/plan2"),
    "regress": ("kvbudget regress scenarios --baseline scenarios/baselines",
                "kvbudget regress scenarios --baseline scenarios/baselines --update"),
    "calibrate": ("kvbudget calibrate --records bench.json --gpu H100-80GB --out cost.json",
                  "kvbudget calibrate --url http://127.0.0.1:8000 --out cost.json"),
    "validate": ("kvbudget validate --records bench.json --cost-model cost.json --out val/",
                 "kvbudget validate --records bench.json --holdout 0.5 --gpu H100 --out val2/"),
    "replay": ("kvbudget replay --url http://127.0.0.1:8000 --trace trace.csv --out runs/live",
               "kvbudget replay --url http://127.0.0.1:8000 --trace trace.csv --users 16 "
               "--out runs/closed"),
    "serve": ("kvbudget serve --upstream http://127.0.0.1:8000 --scenario tuned.toml --port 8100",
              "kvbudget serve --upstream http://10.0.0.5:8000 --host 0.0.0.0 --keys keys.txt "
              "--out runs/prod"),
    "report": ("kvbudget report runs/oc --out reports/oc",
               "kvbudget report runs/oc --measured runs/live --out reports/oc-vs-live"),
    "trace": ("kvbudget trace stats trace.csv",
              "kvbudget trace convert trace.csv --out trace.parquet"),
    "profile": ("kvbudget profile --model config.json --out prof.csv",
                "kvbudget profile --model config.json --out prof.csv --fit-out cost.json"),
    "profile-fit": ("kvbudget profile-fit prof.csv --out cost.json",
                    "kvbudget profile-fit prof.csv --out cost.json --gpu H200 --model "
                    "Llama-3.1-8B"),
}
"""Two command lines per top-level command (``trace`` for its group)."""


def epilog(command: str) -> str | None:
    """The ``Examples:`` block of ``command``'s help (click keeps ``\\b`` paragraphs as they
    are), or None for a command without examples."""
    examples = EXAMPLES.get(command)
    if examples is None:
        return None
    return "\b\nExamples:\n" + "\n".join(f"  {line}" for line in examples)
