# Every target creates and reuses .venv by itself.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test bench bench-quick lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/gpulens demo

test: $(STAMP)
	$(BIN)/pytest -q

# Each benchmark prints its figures and their ratio to the target.
# `make bench BENCH_ARGS=--quick` once every bench takes --quick; until then bench-quick
# gives the older benches smaller sizes by hand (docs/performance.md).
BENCHES := ingest ingest_parse alerts analytics report collect dashboard vs_prometheus scale
QUICK := ingest:--quick ingest_parse:--nodes=768 alerts:--gpus=6144 \
	analytics:--gpus=6144_--days=2 collect:--nodes=768_--endpoints=64 \
	dashboard:--days=7_--runs=5 vs_prometheus:--quick scale:--quick

bench: $(STAMP)
	@for b in $(BENCHES); do echo "== bench/$$b.py"; $(BIN)/python bench/$$b.py $(BENCH_ARGS) || exit 1; done

bench-quick: $(STAMP)
	@for q in $(QUICK); do b=$${q%%:*}; a=$$(echo $${q#*:} | tr _ ' '); echo "== bench/$$b.py $$a"; $(BIN)/python bench/$$b.py $$a || exit 1; done

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) build *.egg-info test-output
