PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test lint bench

venv: $(STAMP)

# Reinstall only when pyproject.toml is newer than the stamp.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# The demo runs in debug mode unless GPUSCHED_DEBUG is set.
run: export GPUSCHED_DEBUG ?= 1
run: venv
	$(BIN)/python manage.py demo

test: venv
	PATH="$(CURDIR)/$(BIN):$$PATH" scripts/test.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: venv
	$(BIN)/python manage.py bench_scheduler --nodes 5000 --pods 20000 --topology mixed --json
