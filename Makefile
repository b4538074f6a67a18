# The README's two commands: `make demo` and `make test`. Everything installs into .venv.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
EXTRAS  ?= models,data,st,dev,milvus,dense,explain,onnx

.PHONY: install e2e-deps demo test bench assets system-packages bench-packages reproduce serve screenshot lint clean release-model

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# torch first, pinned: the CPU build lies on this machine's disk; the models extra's range (torch>=2.4,<3)
# then keeps it, where a bare request would pull a CUDA build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

install: $(STAMP)

# Browser for the end-to-end test of the web page: Debian's chromium + playwright-core from npm.
# Best effort: without root/apt/npm the e2e test skips and says why.
E2E_STAMP := tests/serve/e2e/node_modules/.installed
$(E2E_STAMP): tests/serve/e2e/package-lock.json
	@command -v chromium >/dev/null || (command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && \
		(apt-get install -y -q chromium >/dev/null 2>&1 || (apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null))) || \
		echo "chromium not installed: the browser test will skip"
	@command -v npm >/dev/null && (cd tests/serve/e2e && npm ci --silent --no-audit --no-fund) && touch $(E2E_STAMP) || \
		echo "npm unavailable: the browser test will skip"

e2e-deps: $(E2E_STAMP)

# The Debian packages three data sets come from (OpenClipart, WordNet, Fashion-MNIST). Installed here, never
# by the library: tokenspace.assets only finds, verifies and links /usr/share/... into the cache, and names
# this target when a package is missing. Best effort, as e2e-deps: without root or apt-get it prints the
# command to run. tests/test_assets.py keeps this list equal to assets.system_packages().
SYSTEM_PACKAGES := openclipart-png openclipart-svg wordnet-base dataset-fashion-mnist
# the real-text benchmark corpus's text: dictionaries, WordNet (also a system package: its lemmas are the
# queries), manual pages, documentation (benchmarks/real_corpus.py; not library assets, so `make demo` does
# not install them: `make bench-packages` does)
BENCH_PACKAGES := wordnet-base dict-gcide dict-foldoc dict-jargon perl-doc libssl-doc tcl8.6-doc libx11-doc freebsd-manpages \
	python3.11-doc linux-doc postgresql-doc-15 python-django-doc python-sqlalchemy-doc
define apt_install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || printf '%s ' $$p; done); \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get install -y -q $$missing >/dev/null 2>&1 || \
			(apt-get update -q >/dev/null && apt-get install -y -q $$missing >/dev/null); \
	else \
		echo "Debian packages not installed: $$missing(as root: apt-get install -y $$missing)"; \
	fi
endef
system-packages:
	$(call apt_install,$(SYSTEM_PACKAGES))
bench-packages:
	$(call apt_install,$(BENCH_PACKAGES))

# every data set, optional ones included: the concept splits are drawn over all installed sources, so the
# demo's held-out images are held out from the release model only when the same sources are installed
assets: install system-packages
	$(BIN)/tokenspace assets install --optional

# In a terminal the demo ends serving its page (Ctrl-C stops); in scripts and CI it checks the page
# over HTTP and exits.
demo: assets
	$(BIN)/tokenspace demo $$([ -t 0 ] && echo --serve)

serve: install
	$(BIN)/tokenspace serve --index runs/demo/index

# The README's screenshot (docs/screenshot-search.png): the browser test's driver serves the demo's index
# (after `make demo`) on a free port, searches SHOT_QUERY and saves the page as the README shows it.
SHOT_QUERY ?= a red heart
screenshot: install e2e-deps
	node tests/serve/e2e/search.mjs --index runs/demo/index --tokenspace $(BIN)/tokenspace \
		--query "$(SHOT_QUERY)" --heatmap no --out docs/screenshot-search.png

# The release model (models/tokenspace-stair-drawings): its STAIR part and the dense twin train in about 75
# minutes on 2 cores, resumable (run it again after a stop); then release v2 = that STAIR part fused with the
# tagger (benchmarks/release_model.py FUSION), measured on every test split: the card, benchmarks/results/release_model.json.
release-model: assets
	$(BIN)/tokenspace data build
	$(BIN)/python -m benchmarks.release_model

test: install e2e-deps
	$(BIN)/python -m pytest tests --durations=15

bench: install
	$(BIN)/pip install -q -e ".[$(EXTRAS),bench]"
	$(BIN)/python -m benchmarks.engines speed
	$(BIN)/python -m benchmarks.serve_load --connections 32 --duration 30 \
		--json benchmarks/results/serve_load.json --write benchmarks/results/serve_load.md

reproduce: assets
	$(BIN)/python -m benchmarks.reproduce

lint: install
	$(BIN)/ruff check src tests benchmarks experiments

clean:
	rm -rf $(VENV) build *.egg-info

# On a machine with one CUDA GPU: each paper config at its real tower shapes for a few hundred steps
# (random init, synthetic shards): step time, samples/s, peak memory, loss falling. CPU: add ARGS=--tiny.
.PHONY: gpu-smoke
gpu-smoke: install
	$(BIN)/python -m benchmarks.gpu_run smoke $(ARGS)

# On a machine with one CUDA GPU, no network needed: every GPU measurement (throughput with and without
# the active-column loss and the token head's variants; the loss at the paper's global batch; where the
# encode's time goes and the device encode path; GPU-days; open_clip when installed; the smoke runs; the
# STAIR step's profile and variants; regional torch.compile) in < 10 minutes, into
# benchmarks/results/gpu_run.json. No install step: the GPU machine has no network, so the package comes from
# src/ (PYTHONPATH). CPU: ARGS=--tiny.
.PHONY: gpu-run
gpu-run:
	PYTHONPATH=src $(BIN)/python -m benchmarks.gpu_run $(ARGS)
