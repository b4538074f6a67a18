# The README's two commands: `make demo` and `make test`. Everything installs into .venv.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXTRAS  ?= serve,dev,milvus,dense

.PHONY: install demo test bench assets reproduce serve lint clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned: the CPU build lies on this machine's disk; a looser request pulls a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

assets: install
	$(BIN)/tokenspace assets install

demo: assets
	$(BIN)/tokenspace demo

test: install
	$(BIN)/python -m pytest tests

bench: install
	$(BIN)/python benchmarks/search_speed.py

reproduce: assets
	$(BIN)/python benchmarks/reproduce.py

lint: install
	$(BIN)/ruff check src tests benchmarks

clean:
	rm -rf $(VENV) build *.egg-info
