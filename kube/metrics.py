"""The extender process's Prometheus metrics (`runextender --metrics-port N` serves `registry`):
every call kube-scheduler makes, by verb and outcome, and how long it waited for the answer.

Outcomes: `ok` (answered; a filter answer may still fail nodes: that is the answer), `error` (the
request could not be used: the reason went back in `Error` or a 400) and `unavailable` (a 503, the
database away). `gpusched_extender_requests_total{verb="bind",outcome="ok"}` counts the pods bound
on the default scheduler's side.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from common.process_metrics import role_registry

registry = role_registry()

VERBS = ("filter", "prioritize", "bind")
OUTCOMES = ("ok", "error", "unavailable")

requests = Counter(
    "gpusched_extender_requests",
    "Extender calls from kube-scheduler, by verb and outcome (ok, error, unavailable).",
    ["verb", "outcome"],
    registry=registry,
)
refused = Counter(
    "gpusched_extender_refused",
    "Calls refused for want of a client certificate or bearer token (kube/extender_auth.py).",
    registry=registry,
)
events_dropped = Counter(
    "gpusched_kube_events_dropped",
    "Kubernetes Events of the extender's binds not posted for being over the rate limit "
    "(GPUSCHED_KUBE_EVENTS_PER_S, GPUSCHED_KUBE_EVENT_BURST); Bindings are never limited.",
    registry=registry,
)
request_seconds = Histogram(
    "gpusched_extender_request_duration_seconds",
    "Time from a call's body read to its answer, by verb.",
    ["verb"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
    registry=registry,
)
for _verb in VERBS:
    request_seconds.labels(verb=_verb)
    for _outcome in OUTCOMES:
        requests.labels(verb=_verb, outcome=_outcome)


def outcome_of(status: int, body: object) -> str:
    if status == 503:
        return "unavailable"
    if status >= 400 or (isinstance(body, dict) and body.get("Error")):
        return "error"
    return "ok"


def record_request(verb: str, status: int, body: object, seconds: float) -> None:
    request_seconds.labels(verb=verb).observe(seconds)
    requests.labels(verb=verb, outcome=outcome_of(status, body)).inc()
