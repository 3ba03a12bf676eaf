# Everyday commands. The two a new user needs: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test install install-dev horovod lint format bench clean help images image-cuda

help:
	@echo "make run     set up and start the lab (portal + worker + beat) on http://127.0.0.1:8000/"
	@echo "make test    install test dependencies and run lint + the whole test suite"
	@echo "make lint    ruff check + format check;  make format  reformat"
	@echo "make bench   simulator benchmarks (python -m runners bench)"
	@echo "make horovod build (once, then cached) and install the real Horovod into .venv"
	@echo "make images  container images: runner (CPU) and portal; LAB_LOCAL_SERVICES=1 adds Redis/PostgreSQL (docker/README.md)"
	@echo "make image-cuda  the CUDA runner image lab-runner:cuda (PyPI's CUDA torch and the real Horovod with NCCL, offline from a host-made wheelhouse)"

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# Reinstall only when a requirements file changes.
$(VENV)/.installed: requirements.txt $(BIN)/python
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt $(VENV)/.installed
	$(BIN)/pip install --quiet -r requirements-dev.txt
	touch $@

install: $(VENV)/.installed
install-dev: $(VENV)/.installed-dev

# The real Horovod, built from source once per Horovod/torch/Python version and cached.
horovod: install
	scripts/horovod-wheel.sh

run: install
	scripts/run.sh

lint: install-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install-dev
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

test: install-dev lint horovod
	scripts/test.sh

bench: install
	$(BIN)/python -m runners bench

# Container images (docker/README.md); rebuilds only those whose inputs changed.
images: install
	scripts/images.sh

# The CUDA runner image (2.7 GB of wheels, Horovod compiled with NCCL once; not part of `make images`).
image-cuda: install
	scripts/images.sh runner-cuda

clean:
	rm -rf var/broker var/static .pytest_cache .ruff_cache
