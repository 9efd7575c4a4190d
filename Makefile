# The two commands of the README. Each one sets up .venv (once, pinned by constraints.txt) and then runs.
#   make demo   trains, evaluates and translates on the built-in demo dataset (no network, ~10 min on 2 CPU cores)
#   make test   runs the test suite (what CI runs through .ci/run)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test lint bench browser test-transformers

$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e ".[dev,bench,ct2,serve]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	HF_HUB_OFFLINE=1 $(PY) train.py --config configs/demo.yaml

# one pytest worker per CPU core (pytest-xdist), each test file on one worker so its module fixtures are built once;
# then the numerically sensitive folders again on an older instruction set (PyTorch's AVX2 kernels, MKL's and oneDNN's
# AVX2 code paths: an AMD Zen 3), as a user's CPU may have it: a test that holds on one CPU only fails there
# (docs/layout.md#tests). Those of them that meet transformers' API (TRANSFORMERS_API_TESTS, below) take that pass on
# the next transformers release: each of these tests runs on AVX2 once and on each release once, in two passes, not three
ISA_TESTS := tests/inference tests/models tests/export tests/convert
ISA_ENV := ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2
# the browser of tests/serve/test_page.py (the translation page of `vaswani serve`, driven through selenium): Debian's
# chromium and chromedriver, installed with apt-get where they are missing (as root, or through sudo); where neither
# works the browser tests are skipped, except under CI=true, where they fail
BROWSER_PACKAGES := chromium chromium-driver
browser:
	@if ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; then \
	  if [ "$$(id -u)" = 0 ]; then sudo=; else sudo=sudo; fi; \
	  { $$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -qq \
	    $(BROWSER_PACKAGES); } \
	  || echo "warning: could not install $(BROWSER_PACKAGES) with apt-get: the browser tests cannot run"; \
	fi

# the tests that meet transformers' model and generation API (the cache, masks, generate(), the pipeline,
# trust_remote_code) run last on TRANSFORMERS_NEXT, the release after the pinned one: pyproject.toml allows it, so
# `pip install vaswani` may give a user it, and the model takes each release's names (docs/layout.md#tests)
TRANSFORMERS_NEXT := 5.24.0
TRANSFORMERS_API_TESTS := tests/models tests/inference

test: setup browser
	HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto --dist loadfile
	$(ISA_ENV) HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto --dist loadfile $(filter-out $(TRANSFORMERS_API_TESTS),$(ISA_TESTS))
	@$(MAKE) --no-print-directory test-transformers TRANSFORMERS=$(TRANSFORMERS_NEXT) TESTS="$(TRANSFORMERS_API_TESTS)" \
	  TEST_ENV="$(ISA_ENV)"

# the suite (or TESTS, some of its folders) against another transformers release than the pinned one (pip's newest, or
# pyproject.toml's floor), installed beside it in .transformers/VERSION (that package only: the pinned tokenizers and
# huggingface_hub must satisfy it, which transformers checks when imported), with the variables of TEST_ENV if given
# (make test gives ISA_ENV): make test-transformers TRANSFORMERS=5.24.0
test-transformers:
	@test -n "$(TRANSFORMERS)" || { echo "error: name the release, e.g. make test-transformers TRANSFORMERS=5.24.0" >&2; exit 2; }
	@$(MAKE) --no-print-directory setup
	test -d .transformers/$(TRANSFORMERS) || { rm -rf .transformers/$(TRANSFORMERS).partial && \
	  $(PY) -m pip install --quiet --no-deps --target .transformers/$(TRANSFORMERS).partial "transformers==$(TRANSFORMERS)" && \
	  mv .transformers/$(TRANSFORMERS).partial .transformers/$(TRANSFORMERS); }
	$(TEST_ENV) PYTHONPATH=$(CURDIR)/.transformers/$(TRANSFORMERS) HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n auto --dist loadfile $(TESTS)

lint: setup
	$(VENV)/bin/ruff check . && $(VENV)/bin/ruff format --check .
