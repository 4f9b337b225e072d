PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv run test lint bench

# Everything here is development, the demo, benchmarks or tests: the harness (the simulator and
# the benchmarks, sim/ and bench/) is installed (GPUSCHED_HARNESS, gpusched/settings.py).
export GPUSCHED_HARNESS := 1

venv: $(STAMP)

# Reinstall only when pyproject.toml is newer than the stamp.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

# The dashboard's front-end packages (npm registry, lock file): `npm ci` only when the lock file is
# newer than the stamp, then `npm run build` copies them into the static files (ignored by git).
FRONTEND := dashboard/frontend
FRONTEND_STAMP := dashboard/static/dashboard/vendor/.installed

.PHONY: frontend
frontend: $(FRONTEND_STAMP)

$(FRONTEND_STAMP): $(FRONTEND)/package-lock.json $(FRONTEND)/copy-vendor.mjs
	cd $(FRONTEND) && npm ci --no-audit --no-fund --loglevel=error && npm run --silent build
	touch $(FRONTEND_STAMP)

# The demo runs in debug mode unless GPUSCHED_DEBUG is set.
run: export GPUSCHED_DEBUG ?= 1
run: venv frontend
	$(BIN)/python manage.py demo

test: venv frontend
	PATH="$(CURDIR)/$(BIN):$$PATH" scripts/test.sh

# The edit loop's tier (under a minute): the pure core, the layer table, the parsers of real
# inputs and the simulator's pure parts; no database server, Redis, browser or subprocess.
FAST_TESTS := tests/scheduling/core tests/test_architecture.py tests/scheduling/test_event_readers.py \
	tests/telemetry/test_parsing.py tests/telemetry/test_dcgm.py tests/telemetry/test_exposition.py \
	tests/telemetry/test_real_exporter_outputs.py tests/kube/test_translate.py tests/kube/test_dra.py \
	tests/sim/test_spec.py tests/sim/test_arrivals.py tests/sim/test_cluster.py \
	tests/sim/test_utilization.py tests/sim/test_workload.py tests/sim/kubernetes/test_pod_spec.py
.PHONY: test-fast
test-fast: venv
	$(BIN)/pytest -q -p no:cacheprovider -n $(or $(TEST_WORKERS),auto) $(FAST_TESTS)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# With bench-stack (about 95 s; needs PostgreSQL and Redis, see below).
bench: venv bench-stack
	$(BIN)/python manage.py bench_scheduler --nodes 5000 --pods 20000 --topology mixed --json

# One 5,000-node x 8-GPU x 10-field DCGM scrape parsed and rolled up, in a fresh SQLite file.
.PHONY: bench-telemetry
bench-telemetry: export DATABASE_URL = sqlite:///$(CURDIR)/var/bench-telemetry.sqlite3
bench-telemetry: venv
	mkdir -p var && rm -f var/bench-telemetry.sqlite3*
	$(BIN)/python manage.py migrate --noinput -v 0
	$(BIN)/python manage.py bench_telemetry --nodes 5000 --gpus 8 --fields 10 --json

# The whole stack: docker-compose.yml's processes run natively (bench/stack.py) on a fresh
# database on the PostgreSQL at BENCH_POSTGRES_URL (dropped after) and the Redis at REDIS_URL, with
# 8 tenants submitting through the REST API and 200 live dashboards for 60 s, spread over two web
# replicas (docs/benchmarks.md).
BENCH_POSTGRES_URL ?= $(or $(GPUSCHED_TEST_POSTGRES_URL),postgres://postgres@127.0.0.1:5432/postgres)
.PHONY: bench-stack
bench-stack: export DATABASE_URL = $(BENCH_POSTGRES_URL)
bench-stack: venv
	$(BIN)/python manage.py bench_stack --tenants 8 --dashboards 200 --duration 60 --nodes 100 --web-replicas 2 --json

# The FGD paper's protocol on the four shared openb traces, 10 seeds each: best-fit and fgd (the
# replay's fidelity against the published means) and gpusched. JSON outputs go to var/bench-replay/,
# one plot per trace (ours over the paper's curves) to docs/img/, and a markdown table to stdout.
# About 12 runs x 10 seeds x ~4 s of CPU; REPLAY_JOBS seeds run in parallel.
OPENB ?= ../shared/data/openb
REPLAY_SEEDS ?= 42-51
REPLAY_JOBS ?= 2
REPLAY = $(BIN)/python manage.py replay openb --nodes $(OPENB)/openb_node_list_gpu_node.csv \
	--paper $(OPENB)/fgd_analysis_allo_discrete.csv --seeds $(REPLAY_SEEDS) --jobs $(REPLAY_JOBS) --json

.PHONY: bench-replay
bench-replay: venv
	mkdir -p var/bench-replay docs/img
	set -e; for trace in default gpushare40 cpu100 multigpu50; do \
		pods=$(OPENB)/openb_pod_list_$$trace.csv; out=var/bench-replay/$$trace; \
		$(REPLAY) --pods $$pods --policy best-fit > $$out-best-fit.json; \
		$(REPLAY) --pods $$pods --policy fgd > $$out-fgd.json; \
		$(REPLAY) --pods $$pods --policy gpusched --plot docs/img/openb-$$trace.png \
			--overlay $$out-best-fit.json $$out-fgd.json > $$out-gpusched.json; \
	done
	$(BIN)/python -m bench.replay.report var/bench-replay/*.json
