"""Every study's first screen says what it assumed, as ``simulate``'s does: the
studies named the model and GPU alone, ``simulate`` with no workload file said "workload
default: 1,617 requests" and none of the mix it drew them from, and the studies' tables said
neither which requests their p99s are over nor where TTFT starts. Each test names what the
screen said before."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pandas as pd
import pytest
import tomli_w
from typer.testing import CliRunner

from kvbudget.cli.main import app
from kvbudget.results.said import mix_said
from kvbudget.simulator.scenario import default_scenario_dict

SMALL = ("--set", "workload.num_requests=30")


def run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    return res.exit_code, res.stdout, res.stderr


def lines(text: str) -> list[str]:
    """``text``'s lines with their wrapped continuations joined."""
    return text.replace("\n  ", " ").splitlines()


def served(line: str, prefix: str) -> str:
    """What served the runs: the first line less its prefix and its workload clause."""
    assert line.startswith(prefix), line
    return line.removeprefix(prefix).split("; workload ")[0]


STUDIES = {
    "compare -r": ["compare", "--policies", "conservative", "-r", "2", "-j", "1"],
    "sweep": ["sweep", "-r", "1", "-j", "1", "--no-plot", "--out", "{out}"],
    "tune": ["tune", "--policy", "overcommit", "--param",
             "policy_params.overcommit_ratio=0.2:0.8", "--grid-points", "2", "-r", "1",
             "--refine-evals", "0", "--validate", "0", "-j", "1", "--out", "{out}"],
    "capacity": ["capacity", "-r", "1", "--rel-tol", "0.5", "-j", "1", "--no-plot",
                 "--out", "{out}"],
}


@pytest.mark.parametrize("study", list(STUDIES))
def test_a_studys_first_lines_say_what_simulate_says(study: str, tmp_path: Path) -> None:
    """``capacity`` (and sweep, tune, compare -r) opened with 'model Llama-3.1-8B (assumed:
    ...) on H100-SXM (...); workload default: ...': no engine knob, no max_model_len, block
    size, gpu_memory_utilization nor KV capacity, which simulate's line says; a user comparing
    the capacity with their server had to run simulate to learn them. The study now says the
    same words, and the same line on what the workload holds."""
    code, stdout, stderr = run("simulate", *SMALL)
    assert code == 0, stderr
    sim = lines(stdout)
    args = [a.replace("{out}", str(tmp_path / "out")) for a in STUDIES[study]]
    code, _, stderr = run(*args, *SMALL)
    assert code == 0, stderr
    said = lines(stderr)
    assert served(said[0], "model ") == served(sim[0], "simulated: ")
    assert "max_num_batched_tokens 8,192, max_model_len 131,072, chunked prefill on" in said[0]
    assert ("gpu_memory_utilization 0.92), KV capacity 438,192 tokens (27,387 blocks), the "
            "gateway's budget; workload") in said[0]
    mix = next(ln for ln in sim if ln.startswith("workload default: synthetic"))
    assert said[1] == mix


def test_simulate_says_the_default_workloads_mix() -> None:
    """``simulate`` with no workload file said 'workload default: 1,617 requests over 5.0 min
    (5.4 req/s)': not its tiers, their shares, their length distributions, their max_tokens nor
    the seed it drew them with, each of which moves every figure under it."""
    code, stdout, stderr = run("simulate")
    assert code == 0, stderr
    said = lines(stdout)
    assert said[1] == (
        "workload default: synthetic, seed 0: arrival poisson(rate_rps 5.5) for 300 s; "
        "interactive 1,122 (69%): prompt lognormal(mean 1,500, sigma 0.8, max_tokens 16,384), "
        "output lognormal(mean 250, sigma 0.9), max_tokens 1,024 to 3,607; batch 495 (31%): "
        "prompt lognormal(mean 4,000, sigma 0.6, max_tokens 24,576), output uniform(low 1,536, "
        "high 2,048), max_tokens 2,048")
    # the spec's fields by the names a [workload] table sets them with, and the run's seed
    code, stdout, stderr = run("simulate", "--seed", "3", "--set", "workload.num_requests=40",
                               "--set", 'workload.arrival={kind="gamma",rate_rps=2.0,cv=3.0}')
    assert code == 0, stderr
    mix = lines(stdout)[1]
    # (both a duration and a count: the arrivals stop at whichever ends first)
    assert mix.startswith("workload default: synthetic, seed 3: arrival gamma(rate_rps 2, cv 3) "
                          "for 300 s or 40 requests, whichever ends first; interactive "), mix


def test_a_study_that_varies_the_deployment_says_what_holds_on_every_one(tmp_path: Path) -> None:
    """``plan`` varies the GPU (and replicas): the knobs whose vLLM defaults are each GPU's and
    the KV capacity are each run's, said so, not the scenario GPU's; the rest as simulate says
    it."""
    code, _, stderr = run("plan", *SMALL, "--gpus", "A100-80GB,H100-80GB", "--replicas", "1",
                          "-r", "1", "-j", "1", "--out", tmp_path / "plan")
    assert code == 0, stderr
    first = lines(stderr)[0]
    assert first.startswith(
        "model Llama-3.1-8B (assumed: the default scenario's) on the deployments the study tries "
        "(each with its own KV capacity and its GPU's default max_num_seqs and "
        "max_num_batched_tokens), engine vllm (vLLM 0.32.0's defaults for unset knobs, "
        "max_model_len 131,072, chunked prefill on, "), first
    assert "KV capacity" not in first.split("; workload")[0].split("), engine")[1]


def test_the_studies_tables_say_what_their_p99s_are_over(tmp_path: Path) -> None:
    """``sweep``'s, ``compare -r``'s and ``plan``'s tables gave 'inter. ttft p99' as a mean over
    the replications with no word of which requests each run's p99 is over nor that TTFT starts
    at the gateway, its queue wait included (vLLM's own TTFT starts at the engine), which
    ``simulate``'s note says; ``capacity`` said 'the largest offered rate' without the window
    it is over nor that it is a mean over the replications (the first line's rate is the
    scenario seed's draw, which no replication runs)."""
    over = ("over the completed requests (refused and expired ones have none), TTFT from arrival "
            "at the gateway, its wait included")
    runs: dict[str, list[object]] = {
        "sweep": ["sweep", "-r", "1", "-j", "1", "--no-plot", "--out", tmp_path / "s"],
        "compare": ["compare", "--policies", "unlimited,conservative", "-r", "2", "-j", "1"],
        "plan": ["plan", "--gpus", "H100-80GB", "--replicas", "1", "-r", "1", "-j", "1",
                 "--out", tmp_path / "p"],
    }
    for name, args in runs.items():
        code, stdout, stderr = run(*args, *SMALL)
        assert code == 0, stderr
        assert f"each run's, {over}" in " ".join(stdout.split()), (name, stdout)
    code, stdout, stderr = run("capacity", *SMALL, "-r", "1", "--rel-tol", "0.5", "-j", "1",
                               "--no-plot", "--out", tmp_path / "c")
    assert code == 0, stderr
    assert ("capacity req/s: the largest offered rate found to meet the criteria (the mean over "
            "the replications of each run's requests over its arrival window, first to last "
            "arrival;") in " ".join(stdout.split()), stdout


def test_a_traces_file_is_said_by_its_name_not_as_resolved() -> None:
    """A scenario resolves a trace's path to an absolute one (``summary.json`` keeps it); the
    mix line said that absolute path (``/work/shared/...`` in docs/workloads.md), this
    machine's and not what the user typed: it now says the file's name."""
    mix = {"source": "/home/me/traces/t.csv", "format": "lengths", "tiers": []}
    assert mix_said("t", mix) == "workload t: source t.csv, format lengths"


def test_a_studys_rate_is_the_one_its_table_scales(tmp_path: Path) -> None:
    """``capacity`` said 'workload default: 1,617 requests over 5.0 min (5.4 req/s at rate scale
    1)', the scenario seed's draw, which no replication runs, while its capacity is a mean over
    the replications' own draws (5.56 req/s at rate scale 1): a capacity of 3.93 req/s read as
    scale 0.73 where the search found 0.71. ``sweep`` said 5.96 req/s above a table whose
    'offered req/s' said 5.7. The line now gives the replications' mean, which each table's
    rate is the scaled mean of, and the seed's draw as the seed's."""
    load = re.compile(r"workload default: [\d,.]+ requests over [\d.]+ s \(([\d.]+) req/s"
                      r"( at rate scale 1)?, the mean of the draws' rates, each over its gaps "
                      r"between arrivals\) on average over the 2 replications' draws, each "
                      r"replication drawing its own requests; the scenario's seed 0, which no "
                      r"replication runs, draws the mix below: 200 requests over ")
    args = ("-r", "2", "-j", "1", "--no-plot", "--set", "workload.num_requests=200")
    code, _, stderr = run("capacity", *args, "--rel-tol", "0.5", "--out", tmp_path / "c")
    assert code == 0, stderr
    said = load.search(lines(stderr)[0])
    assert said and said.group(2), lines(stderr)[0]
    found = json.loads((tmp_path / "c" / "capacity.json").read_text())["policies"][0]
    assert f"{found['capacity_rps'] / found['rate_scale']:.3g}" == said.group(1), found
    code, stdout, stderr = run("sweep", *args, "--out", tmp_path / "s")
    assert code == 0, stderr
    said = load.search(lines(stderr)[0])
    assert said and not said.group(2), lines(stderr)[0]
    table = pd.read_parquet(tmp_path / "s" / "sweep.parquet")
    assert f"{table['offered_rate_rps'].mean():.3g}" == said.group(1), table
    assert float(stdout.splitlines()[2].split()[-1]) == float(said.group(1)), stdout  # its cell


DOCS = Path(__file__).resolve().parents[2] / "docs"


def doc_scenario(doc: str, tmp_path: Path) -> Path:
    """The default scenario with the first TOML block of ``docs/DOC`` over it (its tables
    merged into the default's): the page's own example deployment."""
    block = re.search(r"```toml\n(.*?)```", (DOCS / doc).read_text(), re.S)
    assert block, doc
    data = default_scenario_dict()
    for key, value in tomllib.loads(block.group(1)).items():
        old = data.get(key)
        data[key] = {**old, **value} if isinstance(old, dict) else value
    path = tmp_path / f"{Path(doc).stem}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


@pytest.mark.parametrize("deployment", ["disaggregation.md", "autoscaling.md", "mixed",
                                        "one-gpu fleet"])
def test_a_study_of_pools_or_a_scaled_or_mixed_fleet_says_what_simulate_says(
        deployment: str, tmp_path: Path) -> None:
    """A disaggregated deployment (docs/disaggregation.md's), an autoscaled fleet
    (docs/autoscaling.md's) and a fleet over two GPUs kept the old first line, 'model
    Llama-3.1-8B on disaggregated pools (prefill: 2 replicas of H100-SXM; decode: 6 replicas of
    H100-SXM)': no router, no pool's engine knobs nor the [engine] ones, no KV capacity, which
    simulate's line says. Each is resolved before the runs as the run resolves it (each pool's,
    each replica GPU's setup), and said in simulate's words."""
    if deployment == "one-gpu fleet":  # fleet.gpus naming one GPU, not the run's
        where = ["--set", 'fleet.gpus=["A100-80GB", "A100-80GB"]', "--set",
                 "fleet.num_replicas=2"]
    elif deployment == "mixed":
        where = ["--set", 'fleet.gpus=["H100", "H100", "A100-80GB"]', "--set",
                 "fleet.num_replicas=3"]
    else:
        where = ["--scenario", str(doc_scenario(deployment, tmp_path))]
    code, stdout, stderr = run("simulate", *where, *SMALL)
    assert code == 0, stderr
    sim = served(lines(stdout)[0], "simulated: ")
    code, _, stderr = run("compare", "--policies", "conservative", "-r", "2", "-j", "1",
                          *where, *SMALL)
    assert code == 0, stderr
    assert served(lines(stderr)[0], "model ") == sim
    assert ", KV capacity " in sim and ", engine vllm (" in sim, sim


def test_a_study_that_varies_the_deployment_says_no_capacity_of_the_scenarios_fleet(
        tmp_path: Path) -> None:
    """``plan`` on docs/autoscaling.md's fleet tries its own deployments: its first line said
    the engine's knobs followed by '(at 8 replicas)', the scenario's autoscaled capacity's
    words with no capacity before them and none of the deployments tried."""
    where = ["--scenario", str(doc_scenario("autoscaling.md", tmp_path))]
    code, _, stderr = run("plan", *where, *SMALL, "--gpus", "H100-80GB", "--replicas", "2",
                          "-r", "1", "-j", "1", "--out", tmp_path / "p")
    assert code == 0, stderr
    first = served(lines(stderr)[0], "model ")
    assert first.endswith("gpu_memory_utilization 0.92)"), first
    assert "(at " not in first and "KV capacity " not in first.split("), engine ")[1], first


ASSUMED_GPU = "H100-SXM (assumed: the default scenario's H100-80GB)"
ASSUMED_MODEL = "Llama-3.1-8B (assumed: the default scenario's)"
GIVEN = ("--gpu", "H100-80GB", "--model", "Llama-3.1-8B")
KINDS = {
    "disaggregated": ["--set", "disaggregation.prefill.num_replicas=1",
                      "--set", "disaggregation.decode.num_replicas=2"],
    "autoscaled": ["--set", "fleet.autoscale.min_replicas=1",
                   "--set", "fleet.autoscale.max_replicas=2"],
    "colocated": [],
}
HEADERS = {"simulate": (["simulate"], "simulated: "),
           **{name: (args, "model ") for name, args in STUDIES.items()}}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("command", list(HEADERS))
def test_a_pools_gpu_says_it_was_assumed_as_one_engines_does(
        kind: str, command: str, tmp_path: Path) -> None:
    """``simulate`` (and every study) on a disaggregated deployment said 'prefill: 1 replica of
    H100-SXM, ...; decode: 2 replicas of H100-SXM' where nobody gave the GPU: the colocated
    line's '(assumed: the default scenario's H100-80GB)' was dropped from the pools, and with
    it every knob but the weights (max_model_len, chunked prefill, prefix caching, the KV
    dtype, block size, gpu_memory_utilization). Each pool's GPU is now said as one engine's
    is, and the same line with the GPU and the model given differs exactly there."""
    args, prefix = HEADERS[command]
    said = {}
    for case, given in (("assumed", ()), ("given", GIVEN)):
        code, stdout, stderr = run(*(a.replace("{out}", str(tmp_path / case)) for a in args),
                                   *KINDS[kind], *given, *SMALL)
        assert code == 0, stderr
        said[case] = served(lines(stdout if command == "simulate" else stderr)[0], prefix)
    num = 2 if kind == "disaggregated" else 1
    assert said["assumed"].count(ASSUMED_GPU) == num, said["assumed"]
    assert said["assumed"].replace(ASSUMED_GPU, "H100-SXM (given as H100-80GB)").replace(
        ASSUMED_MODEL, "Llama-3.1-8B") == said["given"]
    assert "assumed" not in said["given"], said["given"]
    # the knobs a colocated engine says, said once for the pools (each pool's prefix caching
    # its own: a decode replica's KV comes over the link)
    knobs = ("max_model_len 131,072, chunked prefill on, " if kind == "disaggregated" else
             "max_model_len 131,072, chunked prefill on, prefix caching on (no prefixes to "
             "share), ") + "bfloat16 weights, 16-bit KV, block_size 16, gpu_memory_utilization 0.92)"
    assert knobs in said["given"], said["given"]
    if kind == "disaggregated":
        assert ("max_num_batched_tokens 8,192, prefix caching on (no prefixes to share); decode: "
                in said["given"] and "prefix caching off), engine vllm" in said["given"]), said


def test_a_mixed_fleets_gpus_are_said_as_one_engines(tmp_path: Path) -> None:
    """A fleet over two GPUs said '2 of H100, max_num_seqs 1,024, ...; 1 of A100-80GB, ...' (the
    names as typed, where one engine's line says 'H100-SXM (given as H100)') and, its
    replicas' caps differing, no knob at all of the engine (max_model_len, prefix caching,
    the KV dtype, gpu_memory_utilization): each GPU is said as one engine's, the knobs no
    GPU's defaults set once."""
    code, stdout, stderr = run("simulate", "--gpu", "H100", *SMALL)
    assert code == 0, stderr
    one = served(lines(stdout)[0], "simulated: ")
    where = ["--set", 'fleet.gpus=["H100", "A100-80GB", "H100"]', "--set", "fleet.num_replicas=3"]
    for args in (["simulate"], ["compare", "--policies", "conservative", "-r", "2", "-j", "1"]):
        code, stdout, stderr = run(*args, *where, *SMALL)
        assert code == 0, stderr
        mixed = served(lines(stdout if args == ["simulate"] else stderr)[0],
                       "simulated: " if args == ["simulate"] else "model ")
        assert "3 replicas (2 of H100-SXM (given as H100), max_num_seqs 1,024" in mixed, mixed
        knobs = one[one.index("max_model_len"):one.index("), KV capacity")]
        assert f"unset knobs, {knobs})" in mixed, (knobs, mixed)
