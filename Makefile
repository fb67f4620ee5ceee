# Two entry points (see README): `make run` and `make test`. Both create/reuse .venv in the repo root.
# `make run` installs what the demo needs (the package alone); `make test` adds the dev and text extras.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: setup setup-run run test bench clean

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
	$(PY) scripts/bench_losses.py

clean:
	rm -rf runs demo_data
