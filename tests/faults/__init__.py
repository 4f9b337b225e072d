"""Fault tests: real processes and real servers (PostgreSQL, Redis, Prometheus, the web server)
broken on purpose, asserting what production must still guarantee. Where each fault is tested:

- Scheduler killed (SIGKILL) mid-run and restarted: no lost, doubled or over-committed placement -
  tests/scheduling/test_runscheduler_processes.py::test_sigkill_mid_run_then_restart_loses_and_
  doubles_nothing (SQLite, and PostgreSQL in the `postgres` pass); two racing schedulers in the
  same file.
- PostgreSQL restarted under load (private cluster): test_postgres_restart.py; the worker loop's
  reconnect on a terminated session: test_worker_loop.py (`postgres` pass).
- Redis down and back under two web processes (private redis-server): test_redis_down.py.
- Prometheus down under the telemetry ingester, scheduling on stale telemetry, staleness shown in
  the API and dashboard: test_prometheus_down.py (ingester steps with Prometheus down, slow or
  refusing connections: tests/telemetry/test_ingesttelemetry.py).
- Slow and stuck API clients vs the scheduler loop and other clients: test_slow_clients.py.

servers.py starts the private servers and the worker processes; dbtool.py checks the placement
invariants, in-process or against a database the test process is not connected to.
"""
