"""Kueue's Workload CRD rules, evaluated on the workloads the REST API returns.

The rules are the CRD's own CEL text (tests/data/kueue/workload_v1beta2_rules.yaml, copied from
kubernetes-sigs/kueue config/components/crd/bases/kueue.x-k8s.io_workloads.yaml at commit
ff69552e79ad21652c36caa97038382e55625cf7), run by cel-python as kube-apiserver runs them: each at
its schema path, skipped where that path is absent, and the transition rules (those naming oldSelf)
only on an update, with the previous object. The conditions are also held to metav1.Condition's
schema in that CRD (required fields, patterns, one condition per type)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

import celpy
import yaml

RULES_FILE = (
    Path(__file__).resolve().parent.parent / "data" / "kueue" / "workload_v1beta2_rules.yaml"
)


def kueue_object(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The API's workload document as the Kueue Workload it stands for (null fields left out, as
    Kueue's omitempty fields are)."""
    spec = {
        "queueName": doc["queueName"],
        "priority": doc["priority"],
        "priorityClassRef": doc["priorityClassRef"],
        "active": doc["active"],
        "podSets": doc["podSets"],
        "maximumExecutionTimeSeconds": doc["maximumExecutionTimeSeconds"],
    }
    status = {
        "conditions": doc["status"]["conditions"],
        "admission": doc["status"]["admission"],
    }
    return _without_nulls(
        {
            "metadata": {"name": doc["name"], "namespace": doc["namespace"]},
            "spec": spec,
            "status": status,
        }
    )


def violations(doc: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> list[str]:
    """Every CRD rule the workload breaks (as an update from `old` when given): their messages."""
    new_obj, old_obj = kueue_object(doc), (kueue_object(old) if old is not None else None)
    out = [_at(path, message) for path, message in _rule_violations(new_obj, old_obj)]
    out += _condition_violations(new_obj["status"].get("conditions", []))
    return out


def _at(path: str, message: str) -> str:
    return f"{path or '<object>'}: {message}"


@cache
def _rules() -> tuple[list[tuple[str, str, Any]], dict[str, Any]]:
    data = yaml.safe_load(RULES_FILE.read_text())
    env = celpy.Environment()
    compiled = [
        (r["path"], r["message"], (r["rule"], env.program(env.compile(r["rule"]))))
        for r in data["rules"]
    ]
    return compiled, data["conditions"]


def _rule_violations(
    new_obj: dict[str, Any], old_obj: dict[str, Any] | None
) -> Iterator[tuple[str, str]]:
    rules, _ = _rules()
    for path, message, (text, program) in rules:
        transition = "oldSelf" in text
        if transition and old_obj is None:
            continue
        for where, node in _nodes(new_obj, path):
            activation: dict[str, Any] = {"self": celpy.json_to_cel(node)}
            if transition:
                old_nodes = dict(_nodes(old_obj or {}, path))
                if where not in old_nodes:
                    continue
                activation["oldSelf"] = celpy.json_to_cel(old_nodes[where])
            result = program.evaluate(activation)  # an evaluation error counts as broken too
            if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
                yield where, message


def _nodes(obj: Any, path: str) -> Iterator[tuple[str, Any]]:
    """The values at a schema path ("a.b[].c"), with where each is; none where a step is absent."""
    found: list[tuple[str, Any]] = [("", obj)]
    for step in path.split(".") if path else []:
        name, each = step.removesuffix("[]"), step.endswith("[]")
        nxt: list[tuple[str, Any]] = []
        for where, node in found:
            if not isinstance(node, dict) or name not in node:
                continue
            here = f"{where}.{name}" if where else name
            if each:
                nxt += [(f"{here}[{i}]", item) for i, item in enumerate(node[name])]
            else:
                nxt.append((here, node[name]))
        found = nxt
    return iter(found)


def _condition_violations(conditions: list[dict[str, Any]]) -> list[str]:
    _, schema = _rules()
    out = []
    for key in schema["listMapKeys"]:
        values = [c.get(key) for c in conditions]
        if len(values) != len(set(values)):
            out.append(f"status.conditions: {key} repeats: {values}")
    for c in conditions:
        where = f"status.conditions[{c.get('type')}]"
        out += [f"{where}: {field} is required" for field in schema["required"] if field not in c]
        for field, rules in schema["properties"].items():
            if field in c:
                out += [f"{where}.{field}: {p}" for p in _schema_problems(c[field], rules)]
    return out


def _schema_problems(value: Any, rules: Mapping[str, Any]) -> list[str]:
    if rules["type"] == "integer":
        ok = isinstance(value, int) and value >= rules.get("minimum", value)
        return [] if ok else [f"{value!r} is not an integer >= {rules.get('minimum')}"]
    if not isinstance(value, str):
        return [f"{value!r} is not a string"]
    problems = []
    if "enum" in rules and value not in rules["enum"]:
        problems.append(f"{value!r} not one of {rules['enum']}")
    if "pattern" in rules and not re.search(rules["pattern"], value):
        problems.append(f"{value!r} does not match {rules['pattern']}")
    if len(value) < rules.get("minLength", 0) or len(value) > rules.get("maxLength", len(value)):
        problems.append(f"{value!r} has a length outside the schema's bounds")
    if rules.get("format") == "date-time":
        try:
            datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            problems.append(f"{value!r} is not an RFC 3339 date-time")
    return problems


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value
