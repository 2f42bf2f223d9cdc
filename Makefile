# bertindex: `make demo` and `make test` set everything up on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed-stamp
DEMO   := .demo

.PHONY: install browser demo test test-fast bench lint docs clean

# Python writes its bytecode caches (__pycache__/, git-ignored) even where the environment says
# not to: without them every process compiles the project's modules again (~0.17 s of each
# `bertindex` start here, and the tests start hundreds of processes) and pytest rewrites every
# test module's asserts in each worker
unexport PYTHONDONTWRITEBYTECODE

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	# the CPU build first: a bare `torch` requirement would pull a multi-GB CUDA build
	$(PIP) install --quiet torch==2.13.0
	$(PIP) install --quiet -e '.[cpu,dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(PY) -m indexer.ingest.stdlib_corpus $(DEMO)/stdlib.jsonl
	BERTINDEX_PROGRESS=1 $(VENV)/bin/bertindex index $(DEMO)/stdlib.jsonl --collection stdlib --store $(DEMO)/store
	$(VENV)/bin/bertindex search "parse command line arguments" --store $(DEMO)/store -k 5
	$(VENV)/bin/bertindex search "compress a file with gzip" --store $(DEMO)/store -k 3 --where kind=function

# pages are tested in a real headless browser: Debian's chromium and its matching driver
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; }

# two pytest workers (pytest-xdist; `worksteal` and the longest-first order in tests/conftest.py):
# most tests wait on subprocesses, DuckDB files and single-threaded Python, so two processes use
# 2 cores better than one (617 tests: 9 min 27 s in one process, 6 min 2 s in two, Intel Xeon,
# quiet); tests share no fixed port or file
test: $(STAMP) browser lint
	$(PY) -m pytest -q -n 2 --dist worksteal

# the inner loop (under 2 minutes on 2 quiet cores): no real data (`slow`) and none of the
# modules marked `heavy` (seconds each: browser pages, Prefect flows and Dask, the reliability
# suites, real server processes, training runs), stopping at the first failure; `make test`
# runs them all
test-fast: $(STAMP)
	$(PY) -m pytest -q -x -m "not slow and not heavy"

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict -d site

bench: $(STAMP)
	$(PY) benchmarks/encode_throughput.py
	$(PY) benchmarks/index_end_to_end.py

# everything the GPU run (benchmarks/gpu_check.py) reads, in the git-ignored gpu-pack/ (at most
# 64 MiB, size printed): the head is trained once, the CPU reference vectors are cached
.PHONY: gpu-pack
GPU_HEAD := .bench/gpu-head-offensive
gpu-pack: $(STAMP)
	test -f $(GPU_HEAD)/model.safetensors || $(VENV)/bin/bertindex train classifier \
	  --data ../shared/data/tweeteval/offensive --out $(GPU_HEAD) --head-only --pooling cls
	$(PY) benchmarks/gpu_pack.py --out gpu-pack --head $(GPU_HEAD)

# ruff (style, complexity), then mypy on the library (config in pyproject.toml); the import
# contracts run as a test (tests/project/test_layering.py)
lint: $(STAMP)
	$(VENV)/bin/ruff check indexer flows search tests benchmarks docs
	$(VENV)/bin/mypy

clean:
	rm -rf $(DEMO) .bertindex
