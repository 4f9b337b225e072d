"""Leader election on a `coordination.k8s.io/v1` Lease (the Python client ships only a ConfigMap
lock), with client-go's rules:

- read the Lease; on 404 create it holding it (a 409 on create: someone else was first);
- we hold it: renew by `replace` with the resourceVersion we read (a 409: it changed under us, so
  we lost it);
- someone else holds it: take it over only once its record has stayed unchanged for
  `leaseDurationSeconds` *as measured by our own clock* since we first saw that record (no trust in
  the other replica's clock), or at once when its holder is empty (released);
- a leader that could not renew for `renew_deadline`, or saw another holder, stops leading and
  says so (`lost`): the caller must stop binding. Every bind checks `leading()` just before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.client import CoordinationV1Api, V1Lease, V1LeaseSpec, V1ObjectMeta
from kubernetes.client.exceptions import ApiException

from kube.times import micro_time, parse_time
from scheduling.worker.side import Leadership

logger = logging.getLogger(__name__)


_HELD, _TAKEN, _RETRY = "held", "taken", "retry"


class LeaseLost(RuntimeError):
    """This replica led and no longer does: it must stop scheduling."""


@dataclass
class LeaseElector:
    api: CoordinationV1Api
    name: str
    namespace: str
    identity: str
    lease_duration_s: int = 15
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    monotonic: Callable[[], float] = time.monotonic
    request_timeout_s: float = 5.0

    holding: bool = False
    lost: bool = False
    transitions: int = 0
    _renewed_at: float | None = None  # monotonic time of our last successful write
    _observed: tuple[str, str, str] | None = None  # (holder, renewTime, resourceVersion)
    _observed_at: float = 0.0

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True while we lead. Sets `lost` when a leader stops leading."""
        was_holding = self.holding
        try:
            outcome = self._attempt()
        except ApiException as exc:
            logger.warning("lease %s/%s: %s %s", self.namespace, self.name, exc.status, exc.reason)
            outcome = _RETRY
        except Exception as exc:  # the API server unreachable: keep leading until the deadline
            logger.warning("lease %s/%s: %s", self.namespace, self.name, exc)
            outcome = _RETRY
        if outcome == _HELD:
            self.holding = True
            self._renewed_at = self.monotonic()
        elif was_holding and (outcome == _TAKEN or not self.leading()):
            self._lose()
        return self.holding

    def leading(self) -> bool:
        """We hold the lease and renewed it within the renew deadline."""
        return (
            self.holding
            and not self.lost
            and self._renewed_at is not None
            and self.monotonic() - self._renewed_at < self.renew_deadline_s
        )

    def release(self) -> None:
        """Give the lease up (on shutdown) so a standby takes over at once."""
        if not self.holding:
            return
        try:
            lease = self.api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.request_timeout_s
            )
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                body = self._body(
                    holder="",
                    resource_version=lease.metadata.resource_version if lease.metadata else None,
                    acquire=lease.spec.acquire_time,
                    transitions=lease.spec.lease_transitions or 0,
                    duration=1,
                )
                self.api.replace_namespaced_lease(
                    self.name, self.namespace, body, _request_timeout=self.request_timeout_s
                )
        except ApiException as exc:
            logger.info("lease %s/%s release: %s", self.namespace, self.name, exc.status)
        self.holding = False

    def _attempt(self) -> str:
        now = self.clock()
        try:
            lease = self.api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.request_timeout_s
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            return self._create(now)
        spec = lease.spec
        holder = (spec.holder_identity if spec else None) or ""
        renew = parse_time(spec.renew_time if spec else None)
        version = (lease.metadata.resource_version if lease.metadata else None) or ""
        record = (holder, renew.isoformat() if renew else "", version)
        if record != self._observed:
            self._observed, self._observed_at = record, self.monotonic()
        transitions = (spec.lease_transitions if spec else None) or 0
        if holder == self.identity:
            if not self.holding:  # e.g. restarted with the same identity: carry on
                logger.info("lease %s/%s: resuming as %s", self.namespace, self.name, holder)
            acquire = spec.acquire_time if spec else None
            return self._replace(version, acquire or now, transitions, now)
        if holder and self.holding:
            logger.warning("lease %s/%s taken by %s", self.namespace, self.name, holder)
            return _TAKEN
        duration = (spec.lease_duration_seconds if spec else None) or self.lease_duration_s
        if holder and self.monotonic() - self._observed_at <= duration:
            return _TAKEN  # someone else leads and may still be renewing
        logger.info(
            "lease %s/%s: taking over from %r as %s",
            self.namespace,
            self.name,
            holder,
            self.identity,
        )
        return self._replace(version, now, transitions + 1, now)

    def _create(self, now: datetime) -> str:
        body = self._body(holder=self.identity, resource_version=None, acquire=now, transitions=0)
        try:
            self.api.create_namespaced_lease(
                self.namespace, body, _request_timeout=self.request_timeout_s
            )
        except ApiException as exc:
            if exc.status == 409:  # another replica created it first
                return _TAKEN
            raise
        logger.info("lease %s/%s created by %s", self.namespace, self.name, self.identity)
        return _HELD

    def _replace(self, version: str, acquire: Any, transitions: int, now: datetime) -> str:
        body = self._body(
            holder=self.identity,
            resource_version=version,
            acquire=acquire,
            transitions=transitions,
            renew=now,
        )
        try:
            lease = self.api.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self.request_timeout_s
            )
        except ApiException as exc:
            if exc.status == 409:  # the record changed since we read it: someone else wrote
                return _TAKEN
            raise
        self.transitions = transitions
        new_version = lease.metadata.resource_version if lease.metadata else None
        renew_time = parse_time(lease.spec.renew_time) if lease.spec else None
        self._observed = (
            self.identity,
            renew_time.isoformat() if renew_time else "",
            new_version or "",
        )
        self._observed_at = self.monotonic()
        return _HELD

    def _body(
        self,
        *,
        holder: str,
        resource_version: str | None,
        acquire: Any,
        transitions: int,
        renew: datetime | None = None,
        duration: int | None = None,
    ) -> V1Lease:
        acquire_time = parse_time(acquire)
        return V1Lease(
            api_version="coordination.k8s.io/v1",
            kind="Lease",
            metadata=V1ObjectMeta(
                name=self.name, namespace=self.namespace, resource_version=resource_version
            ),
            spec=V1LeaseSpec(
                holder_identity=holder,
                lease_duration_seconds=duration or self.lease_duration_s,
                lease_transitions=transitions,
                # MicroTime: always 6 fractional digits and a zone, as the API server demands.
                renew_time=micro_time(renew or self.clock()),
                acquire_time=micro_time(acquire_time) if acquire_time else None,
            ),
        )

    def _lose(self) -> None:
        self.holding = False
        self.lost = True
        logger.error("lease %s/%s lost by %s", self.namespace, self.name, self.identity)


class KubernetesLease:
    """The one cycle's Elector on a Lease: renew every retry period (not every cycle), and a leader
    that lost the lease raises LeaseLost, so the process exits and restarts as a standby, like
    kube-scheduler. Without an elector (a single replica), it always leads."""

    def __init__(self, elector: LeaseElector | None) -> None:
        self.elector = elector
        self._checked_at: float | None = None
        self._was_leading = False

    def lead(self, now: datetime) -> Leadership:
        elector = self.elector
        if elector is None:
            new_term, self._was_leading = not self._was_leading, True
            return Leadership(True, new_term)
        due = (
            self._checked_at is None
            or elector.monotonic() - self._checked_at >= elector.retry_period_s
            or not elector.leading()
        )
        if due:
            self._checked_at = elector.monotonic()
            elector.try_acquire_or_renew()
        if elector.lost:
            self._was_leading = False
            raise LeaseLost(f"{elector.identity} lost lease {elector.namespace}/{elector.name}")
        if not elector.leading():
            self._was_leading = False
            return Leadership(False)
        new_term, self._was_leading = not self._was_leading, True
        return Leadership(True, new_term)

    def still_leading(self) -> bool:
        """Checked just before every Binding."""
        return self.elector is None or self.elector.leading()

    def stand_down(self) -> None:
        if self.elector is not None and not self.elector.lost:
            self.elector.release()
