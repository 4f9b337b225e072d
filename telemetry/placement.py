"""Which node a dcgm-exporter series is placed on. Pure: no Django, no I/O.

By the first rule that names one (the rule is counted: MapStats.attributed, the cycle report's
`nodes_by_rule`, `gpusched_telemetry_series_placed_total{rule}`):
1. a node label Prometheus' relabelling sets from the scrape target's pod:
   `kubernetes_node` (NVIDIA's GPU monitoring guide relabels `__meta_kubernetes_pod_node_name` to
   it: nvidia.github.io/container-wiki/gpu-operator/monitoring.html), `nodename` (the example in
   dcgm-exporter's chart, deployment/values.yaml), `node`;
2. `Hostname` (releases) / `hostname` (master): the exporter's own host name, which is its pod's
   name unless the DaemonSet sets NODE_NAME (dcgm-exporter internal/pkg/hostname);
3. the host of Prometheus' `instance`;
4. the scrape target's host, given by the caller.
When the cluster's nodes are known, a rule is taken only if it names one of them, so a pod name
never becomes a node: a series no rule places on a known node is left out and counted
(NODE_UNKNOWN). A source places at most `max_nodes` nodes (NODE_CAP past them): a valid scrape
naming 125,016 invented nodes leaves most of them out, it does not make 125,016 nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

NODE_LABELS = ("kubernetes_node", "nodename", "node")
# Why a series is placed on no node.
NO_NODE = "no node label"
NODE_UNKNOWN = "node not in the cluster"
NODE_CAP = "over the node cap"
# The rules that name a node.
BY_NODE_LABEL = "node label"
BY_HOSTNAME = "Hostname"
BY_INSTANCE = "instance"
BY_TARGET = "scrape target"


class Placement(NamedTuple):
    node: str  # "" when the series is placed on no node
    rule: str  # the rule that placed it, or why it is placed on none
    named: str = ""  # with NODE_UNKNOWN: the first name the labels gave


@dataclass
class Attribution:
    """Where a source's series may be placed: the cluster's nodes (None: not checked) and at most
    `max_nodes` of them per source (None: no cap), `seen` shared by the source's targets."""

    known: frozenset[str] | None = None
    max_nodes: int | None = None
    seen: set[str] = field(default_factory=set)
    # Hostname -> where a label set with it and no node label was placed: every GPU of an exporter
    # repeats its Hostname, so the rules run once per exporter, not once per GPU.
    by_host: dict[str, Placement] = field(default_factory=dict)

    def place(self, labels: Mapping[str, str], target: str) -> Placement:
        get = labels.get
        known = self.known
        host = get("Hostname") or get("hostname") or ""
        plain = labels.keys().isdisjoint(NODE_LABELS)
        if plain and (placed := self.by_host.get(host)) is not None:
            return placed
        if plain and host and (known is None or host in known):
            rule, name = BY_HOSTNAME, host  # the usual case: the exporter names its node
        else:
            candidates = (
                (BY_NODE_LABEL, next((v for label in NODE_LABELS if (v := get(label))), "")),
                (BY_HOSTNAME, host),
                (BY_INSTANCE, instance_host(get("instance", ""))),
                (BY_TARGET, target),
            )
            chosen = next(
                (pair for pair in candidates if pair[1] and (known is None or pair[1] in known)),
                None,
            )
            if chosen is None:
                names = [name for _, name in candidates if name]
                return Placement("", NODE_UNKNOWN, names[0]) if names else Placement("", NO_NODE)
            rule, name = chosen
        seen = self.seen
        if name not in seen:
            if self.max_nodes is not None and len(seen) >= self.max_nodes:
                return Placement("", NODE_CAP)
            seen.add(name)
        placed = Placement(name, rule)
        if plain and rule == BY_HOSTNAME:
            self.by_host[host] = placed
        return placed


def instance_host(instance: str) -> str:
    """`10.0.1.5:9400` -> `10.0.1.5`, `[::1]:9400` -> `::1`, `node-1` -> `node-1`."""
    if not instance:
        return ""
    if instance.startswith("["):
        return instance[1:].partition("]")[0]
    host, sep, port = instance.rpartition(":")
    return host if sep and port.isdigit() else instance
