# Every target creates and reuses .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test fuzz bench bench-quick lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpulens demo

# The quick tests first, then those marked slow (the simulated incidents, real delivery).
test: $(STAMP)
	$(BIN)/pytest -q -m "not slow"
	$(BIN)/pytest -q -m slow --durations=20

# The property-based tests (marker `property`) with many more examples than `make test`
# runs (the hypothesis profile "fuzz" in tests/conftest.py). FUZZ_ARGS: more pytest options.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(BIN)/pytest -q -m property $(FUZZ_ARGS)

# Each benchmark prints its figures and their ratio to the target. bench-quick runs every
# one at its `--quick` size (each bench's --help and docs/performance.md give the sizes).
# bench/nvml_real.py needs a GPU and is run by hand (docs/collectors.md).
BENCHES := ingest ingest_parse alerts alert_quality analytics report collect dashboard latest vs_prometheus scale stragglers fidelity fleet

bench: $(STAMP)
	@for b in $(BENCHES); do echo "== bench/$$b.py $(BENCH_ARGS)"; $(BIN)/python bench/$$b.py $(BENCH_ARGS) || exit 1; done

bench-quick: $(STAMP)
	@$(MAKE) --no-print-directory bench BENCH_ARGS=--quick

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info test-output
