# Two entry points (see README): `make run` and `make test`. Both create/reuse .venv in the repo root.
# `make run` installs the package with every extra (so each README block works after it); `make test` adds
# the dev tools. The install goes through uv (bootstrapped into the venv with pip: ~3x faster than pip for
# a fresh install here); `make PIP=pip ...` installs with plain pip instead.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP ?= uv
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
# uv does not read pip's configuration: hand it the machine's pip constraints (e.g. a torch cap) where present
PIP_CONSTRAINTS := $(wildcard /etc/xdg/pip/constraints.txt)
ifeq ($(PIP),uv)
INSTALL = $(VENV)/bin/uv pip install --quiet --python $(PY) $(if $(PIP_CONSTRAINTS),-c $(PIP_CONSTRAINTS))
BOOTSTRAP = $(PY) -m pip install --quiet uv
else
INSTALL = $(PY) -m pip install --quiet
BOOTSTRAP = $(PY) -m pip install --quiet --upgrade pip
endif

.PHONY: setup setup-run run run-full run-psg test bench docs lint clean

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(BOOTSTRAP)
	$(INSTALL) -e '.[all]'
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP)
	$(INSTALL) -e '.[all,dev]'
	touch $(STAMP)

setup: $(STAMP)

setup-run: $(RUN_STAMP)

run: $(RUN_STAMP)
	bash scripts/run_eeg_demo.sh

# the demo with its secondary rows: the supervised ceiling (the same encoder trained on the stage labels) and
# YASA's zero-shot row (extra [yasa], installed here) on whole Sleep-EDF-format nights, s = 1000
run-full: $(RUN_STAMP)
	$(PY) -c 'import sys; sys.exit(sys.version_info < (3, 11))' && $(INSTALL) -e '.[all,yasa]' || echo "YASA needs Python >= 3.11: its row is left out"
	DEMO_CEILING=true bash scripts/run_eeg_demo.sh

# the PSG modality demo: synthetic whole-PSG nights, one encoder per modality (k = 3), M3G and SleepFM's
# leave-one-out loss, frozen-feature tables and figure in runs/psg_demo (sizes: configs/demo_psg.yaml)
run-psg: $(RUN_STAMP)
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} $(VENV)/bin/mvapp experiment psg-modalities \
		--config configs/psg_modalities_sleepfm.yaml --sizes configs/demo_psg.yaml --data demo_data/psg --out runs/psg_demo

test: $(STAMP)
	$(PY) -m pytest -q -n auto tests

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(PY) scripts/bench/bench_losses.py

# the documentation site (mkdocs + Material + mkdocstrings), strict: a broken link or reference fails
DOCS_STAMP := $(VENV)/.installed-docs
$(DOCS_STAMP): $(STAMP)
	$(INSTALL) -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --quiet

clean:
	rm -rf runs demo_data
