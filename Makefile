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
	@echo "gpusched: http://127.0.0.1:$${GPUSCHED_PORT:-8000}/"
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/daphne -b 127.0.0.1 -p $${GPUSCHED_PORT:-8000} gpusched.asgi:application

test: venv
	PATH="$(CURDIR)/$(BIN):$$PATH" scripts/test.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: venv
	$(BIN)/python manage.py bench_scheduler --nodes 5000 --pods 20000 --topology mixed --json
