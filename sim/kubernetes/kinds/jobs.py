"""batch/v1 Jobs: the API server's defaults, generated selector, validation and deletion default
(kubernetes/kubernetes pkg/apis/batch/v1/defaults.go, pkg/registry/batch/job/strategy.go,
pkg/apis/batch/validation/validation.go).

- Defaults: completions and parallelism 1 when neither is set, parallelism 1, backoffLimit 6
  (2147483647 with backoffLimitPerIndex), completionMode NonIndexed, suspend false,
  manualSelector false, podReplacementPolicy TerminatingOrFailed (Failed with a
  podFailurePolicy), the Job's labels from its template when it has none, and the pod defaults
  on the template.
- Generated selector (unless manualSelector): the template gets `job-name`,
  `batch.kubernetes.io/job-name`, `controller-uid` and `batch.kubernetes.io/controller-uid`; the
  selector matches `batch.kubernetes.io/controller-uid`.
- Validation: non-negative counts, completions required for Indexed (parallelism at most
  100,000), restartPolicy OnFailure or Never, the selector matching the template, the pod
  template's own checks. On update: selector, completionMode, podFailurePolicy,
  backoffLimitPerIndex, managedBy and successPolicy immutable; completions too, except an
  Indexed Job changing it in tandem with parallelism; the pod template immutable, except, while
  the Job is suspended and has never started (no status.startTime), its node affinity, node
  selector, tolerations, labels, annotations and scheduling gates (what Kueue writes before it
  unsuspends a Job). status.startTime may change only while the Job is suspended (Kueue and
  JobSet clear it when they suspend a Job so that its template becomes mutable again); the
  succeeded and failed counters never decrease and a terminal condition stays.
- Deleting a batch/v1 Job without a propagationPolicy orphans its pods (the strategy's
  DefaultGarbageCollectionPolicy), with the API server's warning (sim/kubernetes/http.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.kubernetes import errors, selectors
from sim.kubernetes.errors import FieldError
from sim.kubernetes.kinds.base import Rules
from sim.kubernetes.kinds.pods import default_spec, validate_spec
from sim.kubernetes.meta import clone

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
JOB_NAME, CONTROLLER_UID = "batch.kubernetes.io/job-name", "batch.kubernetes.io/controller-uid"
LEGACY_JOB_NAME, LEGACY_CONTROLLER_UID = "job-name", "controller-uid"
MAX_INDEXED_PARALLELISM = 100_000
MAX_INT32 = 2_147_483_647
COUNTS = ("parallelism", "completions", "activeDeadlineSeconds", "backoffLimit",
          "ttlSecondsAfterFinished", "backoffLimitPerIndex", "maxFailedIndexes")  # fmt: skip
IMMUTABLE = ("selector", "completionMode", "podFailurePolicy", "backoffLimitPerIndex",
             "managedBy", "successPolicy")  # fmt: skip
TERMINAL = ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet")


def suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def condition_true(job: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


class JobRules(Rules):
    default_propagation = "Orphan"

    def prepare_create(self, api: Registry, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            raise errors.bad_request("spec must be an object")
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        if spec.get("backoffLimit") is None:
            spec["backoffLimit"] = MAX_INT32 if spec.get("backoffLimitPerIndex") else 6
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("manualSelector", False)
        policy = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
        spec.setdefault("podReplacementPolicy", policy)
        template = spec.setdefault("template", {})
        if not isinstance(template, dict):
            raise errors.bad_request("spec.template must be an object")
        template_meta = template.setdefault("metadata", {})
        pod_spec = template.setdefault("spec", {})
        if isinstance(pod_spec, dict):
            default_spec(pod_spec)
        meta = obj["metadata"]
        if template_meta.get("labels") and not meta.get("labels"):
            meta["labels"] = dict(template_meta["labels"])
        if not spec["manualSelector"]:
            _generate_selector(meta, spec, template_meta)

    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        if subresource == "status":
            return _validate_status_update(obj, old or {})
        problems = _validate_spec(obj)
        if old is not None:
            problems += _validate_update(obj["spec"], old, obj)
        return problems


def _generate_selector(meta: Obj, spec: Obj, template_meta: Obj) -> None:
    labels = template_meta.setdefault("labels", {})
    for key in (LEGACY_JOB_NAME, JOB_NAME):
        labels.setdefault(key, meta.get("name", ""))
    for key in (LEGACY_CONTROLLER_UID, CONTROLLER_UID):
        labels.setdefault(key, meta.get("uid", ""))
    selector = spec.get("selector") or {}
    spec["selector"] = selector
    selector.setdefault("matchLabels", {}).setdefault(CONTROLLER_UID, meta.get("uid", ""))


def _validate_spec(job: Obj) -> list[FieldError]:
    spec = job.get("spec") or {}
    problems: list[FieldError] = []
    for key in COUNTS:
        value = spec.get(key)
        if value is not None and (not isinstance(value, int) or value < 0):
            problems.append(
                errors.invalid(f"spec.{key}", value, "must be greater than or equal to 0")
            )
    mode = spec.get("completionMode")
    if mode not in (None, "NonIndexed", "Indexed"):
        problems.append(
            errors.not_supported("spec.completionMode", mode, ("NonIndexed", "Indexed"))
        )
    if mode == "Indexed":
        if spec.get("completions") is None:
            problems.append(errors.required("spec.completions", "when completion mode is Indexed"))
        if int(spec.get("parallelism") or 0) > MAX_INDEXED_PARALLELISM:
            problems.append(
                errors.invalid(
                    "spec.parallelism",
                    spec["parallelism"],
                    "must be less than or equal to 100000 when completion mode is Indexed",
                )
            )
    elif spec.get("backoffLimitPerIndex") is not None:
        problems.append(
            errors.invalid(
                "spec.backoffLimitPerIndex",
                spec["backoffLimitPerIndex"],
                "requires indexed completion mode",
            )
        )
    policy = spec.get("podReplacementPolicy")
    if policy is not None and policy not in ("Failed", "TerminatingOrFailed"):
        problems.append(
            errors.not_supported(
                "spec.podReplacementPolicy", policy, ("Failed", "TerminatingOrFailed")
            )
        )
    template = spec.get("template") or {}
    pod_spec = template.get("spec")
    problems += validate_spec(pod_spec, "spec.template.spec")
    restart = (pod_spec or {}).get("restartPolicy") if isinstance(pod_spec, dict) else None
    if restart in (None, "", "Always"):
        problems.append(
            errors.required(
                "spec.template.spec.restartPolicy", 'valid values: "OnFailure", "Never"'
            )
        )
    elif restart not in ("OnFailure", "Never"):
        problems.append(
            errors.not_supported(
                "spec.template.spec.restartPolicy", restart, ("OnFailure", "Never")
            )
        )
    problems += _validate_selector(job, spec, template)
    return problems


def _validate_selector(job: Obj, spec: Obj, template: Obj) -> list[FieldError]:
    selector = spec.get("selector")
    if selector is None:
        return [errors.required("spec.selector")]
    try:
        parsed = selectors.from_object(selector)
    except ValueError as exc:
        return [errors.invalid("spec.selector", selector, str(exc))]
    labels = (template.get("metadata") or {}).get("labels") or {}
    if not parsed.matches(labels):
        return [
            errors.invalid(
                "spec.template.metadata.labels",
                labels,
                "`selector` does not match template `labels`",
            )
        ]
    return []


def _validate_update(spec: Obj, old: Obj, new: Obj) -> list[FieldError]:
    old_spec = old.get("spec") or {}
    problems = [
        errors.invalid(f"spec.{key}", spec.get(key), "field is immutable")
        for key in IMMUTABLE
        if spec.get(key) != old_spec.get(key)
    ]
    completions = spec.get("completions")
    if completions != old_spec.get("completions"):
        if spec.get("completionMode") != "Indexed":
            problems.append(errors.invalid("spec.completions", completions, "field is immutable"))
        elif completions != spec.get("parallelism"):
            why = "can only be modified in tandem with spec.parallelism"
            problems.append(errors.invalid("spec.completions", completions, why))
    template, old_template = (
        clone(spec.get("template") or {}),
        clone(old_spec.get("template") or {}),
    )
    started = bool((old.get("status") or {}).get("startTime"))
    if suspended(old) and not started:
        for part in (template, old_template):  # the scheduling directives may change
            meta, pod_spec = part.setdefault("metadata", {}), part.setdefault("spec", {})
            for key in ("labels", "annotations"):
                meta.pop(key, None)
            for key in ("nodeSelector", "tolerations", "schedulingGates"):
                pod_spec.pop(key, None)
            affinity = pod_spec.get("affinity")
            if isinstance(affinity, dict):
                affinity.pop("nodeAffinity", None)
                if not affinity:
                    pod_spec.pop("affinity")
    if template != old_template:
        problems.append(errors.invalid("spec.template", spec.get("template"), "field is immutable"))
    return problems


def _validate_status_update(job: Obj, old: Obj) -> list[FieldError]:
    status, old_status = job.get("status") or {}, old.get("status") or {}
    problems: list[FieldError] = []
    for kind in ("Failed", "Complete", "FailureTarget"):
        if condition_true(old, kind) and not condition_true(job, kind):
            body = f"Invalid value: cannot disable the terminal {kind}=True condition"
            problems.append(FieldError("FieldValueInvalid", "status.conditions", body))
    for key in ("failed", "succeeded"):
        if int(status.get(key) or 0) < int(old_status.get(key) or 0):
            problems.append(
                errors.invalid(
                    f"status.{key}", status.get(key, 0), f"cannot decrease the {key} counter"
                )
            )
    start, old_start = status.get("startTime"), old_status.get("startTime")
    if old_start and start != old_start and not suspended(job):
        problems.append(
            errors.required("status.startTime", "startTime cannot be removed for unsuspended job")
        )
    return problems
