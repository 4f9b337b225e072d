"""Which running pods a PodDisruptionBudget protects right now (policy/v1): those its selector
matches, in its namespace, while its `status.disruptionsAllowed` is 0. Preemption and reclaim do
not pick them as victims; the Eviction API would refuse them anyway (429), this only saves the
round trip and lets the scheduler choose other victims at once. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def protected_uids(
    budgets: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> frozenset[str]:
    closed = [
        b for b in budgets if int(((b.get("status") or {}).get("disruptionsAllowed")) or 0) < 1
    ]
    if not closed:
        return frozenset()
    out: set[str] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        for budget in closed:
            bmeta = budget.get("metadata") or {}
            if bmeta.get("namespace") != meta.get("namespace"):
                continue
            if selector_matches((budget.get("spec") or {}).get("selector"), labels):
                out.add(str(meta.get("uid") or ""))
                break
    return frozenset(out)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists,
    DoesNotExist), all of which must hold. A PDB with a null selector selects no pod, an empty
    one every pod of its namespace (policy/v1 semantics)."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = set(expression.get("values") or [])
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True
