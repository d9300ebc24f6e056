"""The recording's own setting, or one line that asks (issue: users' own recordings in, trusted
answers out): model names as Hugging Face and servers write them, no default model in place of
one the file names or lacks, ``--max-output`` with ``--records``, and the replay's sanity gate
(a replay that loses the recording's completed requests refuses to answer)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

import kvbudget.perf
from kvbudget.cli.main import app
from kvbudget.cli.recorded import recorded_setup, recording_headline
from kvbudget.perf.hardware import get_gpu
from kvbudget.perf.models import get_model, resolve_model_name
from kvbudget.policies import TierConfig
from kvbudget.results.recordings import read_recording
from kvbudget.simulator.run import SimConfig
from kvbudget.studies.validate import (
    replay_problems,
    simulate_recording,
    straight_to_server,
    validate_recording,
)
from tests.conftest import unwrapped


@pytest.mark.parametrize(("name", "preset"), [
    ("meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("llama-3.1-8b-instruct", "Llama-3.1-8B"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "Mistral-7B-v0.3"),
    ("google/gemma-2-9b-it", "Gemma-2-9B"),
    ("meta-llama/Llama-2-7b-chat-hf", "Llama-2-7B"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
    ("QWEN3-8B", "Qwen3-8B"),
])
def test_hugging_face_names_resolve_to_the_preset_of_their_architecture(name: str,
                                                                        preset: str) -> None:
    assert resolve_model_name(name) == preset
    assert get_model(name) == get_model(preset)


@pytest.mark.parametrize("name", ["tiny", "Llama-3.1-8B-FP8", "org/Llama-9-1B", ""])
def test_other_names_do_not_resolve(name: str) -> None:
    assert resolve_model_name(name) is None  # a quantised variant is not the bf16 preset


def test_unknown_names_suggest_the_nearest() -> None:
    with pytest.raises(ValueError, match=r"did you mean Llama-3\.1-8B"):
        get_model("Lama-3.1-8B")
    with pytest.raises(ValueError, match=r"did you mean H20 or H200"):
        get_gpu("H20O")
    assert get_gpu("h100").name == get_gpu("H100").name == "H100-SXM"
    assert get_gpu("NVIDIA-H200").name == "H200"


def _bench(path: Path, model: str | None, output: int = 40, n: int = 20) -> Path:
    """A vllm bench serve result: ``n`` requests of 100 prompt and ``output`` output tokens."""
    doc: dict[str, object] = {
        "input_lens": [100] * n, "output_lens": [output] * n, "ttfts": [0.05] * n,
        "latencies": [0.05 + 0.01 * (output - 1)] * n,
        "itls": [[0.01] * (output - 1)] * n, "start_times": [0.5 * i for i in range(n)],
        "errors": [""] * n, "request_rate": 2.0}
    if model is not None:
        doc["model_id"] = model
    path.write_text(json.dumps(doc))
    return path


def _run(*args: object) -> tuple[int, str, str]:
    res = CliRunner().invoke(app, [str(a) for a in args])
    # stderr's lines as meant, each wrapped one joined back (its settings line, its notes)
    return res.exit_code, res.stdout, "\n".join(unwrapped(res.stderr)) + "\n"


def test_an_instruct_model_name_is_simulated_as_its_preset_and_said(tmp_path: Path) -> None:
    path = _bench(tmp_path / "b.json", "meta-llama/Llama-3.1-8B-Instruct")
    code, out, err = _run("validate", "--records", path, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    assert "model Llama-3.1-8B (the recording's 'meta-llama/Llama-3.1-8B-Instruct')" in err
    assert "GPU H100-SXM (--gpu)" in err
    assert "simulated on H100-SXM / Llama-3.1-8B" in out


@pytest.mark.parametrize(("model", "needle"), [
    ("my-org/secret-model-13b", "the recording's model 'my-org/secret-model-13b' is not a "
     "bundled preset"),
    (None, "the recording names no model"),
])
def test_a_model_the_file_names_but_kvbudget_lacks_or_no_model_exits_2(
        tmp_path: Path, model: str | None, needle: str) -> None:
    path = _bench(tmp_path / "b.json", model)
    for command in (("validate", "--out", tmp_path / "v"),
                    ("calibrate", "--out", tmp_path / "c.json")):
        code, _, err = _run(command[0], "--records", path, *command[1:])
        assert code == 2 and err.count("\n") == 1, err
        assert needle in err and "--model path/to/config.json" in err
    assert not (tmp_path / "c.json").exists() and not (tmp_path / "v").exists()


def test_a_gpu_the_recording_does_not_name_is_said_as_assumed(tmp_path: Path) -> None:
    path = _bench(tmp_path / "b.json", "Llama-3.1-8B")
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v")
    assert code == 0, err
    assert "ASSUMED: the recording does not name its GPU; pass --gpu" in err


def test_a_scenarios_policy_not_simulated_with_records_is_said(tmp_path: Path) -> None:
    # --scenario's help promised its policy; --records simulates the recording's (a load tool:
    # unlimited) and said nothing of the scenario's
    path = _bench(tmp_path / "b.json", "Llama-3.1-8B")
    scenario = tmp_path / "s.toml"
    scenario.write_text('policy = "overcommit"\ngpu = "H100"\n')
    code, out, err = _run("validate", "--records", path, "--out", tmp_path / "v",
                          "--scenario", scenario)
    assert code == 0, err
    assert ("note: the --scenario's policy 'overcommit' is not simulated: the recorded requests "
            "went to the server as the recording shows (policy unlimited); --policy overcommit "
            "puts that gateway in front of it") in err
    assert "policy unlimited" in out
    code, out, err = _run("validate", "--records", path, "--out", tmp_path / "w",
                          "--scenario", scenario, "--policy", "overcommit")
    assert code == 0, err
    assert "is not simulated" not in err and "policy overcommit" in out


def test_max_output_declares_max_tokens_of_a_recording_without_them(tmp_path: Path) -> None:
    path = _bench(tmp_path / "b.json", "Llama-3.1-8B")
    assert read_recording(path).workload.max_output_tokens.tolist() == [40] * 20  # realised
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v", "--gpu", "H100",
                        "--max-output", "512")
    assert code == 0, err
    assert "--max-output 512 declared where the file has no max_tokens" in err
    sim = pd.read_parquet(tmp_path / "v" / "sim" / "requests.parquet")
    assert sim["max_output_tokens"].tolist() == [512] * 20


def test_a_replay_that_refuses_the_recordings_requests_refuses_to_answer(
        tmp_path: Path) -> None:
    # 20 requests of 100 + 40 tokens that the real server completed; the simulated one has
    # 4 blocks of 16 tokens (64 tokens of KV): every request is too large for it
    path = _bench(tmp_path / "b.json", "Llama-3.1-8B")
    small = ("--gpu", "H100", "--num-gpu-blocks", "4", "--block-size", "16")
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v", *small)
    last = err.strip().splitlines()[-1]
    assert code == 1 and last.startswith("error: "), err
    assert "did not complete 20 of the 20 requests the recording shows completed" in last
    assert "20 rejected_too_large" in last and "the comparison refused" in last
    quoted = ("the simulated replay did not complete 20 of the 20 requests the recording shows "
              "completed (100 %, more than 2 %): 20 rejected_too_large;")
    assert quoted in last  # as docs/recordings.md quotes it
    docs = Path(__file__).resolve().parents[3] / "docs" / "recordings.md"
    assert quoted in " ".join(docs.read_text().replace("`", " ").split())
    code, _, err = _run("calibrate", "--records", path, "--out", tmp_path / "c.json", *small,
                        "--max-evals", "3")
    assert code == 1 and "calibration refused" in err and not (tmp_path / "c.json").exists()
    # every request lost: no flag makes that an answer
    code, _, err = _run("calibrate", "--records", path, "--out", tmp_path / "c.json", *small,
                        "--max-evals", "3", "--allow-refusals")
    assert code == 1 and not (tmp_path / "c.json").exists()


def _long_prompt_runs(path: Path) -> Path:
    """Two ``--append-result`` runs at rate inf, 4 users, no start_times, each 8 requests: 4 of
    40,000 prompt tokens (over the default tiers' 32,768, under Llama-3.1-8B's 131,072-token
    context), 4 of 100; the second run's times 20 ms longer."""
    lens = [40_000, 100] * 4
    doc = {"model_id": "Llama-3.1-8B", "request_rate": "inf", "max_concurrency": 4,
           "input_lens": lens, "output_lens": [20] * 8, "ttfts": [0.5] * 8,
           "itls": [[0.02] * 19] * 8, "latencies": [0.88] * 8, "errors": [""] * 8}
    # the second run measured apart from the first (a run written twice is refused)
    again = {**doc, "ttfts": [0.52] * 8, "latencies": [0.9] * 8}
    path.write_text(json.dumps(doc) + "\n" + json.dumps(again) + "\n")
    return path


def test_a_recording_that_went_straight_to_the_server_gets_no_gateway_size_limit(
        tmp_path: Path) -> None:
    # muma378/vllm-benchmark benchmark_result_0822/ds-0822-arcc-disk-400g.json at a3288a4:
    # 16 vllm bench serve runs of DeepSeek-R1 (TP8) appended to one file, prompts of 100 to
    # 100,000 tokens at 16 users, sent straight to the server. validate refused 120 of its 305
    # served requests as rejected_too_large by the default tiers' 32,768 tokens, a gateway
    # limit that deployment never had, and exited 1; and "240 of the 305 requests share their
    # timestamp ... spread them (--spread-s)" was advice for the send times kvbudget itself drew
    path = _long_prompt_runs(tmp_path / "append.jsonl")
    args = ("validate", "--records", path, "--gpu", "H100", "--model", "Llama-3.1-8B")
    code, _, err = _run(*args, "--out", tmp_path / "v")
    assert code == 0, err
    assert ("no gateway size limit (the recording's requests went straight to the server"
            in " ".join(err.split()))
    assert "rejected_too_large" not in err and "refused" not in err
    assert "share their timestamp" not in err
    sim = pd.read_parquet(tmp_path / "v" / "sim" / "requests.parquet")
    assert (sim["status"] == "completed").all() and sim["prompt_tokens"].max() == 40_000


def test_the_servers_own_context_still_refuses_a_recording_that_went_straight_to_it(
        tmp_path: Path) -> None:
    # no gateway size limit, but vLLM's max_model_len (the model's context, 131,072 tokens
    # for Llama-3.1-8B) is the server's: a prompt of 140,000 tokens is refused, said as such
    doc = {"model_id": "Llama-3.1-8B", "request_rate": "inf", "max_concurrency": 4,
           "input_lens": [40_000, 100, 140_000, 100], "output_lens": [20] * 4,
           "ttfts": [0.5] * 4, "itls": [[0.02] * 19] * 4, "latencies": [0.88] * 4,
           "errors": [""] * 4}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(doc))
    args = ("validate", "--records", path, "--gpu", "H100", "--model", "Llama-3.1-8B")
    code, _, err = _run(*args, "--out", tmp_path / "v")
    last = err.strip().splitlines()[-1]
    assert code == 1, err
    assert ("did not complete 1 of the 4 requests the recording shows completed (25 %, more "
            "than 2 %): 1 rejected_too_large (prompt_too_long); assumed: max_model_len "
            "131,072 (the model's context, vLLM's default) refused 1 request") in last
    assert "the tiers' max_sequence_tokens" not in last  # (they limit nothing: no hint)


def test_the_library_simulates_a_recording_as_it_ran_unless_given_a_policy(
        tmp_path: Path) -> None:
    # simulate_recording / validate_recording / calibrate_recording with no policy: the one
    # the recording had (none: straight to the server, no gateway size limit); policy=
    # puts that gateway, with the default tiers, in front
    rec = read_recording(_long_prompt_runs(tmp_path / "append.jsonl"))
    config = SimConfig(model="Llama-3.1-8B", gpu="H100")
    assert straight_to_server(rec, config, None)
    assert not straight_to_server(rec, config, "unlimited")
    assert not straight_to_server(rec, replace(config, tiers=(TierConfig("interactive"),)),
                                  None)
    # a kvbudget replay's run records its policy (here unlimited): its gateway stays
    replayed = read_recording(REAL_DP2)
    assert replayed.config["policy"] == "unlimited"
    assert not straight_to_server(replayed, config, None)
    ran = simulate_recording(rec, config).records
    assert (ran["status"] == "completed").all()
    gated = simulate_recording(rec, config, policy="unlimited").records
    assert int((gated["status"] == "rejected_too_large").sum()) == 8
    v = validate_recording(rec, config)
    assert (v.simulated.records["status"] == "completed").all()


def test_a_gateway_limit_the_user_chose_still_refuses_a_recordings_requests(
        tmp_path: Path) -> None:
    # --policy puts a gateway in front of the recorded server: its tiers, the defaults nobody
    # set, refuse as before and are said with the refusal; a limit given with --set refuses
    # as given (no assumed line: it was set)
    path = _long_prompt_runs(tmp_path / "append.jsonl")
    args = ("validate", "--records", path, "--gpu", "H100", "--model", "Llama-3.1-8B")
    code, _, err = _run(*args, "--policy", "unlimited", "--out", tmp_path / "v")
    last = err.strip().splitlines()[-1]
    assert code == 1, err
    assert "no gateway size limit" not in err
    assert ("8 rejected_too_large; assumed: the default tiers' max_sequence_tokens (32,768) "
            "refused 4 requests as too large") in last
    assert "(said of each of 2 stages); the comparison refused" in last
    assert "--max-output and the tiers' max_sequence_tokens" in last
    code, _, err = _run(*args, "--policy", "unlimited", "--out", tmp_path / "w",
                        "--allow-refusals")
    assert code == 0, err
    assert "warning: the simulated replay did not complete 8 of the 16 requests" in err
    assert "assumed: the default tiers' max_sequence_tokens (32,768) refused 4" in err
    code, _, err = _run(*args, "--set", "tiers.0.max_sequence_tokens=30000",
                        "--out", tmp_path / "x")
    last = err.strip().splitlines()[-1]
    assert code == 1, err
    assert "no gateway size limit" not in err
    assert "8 rejected_too_large; the comparison refused" in last


def test_replay_problems_counts_the_lost_requests_and_their_reasons(tmp_path: Path) -> None:
    rec = read_recording(_bench(tmp_path / "b.json", "Llama-3.1-8B", n=100))
    ids = rec.measured["request_id"].to_numpy()
    status = np.array(["completed"] * 100, dtype=object)
    reason = np.array([""] * 100, dtype=object)
    sim = pd.DataFrame({"request_id": ids, "status": status, "reason": reason})
    assert replay_problems(rec, sim) is None
    sim.loc[:1, "status"] = "rejected_too_large"
    assert replay_problems(rec, sim) is None  # 2 of 100: at the limit
    sim.loc[2, ["status", "reason"]] = ["expired", "queue_timeout"]
    said = replay_problems(rec, sim)
    assert said is not None and "did not complete 3 of the 100" in said
    assert "2 rejected_too_large" in said and "1 expired (queue_timeout)" in said
    rows = np.zeros(100, dtype=bool)
    rows[50:] = True
    assert replay_problems(rec, sim, rows) is None  # the lost ones are not in the rows


def test_records_refuse_the_live_calibrations_flags(tmp_path: Path) -> None:
    path = _bench(tmp_path / "b.json", "Llama-3.1-8B")
    for flag, value in (("--repeats", "5"), ("--retries", "0"), ("--prefill-tokens", "16")):
        code, _, err = _run("calibrate", "--records", path, "--out", tmp_path / "c.json", flag,
                            value)
        assert code == 2 and f"{flag} applies to a live calibration" in err


def test_tensor_parallelism_not_in_the_recording_is_said_as_assumed(tmp_path: Path) -> None:
    # danielkorat/guidellm-bench guidellm_results/20260302_1917/
    # openai_gpt-oss-20b_tp4_quant-none_benchmarks.json: a TP4 run (its file name says so, the
    # GuideLLM report does not) was simulated at TP 1 and the settings line did not say so
    path = _bench(tmp_path / "b.json", "meta-llama/Llama-3.1-8B-Instruct")
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    assert ("tensor_parallel_size 1 (ASSUMED: the recording does not say how many GPUs served "
            "the model; pass --tensor-parallel-size)") in err
    code, out, err = _run("validate", "--records", path, "--out", tmp_path / "v2", "--gpu",
                          "H100", "--tensor-parallel-size", "2")
    assert code == 0, err
    assert "tensor_parallel_size" not in unwrapped(err)[0]
    assert "tensor_parallel_size=2" in out


def test_the_weights_dtype_a_recording_cannot_tell_is_said_as_assumed(tmp_path: Path) -> None:
    # danielkorat/guidellm-bench guidellm_results/20260302_1917/
    # Qwen_Qwen3-30B-A3B_tp4_quant-fp8_benchmarks.json: a server started with --quantization fp8
    # on the 16-bit checkpoint (the file name says so; the report names only the model) was
    # simulated in bfloat16 without a word
    path = _bench(tmp_path / "b.json", "meta-llama/Llama-3.1-8B-Instruct")
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    settings = unwrapped(err)[0]
    assert "weights bfloat16 (ASSUMED: the model's config; the recording does not say " \
        "whether the server quantized them" in settings
    # a config.json given to --model is the user's choice of weights: nothing assumed
    bundled = Path(kvbudget.perf.__file__).parent / "model_configs" / "Llama-3.1-8B.json"
    fp8 = {**json.loads(bundled.read_text()), "quantization_config": {"quant_method": "fp8"}}
    config = tmp_path / "fp8" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps(fp8))
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v2", "--gpu", "H100",
                        "--model", config)
    assert code == 0, err
    assert ", weights " not in unwrapped(err)[0]


def test_a_model_named_as_quantized_simulated_in_16_bits_is_said(tmp_path: Path) -> None:
    # LambdaLabsML/vllm-benchmark: a run of neuralmagic/Meta-Llama-3.1-8B-FP8 validated with
    # --model Llama-3.1-8B said "weights bfloat16 (ASSUMED ...)" as for any name, not that the
    # file's own name says FP8
    path = _bench(tmp_path / "b.json", "neuralmagic/Meta-Llama-3.1-8B-FP8")
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v", "--gpu", "H100",
                        "--model", "Llama-3.1-8B")
    assert code == 0, err
    settings = " ".join(unwrapped(err)[0].split())
    assert "weights bfloat16 (ASSUMED, though the recording's model " \
        "'neuralmagic/Meta-Llama-3.1-8B-FP8' is named as quantized (FP8)" in settings, settings
    # a name with the letters inside a word is no marker
    path = _bench(tmp_path / "c.json", "meta-llama/Llama-3.1-8B-Instruct")
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v2", "--gpu", "H100")
    assert code == 0, err
    assert "named as quantized" not in err


def test_a_simulated_tensor_parallel_run_validates_against_itself(tmp_path: Path) -> None:
    # a TP2 `simulate --out` run directory was replayed at TP 1 (summary.json's engine_knobs
    # were not read): every figure off, exit 0
    run = tmp_path / "run"
    code, _, err = _run("simulate", "--model", "Llama-3.1-8B", "--gpu", "L4",
                        "--tensor-parallel-size", "2", "--set", "workload.num_requests=30",
                        "--out", run)
    assert code == 0, err
    assert read_recording(run).config["tensor_parallel_size"] == 2
    code, _, err = _run("validate", "--records", run, "--out", tmp_path / "v")
    assert code == 0, err
    assert "tensor_parallel_size=2" in err and "ASSUMED" not in unwrapped(err)[0]
    table = pd.read_csv(tmp_path / "v" / "validation.csv")
    assert np.allclose(table["rel_error"].dropna(), 0.0, atol=1e-9)


def test_a_recording_without_prompt_contents_says_no_prefix_cache_hits_are_simulated(
        tmp_path: Path) -> None:
    # a real vllm bench serve run on --random-prefix-len 16: the file keeps token counts, not
    # prompts, so the simulation (prefix caching on) gave no cache hits where the server's
    # shared-prefix prompts had them, and nothing said so
    path = (Path(__file__).parents[2] / "fixtures" / "recordings" / "vllm-bench-0.32.0"
            / "prefix16.json")
    args = ("validate", "--records", path, "--gpu", "H100", "--model", "Llama-3.1-8B",
            "--allow-refusals")
    code, _, err = _run(*args, "--out", tmp_path / "v")
    assert code == 0, err
    assert "note: prefix caching is on, but the recording tells no prompt prefixes (no " \
        "hash_ids: a load tool's file keeps token counts, or prompt texts kvbudget does not " \
        "compare): every prompt is simulated as unique, with no cache hits" in err
    code, _, err = _run(*args, "--out", tmp_path / "w", "--set",
                        "engine.enable_prefix_caching=false")
    assert code == 0, err
    assert "no cache hits" not in err


def test_engine_knobs_no_file_says_are_said_as_assumed(tmp_path: Path) -> None:
    """A load tool's file does not say the server's batch caps, KV blocks or cache: the
    settings line names each as vLLM's default, assumed; a flag takes one off the list."""
    path = _bench(tmp_path / "b.json", "meta-llama/Llama-3.1-8B-Instruct")
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    assert ("max_num_seqs, max_num_batched_tokens, num_gpu_blocks, enable_prefix_caching, "
            "async_scheduling (ASSUMED: vLLM's defaults for the GPU and model, the KV blocks from the GPU's "
            "memory; the recording does not say what the server ran") in err
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v2", "--gpu", "H100",
                        "--max-num-seqs", "64", "--num-gpu-blocks", "5000")
    assert code == 0, err
    assert ", max_num_batched_tokens, enable_prefix_caching, async_scheduling (ASSUMED" in err
    assert "the KV blocks from the GPU's memory" not in err


def _replayed(tmp_path: Path, server: dict[str, object]) -> Path:
    """A ``kvbudget replay`` run directory (a simulated one, its replay.json saying what the
    server told of itself as a replay writes it)."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{0.5 * i},100,40\n" for i in range(20)))
    run = tmp_path / "run"
    code, _, err = _run("simulate", "--trace", trace, "--model", "Llama-3.1-8B", "--gpu", "H100",
                        "--policy", "unlimited", "--out", run)
    assert code == 0, err
    summary = json.loads((run / "summary.json").read_text())
    for key in ("model", "gpu", "num_gpu_blocks", "block_size", "engine_knobs"):
        summary.pop(key, None)  # a replay's summary says none of the simulation's settings
    (run / "summary.json").write_text(json.dumps(summary))
    (run / "replay.json").write_text(json.dumps({"policy": "unlimited", "policy_params": {},
                                                 "kv_capacity_tokens": 32000,
                                                 "server": server}))
    return run


def test_what_a_replayed_server_told_is_simulated_and_said(tmp_path: Path) -> None:
    """The server's blocks (less vLLM's null block), cache, context and KV dtype, and the model
    it loaded under an alias, come from the replay's run directory and are said as such."""
    run = _replayed(tmp_path, {"model": "Llama-3.1-8B", "model_root": "/models/llama8b",
                               "max_model_len": 4096, "num_gpu_blocks": 2001,
                               "block_size": 16, "enable_prefix_caching": False,
                               "kv_cache_dtype": "fp8", "num_engines": 1})
    code, out, err = _run("validate", "--records", run, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    # the name it served is a preset's, what it loaded a path: the alias is said as assumed
    assert ("model Llama-3.1-8B (ASSUMED: the name 'Llama-3.1-8B' the recording's server served "
            "'/models/llama8b' under; pass --model if it loaded another)") in err
    assert ("from the recording: num_gpu_blocks=2000, block_size=16, "
            "enable_prefix_caching=false, max_model_len=4096, kv_cache_dtype=\"fp8\"") in err
    assert "max_num_seqs, max_num_batched_tokens, async_scheduling (ASSUMED" in err
    assert "num_gpu_blocks=2000 block_size=16" in out and "prefix_caching=False" in out


def test_a_kv_cache_dtype_kvbudget_does_not_price_exits_2(tmp_path: Path) -> None:
    run = _replayed(tmp_path, {"model": "Llama-3.1-8B", "kv_cache_dtype": "fp8_inc"})
    code, _, err = _run("validate", "--records", run, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 2 and err.count("\n") == 1, err
    assert "--kv-cache-dtype fp8_inc, which kvbudget does not price" in err
    code, _, err = _run("validate", "--records", run, "--out", tmp_path / "v", "--gpu", "H100",
                        "--set", "engine.kv_cache_dtype=fp8")
    assert code == 0, err


def test_a_serve_directory_of_two_upstreams_is_simulated_as_a_fleet(tmp_path: Path) -> None:
    server = {"model": "Llama-3.1-8B", "num_gpu_blocks": 2001, "block_size": 16,
              "num_engines": 1}
    run = _replayed(tmp_path, server)
    (run / "replay.json").write_text(json.dumps({
        "executor": "serve", "upstreams": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
        "router": "least_tokens", "policy": {"name": "unlimited"}, "servers": [server] * 2}))
    code, out, err = _run("validate", "--records", run, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    assert 'num_gpu_blocks=2000, block_size=16, fleet.num_replicas=2, fleet.router="least_tokens"' \
        in err
    assert "simulated on H100-SXM / Llama-3.1-8B, 2 replicas (least_tokens)" in out


@pytest.mark.parametrize("servers", [[], [{"model": "Llama-3.1-8B"}] * 2])
def test_a_serve_directory_s_budget_is_no_engine_s_kv(servers: list[dict[str, object]],
                                                     tmp_path: Path) -> None:
    """A serve directory's budget is the gateway's (``--capacity-tokens``, or its upstreams'
    KV summed): where the upstreams told no blocks, each replica of the fleet was simulated
    with the whole budget as its KV (2 upstreams: twice the KV, or a --capacity-tokens figure
    as the engine's), said as 'from the recording'. The blocks are now said as assumed."""
    run = _replayed(tmp_path, {"model": "Llama-3.1-8B"})
    (run / "replay.json").write_text(json.dumps({
        "executor": "serve", "upstreams": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
        "router": "round_robin", "policy": {"name": "unlimited"}, "servers": servers,
        "kv_capacity_tokens": 64000}))
    code, out, err = _run("validate", "--records", run, "--model", "Llama-3.1-8B", "--out",
                          tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    assert "num_gpu_blocks=4000" not in err and "num_gpu_blocks=4000" not in out
    assert "num_gpu_blocks, enable_prefix_caching, async_scheduling (ASSUMED" in err, err


def test_a_replay_s_given_capacity_is_no_engine_s_kv(tmp_path: Path) -> None:
    """``kvbudget replay --capacity-tokens`` against a server that told no blocks (SGLang, a
    data-parallel vLLM): the budget given was simulated as the engine's KV, said 'from the
    recording'. It is now the gateway's only, and the blocks are said as assumed; the KV
    capacity a replay read from the server is still its engine's."""
    run = _replayed(tmp_path, {"model": "Llama-3.1-8B"})
    meta = json.loads((run / "replay.json").read_text())
    for given, blocks in ((True, False), (False, True)):
        (run / "replay.json").write_text(json.dumps({**meta, "kv_capacity_given": given}))
        code, _, err = _run("validate", "--records", run, "--out", tmp_path / f"v{given}",
                            "--gpu", "H100")
        assert code == 0, err
        assert ("from the recording: num_gpu_blocks=2000" in err) == blocks, err
        assert ("num_gpu_blocks, enable_prefix_caching, async_scheduling (ASSUMED"
                in err) == (not blocks), err


DP2 = (Path(__file__).parents[2] / "fixtures" / "recordings" / "handmade"
       / "kvbudget-replay-vllm-0.32.0-dp2.json")
"""Hand-made: the replay.json of a kvbudget replay against ``vllm serve --data-parallel-size
2`` (vLLM 0.32.0 tells each engine's ``cache_config_info`` the front end's sum over both
engines, 4002 blocks: 2001 each, one of them vLLM's null block)."""


def test_a_data_parallel_server_is_simulated_as_a_fleet_of_its_engines(tmp_path: Path) -> None:
    """A vLLM of 2 data-parallel engines ran 2 schedulers, each with its own batch and 2001
    blocks: it was simulated as one engine of 4000 blocks (one batch, its capacity the sum).
    It is now a fleet of 2 replicas of 2000 usable blocks each, behind the router nearest
    vLLM's own balancing, said as assumed."""
    run = _replayed(tmp_path, {})
    (run / "replay.json").write_text(DP2.read_text())
    setup = recorded_setup(run, records_format=None, columns=None, tier="default", seed=0,
                           gpu="H100", model=None, scenario=None, overrides=None,
                           num_gpu_blocks=None, block_size=None, max_num_seqs=None,
                           max_num_batched_tokens=None, cost_model=None, policy=None,
                           params=None)
    fleet = setup.config.fleet
    assert fleet is not None and fleet.num_replicas == 2 and fleet.router == "least_tokens"
    assert setup.config.resolved_num_gpu_blocks() == 2000
    assert setup.config.engine_for().block_size == 16
    assert setup.config.gateway_capacity_tokens == 2 * 2000 * 16
    code, out, err = _run("validate", "--records", run, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    assert "num_gpu_blocks=2000, block_size=16" in err and "fleet.num_replicas=2" in err
    assert ("2 data-parallel engines (vllm --data-parallel-size 2) simulated as 2 replicas "
            "each with its own num_gpu_blocks") in err
    assert "fleet.router=least_tokens (ASSUMED: vLLM sends a request to the engine" in err
    assert "simulated on H100-SXM / Llama-3.1-8B, 2 replicas (least_tokens): " \
        "num_gpu_blocks=2000 block_size=16" in out
    # a router given is simulated, not the assumed one
    code, out, err = _run("validate", "--records", run, "--out", tmp_path / "v2", "--gpu",
                          "H100", "--set", "fleet.router=round_robin")
    assert code == 0, err
    assert "2 replicas (round_robin)" in out and "ASSUMED: vLLM sends" not in err
    # blocks given are each replica's, and not said as the recording's share
    code, out, err = _run("validate", "--records", run, "--out", tmp_path / "v3", "--gpu",
                          "H100", "--num-gpu-blocks", "1000")
    assert code == 0, err
    assert "2 replicas (least_tokens): num_gpu_blocks=1000" in out
    assert "simulated as 2 replicas, fleet.router=least_tokens (ASSUMED" in err


def test_data_parallel_engines_of_different_blocks_exit_2(tmp_path: Path) -> None:
    run = _replayed(tmp_path, {})
    meta = json.loads(DP2.read_text())
    meta["server"]["num_gpu_blocks_by_engine"] = [4002, 2002]
    (run / "replay.json").write_text(json.dumps(meta))
    code, _, err = _run("validate", "--records", run, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 2 and err.count("\n") == 1, err
    assert f"{run / 'replay.json'}: field 'server.num_gpu_blocks_by_engine'" in err


def test_a_serve_directory_of_data_parallel_upstreams_is_their_engines(tmp_path: Path) -> None:
    """Two upstreams of 2 data-parallel engines each: 4 replicas behind the gateway's router,
    the flattening said as assumed."""
    server = json.loads(DP2.read_text())["server"]
    run = _replayed(tmp_path, {})
    (run / "replay.json").write_text(json.dumps({
        "executor": "serve", "upstreams": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
        "router": "round_robin", "policy": {"name": "unlimited"}, "servers": [server] * 2}))
    code, out, err = _run("validate", "--records", run, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    assert 'fleet.num_replicas=4, fleet.router="round_robin"' in err
    assert "ASSUMED: each upstream ran 2 data-parallel engines, simulated as 4 replicas" in err
    assert "4 replicas (round_robin): num_gpu_blocks=2000" in out


REAL_DP2 = Path(__file__).parents[2] / "fixtures" / "runs" / "kvbudget-replay-vllm-0.32.0-dp2"
"""A kvbudget replay against a real vLLM 0.32.0 of 2 data-parallel engines of 4096 blocks of
128 tokens (tests/fixtures/runs/README.md)."""


def test_a_real_data_parallel_replay_is_two_replicas_of_one_engine_s_blocks() -> None:
    setup = recorded_setup(REAL_DP2, records_format=None, columns=None, tier="default", seed=0,
                           gpu="H100", model="Llama-3.1-8B", scenario=None, overrides=None,
                           num_gpu_blocks=None, block_size=None, max_num_seqs=None,
                           max_num_batched_tokens=None, cost_model=None, policy=None,
                           params=None)
    fleet = setup.config.fleet
    assert fleet is not None and (fleet.num_replicas, fleet.router) == (2, "least_tokens")
    assert setup.config.resolved_num_gpu_blocks() == 4095  # 4096 less the null block
    assert setup.config.engine_for().block_size == 128


def test_one_server_not_in_the_recording_is_said_as_assumed(tmp_path: Path) -> None:
    # toslali-ibm/llm-d-benchmark collected/data/openshift/exp-2/vllm-70b-2replicas/ at 7711565:
    # LMBench runs against two vLLM replicas behind one service; a load tool's file does not
    # say how many servers answered, and one was simulated without a word
    path = _bench(tmp_path / "b.json", "meta-llama/Llama-3.1-8B-Instruct")
    code, _, err = _run("validate", "--records", path, "--out", tmp_path / "v", "--gpu", "H100")
    assert code == 0, err
    assert ("one server (ASSUMED: the recording does not say how many servers answered at its "
            "URL; pass --set fleet.num_replicas=N for N behind a router)") in err
    code, out, err = _run("validate", "--records", path, "--out", tmp_path / "v2", "--gpu",
                          "H100", "--set", "fleet.num_replicas=2")
    assert code == 0, err
    assert "one server" not in err and "2 replicas" in out


def test_the_headline_writes_every_count_alike(tmp_path: Path) -> None:
    # muma378/vllm-benchmark benchmark_result_0910/ds-20250909-165533-gds-400g.json: "2,505
    # requests simulated, 2505 measured"
    path = _bench(tmp_path / "b.json", "Llama-3.1-8B", n=2505)
    doc = json.loads(path.read_text())
    doc["errors"] = ["timeout"] * 1200 + [""] * 1305
    path.write_text(json.dumps(doc))
    said = recording_headline(read_recording(path))
    assert ": 2,505 requests simulated, 1,305 measured, 1,200 not measured (failed" in said
