# Two entry points (see README): `make run` and `make test`. Both create/reuse .venv in the repo root.
# `make run` installs what the demo needs (the package alone); `make test` adds the dev and text extras.
# On a machine without an NVIDIA driver (no nvidia-smi), torch and torchvision come from the PyTorch CPU
# wheel index (~0.2 GB instead of ~4 GB of CUDA libraries to download and unpack); TORCH_INDEX= (empty)
# installs them from PyPI as any other dependency, TORCH_INDEX=URL from that index. If the index cannot be
# reached (no retries), pip falls back to PyPI (docs/eeg.md "Demo", install).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,https://download.pytorch.org/whl/cpu)

.PHONY: setup setup-run run test bench clean

$(RUN_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	@if [ -n "$(TORCH_INDEX)" ] && ! $(PY) -c "import torch, torchvision" 2>/dev/null; then \
	  echo "installing torch + torchvision from $(TORCH_INDEX) (no NVIDIA driver found; TORCH_INDEX= for PyPI's)"; \
	  $(PY) -m pip install --quiet --retries 0 --timeout 15 torch torchvision --index-url "$(TORCH_INDEX)" \
	    || echo "note: $(TORCH_INDEX) not reachable; torch comes from PyPI"; \
	fi
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
