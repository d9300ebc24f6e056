"""What a genai-bench experiment's metadata says of the server it measured (its GPU and how
many) and of how its client sent (not streamed; open loop).

genai-bench 0.0.5 takes ``--server-gpu-type`` from a fixed list of labels (``cli/option_groups.py``
:370-385: ``H100``, ``A100-80G``, ``A100-40G``, ``MI300``, ``A10``, ``H200``, ``B200``,
``RTX-PRO-6000``) and ``--server-gpu-count``, "the number of the GPU cards serving the backend
model server" (:363-368, a string), and writes both into ``experiment_metadata.json``
(``protocol.py`` ``ExperimentMetadata.server_gpu_type`` / ``server_gpu_count``). The labels are the
user's, for its reports: they name a GPU family, not its form factor (an H100 SXM, PCIe or NVL
card alike are ``H100``). A label of one preset's family is read as that preset, said with the
card it could also have been; ``MI300`` (an MI300X or MI300A) and ``A10`` (no preset: the A10G is
another card) are kept as written, so that the command asks for ``--gpu`` rather than
simulate another GPU."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GENAI_BENCH_GPUS: dict[str, tuple[str, str]] = {
    "H100": ("H100-SXM", "an H100 PCIe or NVL card is another: --gpu H100-PCIe"),
    "A100-80G": ("A100-80GB", "an A100 80GB PCIe card (1,935 GB/s, PCIe links, NVLink only "
                              "as a 2-GPU bridge) is no preset: --gpu gpu.json"),
    "A100-40G": ("A100-40GB", "an A100 40GB PCIe card (PCIe links, NVLink only as a 2-GPU "
                              "bridge) is no preset: --gpu gpu.json"),
    "H200": ("H200", ""),
    "B200": ("B200", ""),
    "RTX-PRO-6000": ("RTX-PRO-6000", ""),
}
"""genai-bench's ``--server-gpu-type`` labels that name one preset's GPU: the preset, and what
else the label could have been (NVIDIA's A100 datasheet: the 80GB SXM card 2,039 GB/s, its
PCIe card 1,935 GB/s; the PCIe cards link by PCIe, two at most by an NVLink bridge)."""


GENAI_BENCH_ENGINES: dict[str, str] = {"vLLM": "vllm", "SGLang": "sglang", "TGI": "tgi",
                                       "TRT-LLM": "trtllm"}
"""genai-bench's ``--server-engine`` labels (0.0.5 ``cli/option_groups.py``:396-400: ``vLLM``,
``SGLang``, ``TGI``, ``cohere-TensorRT``, ``cohere-vLLM``, ``LlamaCPP``; Baseten's fork adds
``TRT-LLM`` and ``TokenSpeed``) of a server kvbudget simulates: its engine. The others
(Cohere's own builds, llama.cpp, TokenSpeed) are said in a note, none simulated in their
place without saying so."""


def server_config(meta: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The GPU (``gpu``), the tensor parallelism one GPU implies (``tensor_parallel_size``) and
    the tokenizer the experiment names, with notes saying how each was read."""
    config: dict[str, Any] = {}
    notes: list[str] = []
    tokenizer = meta.get("server_model_tokenizer")
    if isinstance(tokenizer, str) and tokenizer.strip():
        config["tokenizer"] = tokenizer
    engine = meta.get("server_engine")
    if isinstance(engine, str) and engine.strip() and engine not in GENAI_BENCH_ENGINES:
        notes.append(f"the recording's server is {engine} (genai-bench's --server-engine), "
                     "which kvbudget has no model of: the engine simulated is the one the "
                     "settings line names (pass --engine for the closest)")
    label = meta.get("server_gpu_type")
    if isinstance(label, str) and label.strip():
        preset, other = GENAI_BENCH_GPUS.get(label, (label, ""))
        config["gpu"] = preset
        if preset != label:
            notes.append(f"GPU: {preset}, for genai-bench's --server-gpu-type {label} (a label "
                         "the user chose from its list, naming the GPU family, not the card"
                         f"{'; ' + other if other else ''})")
    count = meta.get("server_gpu_count")
    if isinstance(count, str) and count.strip():
        num = int(count) if count.strip().isdigit() else 0
        if num == 1:
            config["tensor_parallel_size"] = 1
        elif num > 1:
            notes.append(f"{num} GPUs served the model (genai-bench's --server-gpu-count), "
                         "split in a way the file does not say (tensor parallelism or replicas): "
                         "pass --tensor-parallel-size or --set fleet.num_replicas=N")
        else:
            notes.append(f"server_gpu_count {count!r} is no count of GPUs: not read")
    return config, notes


UNSTREAMED_TTFT_S = 0.001
"""The TTFT genai-bench records of a request it did not stream: 1 ms after the send."""


def unstreamed_note(options: Mapping[str, str]) -> str | None:
    """What a run of ``--disable-streaming`` (``options``: the metadata's ``cmd``) timed, or None.

    genai-bench (basetenlabs/genai-bench 0.0.2, which added the flag, ``cli/option_groups.py``
    :26, a flag ``cli.py`` writes into ``cmd`` as ``--disable-streaming True`` :297-310) then
    posts with ``"stream": false`` and, "for non-streaming, we can't measure TTFT", records
    ``time_at_first_token = start_time + 0.001`` (``user/openai_user.py``:500,
    ``user/baseten_user.py``:378): every TTFT is that placeholder. The whole answer came in one
    read, so a request is read as a non-streaming client saw it: its first token at its E2E."""
    if "--disable-streaming" not in options or options["--disable-streaming"] in (
            "False", "false"):
        return None
    return ("not streamed (--disable-streaming in cmd): genai-bench records each request's "
            f"TTFT as {UNSTREAMED_TTFT_S * 1e3:g} ms after its send, a placeholder ('we can't "
            "measure TTFT'), not a time the server answered: each request is read as its "
            "client saw it, the whole answer at its E2E, so its TTFT and TPOT are left out of "
            "every comparison and fit, its E2E kept")


def open_loop_refusal(options: Mapping[str, str]) -> str | None:
    """Why a run of genai-bench's open-loop async runner cannot be replayed, or None.

    basetenlabs/genai-bench 0.0.2 ``--execution-engine async --qps-level R`` sends requests at R
    a second (``async_runner/open_loop.py``, gaps from ``--distribution``) and stores R in the
    run's ``num_concurrency`` "for compatibility" (``cli.py``:615-625), naming its file
    ``..._num_concurrency_<R>_time_<T>s.json`` (:700-708): read as such, it would be a closed
    loop of R users, another load. Its files keep no send time to replay."""
    rate = options.get("--qps-level")
    if not rate:
        return None
    return (f"ran open-loop at --qps-level {rate} (genai-bench's async runner, "
            f"--execution-engine {options.get('--execution-engine') or 'async'}), which stores "
            "the rate in num_concurrency: replayed as that many users it would be a closed "
            "loop, another load, and its files keep no send time to replay the arrivals; pass "
            "a run of --num-concurrency, or the records of a tool that keeps send times")
