"""What a study's result shows in a notebook (``repr``): what it was, over what (model, GPU,
workload, what loading the workload warned of or assumed), what it found, where its tables
are; not a dump of its frames and specs."""

from __future__ import annotations

from pathlib import Path

import kvbudget as kb


def _scenario(tmp_path: Path) -> kb.Scenario:
    trace = tmp_path / "lengths.csv"  # lengths only: no arrivals, no tier, no max_tokens
    trace.write_text("prompt_tokens,output_tokens\n" + "".join(
        f"{p},{o}\n" for p, o in zip(range(100, 500, 20), range(10, 210, 10), strict=True)))
    return kb.make_scenario(trace=trace, trace_format="generic")


def _said(text: str) -> list[str]:
    return [ln.split(":")[0] for ln in text.splitlines() if not ln.startswith("  ")]


ENGINE = ("engine vllm (vLLM 0.32.0's defaults for unset knobs, max_num_seqs 1,024, "
          "max_num_batched_tokens 8,192, max_model_len 131,072, chunked prefill on, prefix "
          "caching on (no prefixes to share), bfloat16 weights, 16-bit KV, block_size 16, "
          "gpu_memory_utilization 0.92)")
KV = "KV capacity 438,192 tokens (27,387 blocks), the gateway's budget"


def test_a_replicated_comparisons_repr_says_what_it_ran_over_and_found(tmp_path: Path) -> None:
    c = kb.compare(_scenario(tmp_path), ["conservative", "overcommit"], replications=2)
    lines = repr(c).splitlines()
    assert lines[0] == ("Comparison: conservative, overcommit; 2 replications each on common "
                        "random numbers, 95% intervals")
    # what `kvbudget compare -r` says on stderr, kept on the result: the trace's warning and
    # what was assumed in place of its missing columns
    # a trace names neither the model nor the GPU: the default scenario's, assumed
    assert lines[1] == ("model Llama-3.1-8B (assumed: the default scenario's) on H100-SXM "
                        f"(assumed: the default scenario's H100-80GB), {ENGINE}, {KV}; workload "
                        "lengths: 20 requests over 22.8 s (0.833 req/s: 19 gaps between arrivals)")
    assert lines[2].startswith("workload lengths: source ")
    assert c.setting == tuple(lines[1:len(c.setting) + 1])
    assert _said(repr(c))[3:6] == ["warning", "assumed", "assumed"]
    assert lines[-2].startswith("overcommit against conservative on 12 metrics: ")
    assert lines[-1] == ".table (24 rows: metric x policy), .runs (4 rows), .params"
    assert "DataFrame" not in repr(c) and "runs=" not in repr(c)


def test_a_one_run_comparisons_repr_gives_each_runs_outcome(tmp_path: Path) -> None:
    c = kb.compare(_scenario(tmp_path), ["conservative", "overcommit"])
    lines = repr(c).splitlines()
    assert lines[0] == "Comparison: conservative, overcommit; one run each on the scenario's seed"
    assert lines[1].startswith("simulated: Llama-3.1-8B (assumed: the default scenario's) on H100-SXM")
    assert lines[-3:] == ["conservative: 20 of 20 completed, SLO attainment 1",
                          "overcommit: 20 of 20 completed, SLO attainment 1",
                          ".table (24 rows: metric x policy), .runs (2 rows), .results, .params"]


def test_tune_capacity_and_plan_results_say_what_they_found_over_what(tmp_path: Path) -> None:
    from kvbudget.studies.executors import LocalExecutor
    from kvbudget.studies.tune import Constraint, Param

    scn, ex = _scenario(tmp_path), LocalExecutor(max_workers=1)
    slo = (Constraint.parse("overall_ttft_p99_s<=1000"),)  # met by every setting
    setting = ("model Llama-3.1-8B (assumed: the default scenario's) on H100-SXM (assumed: the "
               f"default scenario's H100-80GB), {ENGINE}, {KV}; workload lengths: 20 requests "
               "over 22.8 s (0.833 req/s: 19 gaps between arrivals)")
    # the trace's requests are all 'interactive': the default objective (the batch tier's) is
    # refused, so the interactive tier's is tuned
    tuned = kb.tune(kb.TuneSpec(scn, (Param("engine.max_num_seqs", 8, 64, True),),
                                objective="interactive_sustained_output_tokens_per_s",
                                constraints=slo, replications=1, grid_points=2,
                                refine_evals=0, validate=0), ex)
    lines = repr(tuned).splitlines()
    assert lines[0] == ("TuneResult: maximize interactive_sustained_output_tokens_per_s over "
                        "engine.max_num_seqs 8..64,")
    assert lines[1] == "  subject to overall_ttft_p99_s<=1000; 2 settings, 1 replication each"
    # the knob it tunes and the KV capacity that moves with it are each run's
    assert lines[2] == setting.replace("max_num_seqs 1,024, ", "").replace(f", {KV}", "")
    assert _said(repr(tuned))[3:6] == ["warning", "assumed", "assumed"]
    assert lines[-1] == ".table() (2 runs), .best_scenario(), .describe(), .write(DIR)"
    assert tuned.setting[1:] == kb.compare(scn, ["conservative"], replications=2).setting[1:]

    cap = kb.capacity(kb.CapacitySpec(scn, ("conservative",), replications=1, rel_tol=0.5,
                                      max_scale=2.0), ex)
    lines = repr(cap).splitlines()
    assert lines[0] == ("CapacityResult: the largest arrival rate meeting "
                        "overall_slo_attainment>=0.9 (mean over 1")
    assert lines[2] == setting.replace("req/s:", "req/s at rate scale 1:")  # it scales them
    c = cap.capacities[0]
    assert f"conservative: {c.capacity_rps:.4g} req/s ({c.capacity_rps_per_gpu:.4g} per GPU)" \
        in repr(cap)
    assert lines[-1] == f".table() ({len(cap.rows)} runs), .curve(), .describe()"

    planned = kb.plan(kb.PlanSpec(scn, gpus=("H100-80GB",), replicas=(1,), replications=1,
                                  slos=slo), ex)
    lines = repr(planned).splitlines()
    assert lines[0].startswith("PlanResult: the cheapest of 1 configurations (H100-80GB; TP 1;")
    assert lines[2] == (  # the GPU varies: so do the knobs whose defaults are each GPU's
        "model Llama-3.1-8B (assumed: the default scenario's) on the deployments the study "
        "tries (each with its own KV capacity and its GPU's default max_num_seqs and "
        "max_num_batched_tokens), "
        + ENGINE.replace("max_num_seqs 1,024, max_num_batched_tokens 8,192, ", "")
        + "; workload lengths: 20 requests over 22.8 s (0.833 req/s: 19 gaps between arrivals)")
    assert "cheapest: H100-80GB 1x1 conservative $2.50/h (1 GPUs)" in lines
    for result in (tuned, cap, planned):
        assert "Scenario(" not in repr(result) and "spec=" not in repr(result)


def test_study_arguments_are_refused_by_name_not_deep_or_as_nan_intervals(
        tmp_path: Path) -> None:
    import pytest

    from kvbudget.studies.tune import Param

    scn = _scenario(tmp_path)
    with pytest.raises(ValueError, match=r"policies is a list of names, got the string "
                                         r"'conservative' \(one policy: \['conservative'\]\)"):
        kb.compare(scn, "conservative")  # was: unknown policy 'c'
    with pytest.raises(ValueError, match=r"replications must be an integer >= 1, got 1.5"):
        kb.compare(scn, ["conservative"], replications=1.5)  # type: ignore[arg-type]
    # 95 for 0.95: every interval was NaN and every verdict "same" or "-", unsaid
    with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\) \(0.95 for 95 %\), "
                                         r"got 95"):
        kb.compare(scn, ["conservative", "overcommit"], replications=2, confidence=95)
    for make in (lambda: kb.CapacitySpec(scn, confidence=95),
                 lambda: kb.PlanSpec(scn, confidence=95),
                 lambda: kb.TuneSpec(scn, (Param("engine.max_num_seqs", 1, 4, True),),
                                     confidence=95)):
        with pytest.raises(ValueError, match=r"confidence must be in \(0, 1\)"):
            make()


def test_a_notebooks_studies_need_nothing_past_the_front_door(tmp_path: Path) -> None:
    # SweepPlan, Axis, Param, Constraint and an executor were reachable only from internal
    # modules, and every study but compare required an executor
    scn = _scenario(tmp_path)
    table = kb.run_sweep(kb.SweepPlan(scn, (kb.Axis("policy", ("conservative", "overcommit")),),
                                      1))
    assert list(table["policy"]) == ["conservative", "overcommit"]
    tuned = kb.tune(kb.TuneSpec(scn, (kb.Param("engine.max_num_seqs", 8, 64, True),),
                                objective="overall_sustained_output_tokens_per_s",
                                constraints=(kb.Constraint.parse("overall_ttft_p99_s<=1000"),),
                                replications=1, grid_points=2, refine_evals=0, validate=0))
    assert len(tuned.evaluations) == 2
    assert kb.capacity(kb.CapacitySpec(scn, replications=1, rel_tol=0.5, max_scale=2.0)
                       ).capacities[0].policy == "conservative"
    assert kb.plan(kb.PlanSpec(scn, gpus=("H100-80GB",), replicas=(1,), replications=1)
                   ).candidates[0].gpu == "H100-80GB"
    assert isinstance(kb.LocalExecutor(max_workers=1), kb.LocalExecutor)


def test_a_one_run_comparison_refuses_a_root_seed_it_would_not_use(tmp_path: Path) -> None:
    import pytest

    scn = _scenario(tmp_path)
    with pytest.raises(ValueError, match=r"root_seed=5 seeds the replications; one replication "
                                         r"runs the scenario's own seed \(0\)"):
        kb.compare(scn, ["conservative"], root_seed=5)  # was: run on seed 0, unsaid
    assert kb.compare(scn, ["conservative"], replications=2, root_seed=5).replications == 2
