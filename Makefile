# The two commands of the README. Each one sets up .venv (once, pinned by constraints.txt) and then runs.
#   make demo   trains, evaluates and translates on the built-in demo dataset (no network, ~10 min on 2 CPU cores)
#   make test   runs the test suite (what CI runs through .ci/run)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint bench

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev,bench,ct2,serve]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	HF_HUB_OFFLINE=1 $(PY) train.py --config configs/demo.yaml

# one pytest worker per CPU core (pytest-xdist), each test file on one worker so its module fixtures are built once;
# then the numerically sensitive folders again on an older instruction set (PyTorch's AVX2 kernels, MKL's AVX2 code
# paths), as a user's CPU may have it: a test that holds on one CPU only fails here (docs/layout.md#tests)
ISA_TESTS := tests/inference tests/models tests/export tests/convert
ISA_ENV := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2
test: setup
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto --dist loadfile
	$(ISA_ENV) HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto --dist loadfile $(ISA_TESTS)

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
