#!/usr/bin/env bash
# Lint, type-check and test. Makes sure PostgreSQL and Redis are reachable first (starting or,
# as root, installing them when absent; Prometheus is only installed, the tests start it) and
# exports their URLs for the tests that need them:
#   GPUSCHED_TEST_POSTGRES_URL, GPUSCHED_TEST_REDIS_URL  (already set => used as they are)
# Extra arguments go to pytest: scripts/test.sh -k healthz
# TEST_WORKERS sets pytest-xdist's worker count; by default two per CPU: the tests wait on
# subprocesses and sockets, but the run is CPU-bound, and each worker costs 20 s or more of CPU
# before its first test (importing and collecting the whole suite, migrating its test database;
# docs/benchmarks.md, tests); TEST_PG_WORKERS the PostgreSQL pass's (a third of that by default).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -x .venv/bin/python ]]; then
    export PATH="$PWD/.venv/bin:$PATH"
fi

PRIVATE_DIR=""
cleanup() {
    local running
    running="$(jobs -pr)"  # the passes beside the SQLite pass, when it was interrupted
    if [[ -n "$running" ]]; then
        # shellcheck disable=SC2086
        kill $running 2>/dev/null || true
        wait 2>/dev/null || true
    fi
    if [[ -n "$PRIVATE_DIR" ]]; then
        if [[ -f "$PRIVATE_DIR/pg/postmaster.pid" ]]; then
            as_postgres "$PG_BIN/pg_ctl" -D "$PRIVATE_DIR/pg" -m fast stop >/dev/null 2>&1 || true
        fi
        if [[ -f "$PRIVATE_DIR/redis.pid" ]]; then
            kill "$(cat "$PRIVATE_DIR/redis.pid")" 2>/dev/null || true
        fi
        rm -rf "$PRIVATE_DIR"
    fi
}
trap cleanup EXIT

log() { echo "test.sh: $*" >&2; }

private_dir() {
    if [[ -z "$PRIVATE_DIR" ]]; then
        PRIVATE_DIR="$(mktemp -d /tmp/gpusched-test.XXXXXX)"
        chmod 755 "$PRIVATE_DIR"
    fi
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() {  # wait_for SECONDS COMMAND...
    local deadline=$((SECONDS + $1))
    shift
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || return 1
        sleep 0.5
    done
}

apt_install() {
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
        log "cannot install $* (needs root and apt-get)"
        return 1
    fi
    log "installing $*"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- PostgreSQL -------------------------------------------------------------------------------

PG_BIN=""
pg_up() { pg_isready -q -h "$1" -p "$2"; }
as_postgres() {
    if [[ $(id -u) -eq 0 ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

ensure_postgres() {
    if [[ -n "${GPUSCHED_TEST_POSTGRES_URL:-}" ]]; then
        return
    fi
    if ! command -v pg_ctlcluster >/dev/null || ! command -v pg_isready >/dev/null; then
        apt_install postgresql
    fi
    local url="postgres://postgres@127.0.0.1:5432/postgres"
    if pg_up 127.0.0.1 5432; then
        export GPUSCHED_TEST_POSTGRES_URL="$url"
        return
    fi
    local cluster version started=""
    for cluster in /etc/postgresql/*/main; do
        [[ -d "$cluster" ]] || continue
        version="$(basename "$(dirname "$cluster")")"
        log "starting PostgreSQL $version"
        pg_ctlcluster --skip-systemctl-redirect "$version" main start && started=1
    done
    if [[ -n "$started" ]] && wait_for 30 pg_up 127.0.0.1 5432; then
        export GPUSCHED_TEST_POSTGRES_URL="$url"
        return
    fi

    # No system cluster could be started: run a private one on a free port.
    PG_BIN="$(dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")"
    private_dir
    local port
    port="$(free_port)"
    mkdir -p "$PRIVATE_DIR/pg"
    [[ $(id -u) -ne 0 ]] || chown postgres: "$PRIVATE_DIR/pg"
    log "starting a private PostgreSQL on 127.0.0.1:$port"
    as_postgres "$PG_BIN/initdb" -D "$PRIVATE_DIR/pg" -U postgres --auth=trust >/dev/null
    as_postgres "$PG_BIN/pg_ctl" -D "$PRIVATE_DIR/pg" -l "$PRIVATE_DIR/pg/server.log" -w \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $PRIVATE_DIR/pg" start >/dev/null
    export GPUSCHED_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
}

# --- Redis ------------------------------------------------------------------------------------

redis_up() {  # something on $1:$2 answers PING with PONG
    (
        exec 3<>"/dev/tcp/$1/$2"
        printf 'PING\r\n' >&3
        read -r -t 2 reply <&3
        [[ "$reply" == "+PONG"* ]]
    ) 2>/dev/null
}

ensure_redis() {
    if [[ -n "${GPUSCHED_TEST_REDIS_URL:-}" ]]; then
        return
    fi
    if redis_up 127.0.0.1 6379; then
        export GPUSCHED_TEST_REDIS_URL="redis://127.0.0.1:6379/0"
        return
    fi
    command -v redis-server >/dev/null || apt_install redis-server
    if [[ $(id -u) -eq 0 ]]; then
        log "starting Redis on 127.0.0.1:6379"
        mkdir -p /var/lib/redis /var/log/redis
        redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
            --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log || true
        if wait_for 15 redis_up 127.0.0.1 6379; then
            export GPUSCHED_TEST_REDIS_URL="redis://127.0.0.1:6379/0"
            return
        fi
    fi

    private_dir
    local port
    port="$(free_port)"
    log "starting a private Redis on 127.0.0.1:$port"
    redis-server --daemonize yes --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
        --dir "$PRIVATE_DIR" --pidfile "$PRIVATE_DIR/redis.pid" --logfile "$PRIVATE_DIR/redis.log"
    wait_for 15 redis_up 127.0.0.1 "$port"
    export GPUSCHED_TEST_REDIS_URL="redis://127.0.0.1:$port/0"
}

# --- Prometheus -------------------------------------------------------------------------------
# The telemetry tests start their own server (tests/telemetry/conftest.py) from the Debian package;
# apt must not start the packaged service (a policy-rc.d that says no, for the install only).

ensure_prometheus() {
    command -v prometheus >/dev/null && return
    local policy=/usr/sbin/policy-rc.d created=""
    if [[ $(id -u) -eq 0 && ! -e "$policy" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod +x "$policy"
        created=1
    fi
    apt_install prometheus || log "no prometheus: the tests that need it will be skipped"
    [[ -z "$created" ]] || rm -f "$policy"
}

# --- Chromium ---------------------------------------------------------------------------------
# The dashboard's end-to-end tests drive Debian's chromium with Playwright (from the dev extra,
# which never downloads a browser of its own).

ensure_chromium() {
    command -v chromium >/dev/null && return
    apt_install chromium || log "no chromium: the browser tests will be skipped"
}

# --- docker-compose ---------------------------------------------------------------------------
# Debian's docker-compose 1.29 validates docker-compose.yml (`config -q`) without a Docker engine.

ensure_docker_compose() {
    command -v docker-compose >/dev/null && return
    apt_install docker-compose || log "no docker-compose: the compose validation tests will be skipped"
}

# --- kubectl ----------------------------------------------------------------------------------
# `kubectl kustomize` builds deploy/ and deploy/monitoring/ (Debian's kubernetes-client; no cluster).

ensure_kubectl() {
    command -v kubectl >/dev/null && return
    apt_install kubernetes-client || log "no kubectl: the kustomize build tests will be skipped"
}

ensure_postgres
ensure_redis
ensure_chromium
ensure_prometheus
ensure_docker_compose
ensure_kubectl
log "PostgreSQL: $GPUSCHED_TEST_POSTGRES_URL  Redis: $GPUSCHED_TEST_REDIS_URL"

workers="${TEST_WORKERS:-$(($(nproc) * 2))}"
# The PostgreSQL pass and mypy run beside the SQLite pass, not after it: the SQLite pass's workers
# spend most of their time waiting on subprocesses and sockets, and its last minutes run a few long
# tests with the CPUs half idle. Their output is shown when the SQLite pass ends.
# --maxschedchunk 1: pytest-xdist hands each worker a test or two at a time as it frees; by default
# it first deals out a contiguous quarter of the run, which gave the first worker every slow test
# (they are sorted first, tests/conftest.py) to run one after another while the others idled.
pg_workers="${TEST_PG_WORKERS:-$(((workers + 2) / 3))}"
log "pytest: SQLite pass with $workers workers, PostgreSQL pass beside it with $pg_workers, on $(nproc) CPUs"

ruff check .
# A machine may set PYTHONDONTWRITEBYTECODE (this project's CI machine does): then every worker and
# every process a test starts compiles the whole project again, and pytest rewrites the tests'
# asserts in each worker (about 20 s of CPU per worker; docs/benchmarks.md, tests). Compiled once
# here, in parallel, and cached in the checkout's __pycache__ directories (ignored by git).
unset PYTHONDONTWRITEBYTECODE
python -m compileall -q -j 0 -x '/(\.venv|node_modules|var)/' .
private_dir
mypy >"$PRIVATE_DIR/mypy.log" 2>&1 &
mypy_pid=$!
# Everything that touches the database the way production does runs again on PostgreSQL.
DATABASE_URL="$GPUSCHED_TEST_POSTGRES_URL" \
    pytest -q -n "$pg_workers" --maxschedchunk 1 --durations 15 -m postgres "$@" >"$PRIVATE_DIR/postgres.log" 2>&1 &
postgres_pid=$!

status=0
pytest -q -n "$workers" --maxschedchunk 1 --durations 25 "$@" || status=$?

mypy_status=0
wait "$mypy_pid" || mypy_status=$?
log "mypy (ran beside the SQLite pass):"
cat "$PRIVATE_DIR/mypy.log"
postgres_status=0
wait "$postgres_pid" || postgres_status=$?
log "again on PostgreSQL, the tests marked 'postgres' (ran beside the SQLite pass):"
cat "$PRIVATE_DIR/postgres.log"
for code in "$status" "$mypy_status" "$postgres_status"; do
    if ((code != 0)); then
        exit "$code"
    fi
done
