# Two entry points (see README): `make run` and `make test`. Both create/reuse .venv in the repo root.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: setup run test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,text]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	bash scripts/run_eeg_demo.sh

test: $(STAMP)
	$(PY) -m pytest -q tests

bench: $(STAMP)
	$(PY) scripts/bench_losses.py

clean:
	rm -rf runs demo_data
