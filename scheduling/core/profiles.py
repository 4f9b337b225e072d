"""Scheduler profiles, written like KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1):

    profiles:
    - schedulerName: gpu-topology-scheduler
      plugins:
        score: {enabled: [{name: GPUTopologyAware, weight: 5}], disabled: [{name: "*"}]}
      pluginConfig:
      - {name: GPUTopologyAware, args: {preferSameNUMA: true}}

Default plugins (registry.DEFAULT_HEAD / DEFAULT_TAIL) stay enabled unless disabled by name or "*";
a default plugin listed under `enabled` keeps its place and takes the given weight. Anything unknown
is an error that names the key, so a typo never silently changes scheduling: a repeated key, an
`apiVersion` other than kubescheduler.config.k8s.io/v1 or a `kind` other than
KubeSchedulerConfiguration (both may be left out) too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduling.core import yaml_documents
from scheduling.core.framework import EXTENSION_POINTS
from scheduling.core.plugin_args import ProfileError
from scheduling.core.registry import DEFAULT_HEAD, DEFAULT_TAIL, REGISTRY, PluginFactory

MULTI_POINT = "multiPoint"
API_VERSION = "kubescheduler.config.k8s.io/v1"
KIND = "KubeSchedulerConfiguration"
# Fields of KubeSchedulerConfiguration that concern kube-scheduler's process, not plugin choice.
_IGNORED_TOP_LEVEL = {
    "apiVersion",
    "kind",
    "leaderElection",
    "clientConnection",
    "parallelism",
    "podInitialBackoffSeconds",
    "podMaxBackoffSeconds",
    "extenders",
    "featureGates",
    "delayCacheUntilActive",
}
_PROFILE_KEYS = {"schedulerName", "plugins", "pluginConfig", "percentageOfNodesToScore"}


@dataclass(frozen=True, slots=True)
class PluginSpec:
    name: str
    weight: int = 1


@dataclass(frozen=True)
class Profile:
    scheduler_name: str
    plugins: Mapping[str, tuple[PluginSpec, ...]]
    plugin_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    percentage_of_nodes_to_score: int = (
        100  # 100: score every feasible node; 0: kube-scheduler's adaptive share
    )

    def enabled(self, point: str) -> tuple[PluginSpec, ...]:
        return self.plugins.get(point, ())


def load_profiles(text: str, *, registry: Mapping[str, PluginFactory] = REGISTRY) -> list[Profile]:
    """The profiles of a KubeSchedulerConfiguration document (duplicate keys refused)."""
    try:
        doc = yaml_documents.load_one(text)
    except yaml_documents.YamlError as exc:
        raise ProfileError(str(exc)) from exc
    return parse_profiles(doc, registry=registry)


def parse_profiles(
    doc: object, *, registry: Mapping[str, PluginFactory] = REGISTRY
) -> list[Profile]:
    top = _mapping(doc, "the configuration")
    for key, expected in (("apiVersion", API_VERSION), ("kind", KIND)):
        if key in top and top[key] != expected:
            raise ProfileError(f"{key} must be {expected!r}, got {top[key]!r}")
    unknown = set(top) - _IGNORED_TOP_LEVEL - {"profiles", "percentageOfNodesToScore"}
    if unknown:
        raise ProfileError(f"unknown key {sorted(unknown)[0]!r} at the top level")
    default_percentage = _percentage(
        top.get("percentageOfNodesToScore", 100), "percentageOfNodesToScore"
    )
    raw_profiles = top.get("profiles")
    if not isinstance(raw_profiles, list) or not raw_profiles:
        raise ProfileError("profiles must be a non-empty list")
    profiles = [
        _parse_profile(raw, f"profiles[{k}]", default_percentage, registry)
        for k, raw in enumerate(raw_profiles)
    ]
    names = [p.scheduler_name for p in profiles]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ProfileError(f"schedulerName {duplicates[0]!r} is used by more than one profile")
    return profiles


def _parse_profile(
    raw: object, path: str, default_percentage: int, registry: Mapping[str, PluginFactory]
) -> Profile:
    doc = _mapping(raw, path)
    unknown = set(doc) - _PROFILE_KEYS
    if unknown:
        raise ProfileError(f"{path}: unknown key {sorted(unknown)[0]!r}")
    name = doc.get("schedulerName", "default-scheduler")
    if not isinstance(name, str) or not name:
        raise ProfileError(f"{path}.schedulerName must be a non-empty string")
    plugins_doc = _mapping(doc.get("plugins", {}), f"{path}.plugins")
    unknown_points = set(plugins_doc) - set(EXTENSION_POINTS) - {MULTI_POINT}
    if unknown_points:
        raise ProfileError(f"{path}.plugins: unknown extension point {sorted(unknown_points)[0]!r}")

    multi_enabled, multi_disabled = _plugin_set(
        plugins_doc.get(MULTI_POINT), f"{path}.plugins.multiPoint", registry
    )
    plugins: dict[str, tuple[PluginSpec, ...]] = {}
    for point in EXTENSION_POINTS:
        enabled, disabled = _plugin_set(plugins_doc.get(point), f"{path}.plugins.{point}", registry)
        enabled = [s for s in multi_enabled if _implements(s.name, point, registry)] + enabled
        disabled |= multi_disabled
        plugins[point] = _merge(point, enabled, disabled)

    args = _plugin_args(doc.get("pluginConfig", []), f"{path}.pluginConfig", registry)
    percentage = _percentage(
        doc.get("percentageOfNodesToScore", default_percentage), f"{path}.percentageOfNodesToScore"
    )
    return Profile(
        scheduler_name=name,
        plugins=plugins,
        plugin_args=args,
        percentage_of_nodes_to_score=percentage,
    )


def _plugin_set(
    raw: object, path: str, registry: Mapping[str, PluginFactory]
) -> tuple[list[PluginSpec], set[str]]:
    if raw is None:
        return [], set()
    doc = _mapping(raw, path)
    unknown = set(doc) - {"enabled", "disabled"}
    if unknown:
        raise ProfileError(f"{path}: unknown key {sorted(unknown)[0]!r}")
    enabled = []
    for k, item in enumerate(_list(doc.get("enabled", []), f"{path}.enabled")):
        entry = _mapping(item, f"{path}.enabled[{k}]")
        extra = set(entry) - {"name", "weight"}
        if extra:
            raise ProfileError(f"{path}.enabled[{k}]: unknown key {sorted(extra)[0]!r}")
        name = _plugin_name(entry.get("name"), f"{path}.enabled[{k}].name", registry)
        weight = entry.get("weight", 1)
        if not isinstance(weight, int) or isinstance(weight, bool) or weight < 1:
            raise ProfileError(
                f"{path}.enabled[{k}].weight must be a positive integer, got {weight!r}"
            )
        enabled.append(PluginSpec(name, weight))
    disabled = set()
    for k, item in enumerate(_list(doc.get("disabled", []), f"{path}.disabled")):
        entry = _mapping(item, f"{path}.disabled[{k}]")
        raw_name = entry.get("name")
        if raw_name != "*":
            raw_name = _plugin_name(raw_name, f"{path}.disabled[{k}].name", registry)
        disabled.add(str(raw_name))
    return enabled, disabled


def _merge(point: str, enabled: list[PluginSpec], disabled: set[str]) -> tuple[PluginSpec, ...]:
    custom = {spec.name: spec for spec in enabled}
    merged: list[PluginSpec] = []
    for name, weight in DEFAULT_HEAD.get(point, ()):
        if "*" in disabled or name in disabled:
            continue
        merged.append(custom.pop(name, PluginSpec(name, weight or 1)))
    merged += [spec for spec in enabled if spec.name in custom]
    for name, weight in DEFAULT_TAIL.get(point, ()):
        if name not in disabled and "*" not in disabled and name not in {s.name for s in merged}:
            merged.append(PluginSpec(name, weight or 1))
    return tuple(merged)


def _implements(name: str, point: str, registry: Mapping[str, PluginFactory]) -> bool:
    return isinstance(registry[name](None), EXTENSION_POINTS[point])


def _plugin_args(
    raw: object, path: str, registry: Mapping[str, PluginFactory]
) -> dict[str, Mapping[str, Any]]:
    args: dict[str, Mapping[str, Any]] = {}
    for k, item in enumerate(_list(raw, path)):
        entry = _mapping(item, f"{path}[{k}]")
        extra = set(entry) - {"name", "args"}
        if extra:
            raise ProfileError(f"{path}[{k}]: unknown key {sorted(extra)[0]!r}")
        name = _plugin_name(entry.get("name"), f"{path}[{k}].name", registry)
        if name in args:
            raise ProfileError(f"{path}[{k}]: {name} is configured twice")
        args[name] = _mapping(entry.get("args", {}) or {}, f"{path}[{k}].args")
        try:
            registry[name](args[name])  # validates every argument now, not at the first pod
        except ProfileError as exc:
            raise ProfileError(f"{path}[{k}].args: {exc}") from exc
    return args


def _plugin_name(value: object, path: str, registry: Mapping[str, PluginFactory]) -> str:
    if not isinstance(value, str) or value not in registry:
        known = ", ".join(sorted(registry))
        raise ProfileError(f"{path}: unknown plugin {value!r} (known: {known})")
    return value


def _percentage(value: object, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= 100:
        raise ProfileError(f"{path} must be an integer from 0 to 100, got {value!r}")
    return value


_SHAPES = yaml_documents.Shapes(ProfileError)
_mapping = _SHAPES.mapping
_list = _SHAPES.list_of
