# Two entry points (see README): `make run` and `make test`. Both create/reuse .venv in the repo root.
# `make run` installs what the demo needs (the package alone); `make test` adds the dev and text extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: setup setup-run run test bench docs clean

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(PY) -m pip install --quiet -e '.[dev,text]'
	touch $(STAMP)

setup: $(STAMP)

setup-run: $(RUN_STAMP)

run: $(RUN_STAMP)
	bash scripts/run_eeg_demo.sh

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) scripts/bench/bench_losses.py

# the documentation site (mkdocs + Material + mkdocstrings), strict: a broken link or reference fails
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

clean:
	rm -rf runs demo_data
