"""Dynamic Resource Allocation (resource.k8s.io/v1), the pure part: what ResourceSlices and
DeviceClasses offer, what a ResourceClaim asks, and the claim status that makes a placement's GPU
choice the one the kubelet's DRA driver prepares. No I/O.

Shapes (Kubernetes API reference, resource.k8s.io/v1: ResourceSlice, DeviceClass, ResourceClaim;
docs/kubernetes.md "Device choice" cites the pages):

- ResourceSlice `spec`: `driver`, `pool {name, generation, resourceSliceCount}`, `nodeName` (node-
  local devices; `allNodes` / `nodeSelector` / `perDeviceNodeSelection` pools are not node GPUs),
  `devices [{name, attributes {name: {int|bool|string|version}}, capacity {name: {value}}}]`.
  Attribute names without a domain belong to the driver's domain; only the newest generation of a
  pool counts, and a pool with fewer slices than `resourceSliceCount` is still being published.
- Standard attributes (kubernetes.io/docs/reference/node/dra-standard-device-attributes):
  `resource.kubernetes.io/pcieRoot` (`pci<domain>:<bus>`), `.../numaNode` (an int, or a list whose
  first entry is the device's NUMA node), `.../pciBusID`.
- NVIDIA's driver `gpu.nvidia.com` (NVIDIA/k8s-dra-driver-gpu, cmd/gpu-kubelet-plugin/
  deviceinfo.go): devices `gpu-<n>` with `type` (`gpu` / `mig`), `uuid`, `index` and `minor` (older
  releases; newer ones publish `minor` only), `productName`, `brand`, `architecture`,
  `cudaComputeCapability`, `driverVersion`, `pcieBusID`, the standard pcieRoot, capacity `memory`.
- ResourceClaim `spec.devices`: `requests [{name, exactly: {deviceClassName, selectors [{cel:
  {expression}}], allocationMode ExactCount|All, count}}]`, `constraints [{requests,
  matchAttribute}]`. `status.allocation`: `devices.results [{request, driver, pool, device}]` and
  `nodeSelector` (one term matching the node's `metadata.name`), `status.reservedFor [{resource:
  pods, name, uid}]` — what kube-scheduler's DynamicResources plugin writes in PreBind
  (kubernetes/kubernetes pkg/scheduler/framework/plugins/dynamicresources, bindClaim; the node
  selector from staging/src/k8s.io/dynamic-resource-allocation/structured, createNodeSelector).

CEL selectors: the simple forms only (kube.dra_selectors).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kube.dra_selectors import AttributeValue, Selector, SelectorError, parse_selector
from scheduling.core import quantity
from scheduling.core.topology import NodeTopology
from scheduling.core.topology_info import GpuIdentity
from scheduling.core.types import GpuDevice, TopologyPolicy, TopologyScope

API_VERSION = "resource.k8s.io/v1"
NVIDIA_DRIVER = "gpu.nvidia.com"
STANDARD = "resource.kubernetes.io"
PCIE_ROOT = f"{STANDARD}/pcieRoot"
NUMA_NODE = f"{STANDARD}/numaNode"
PCI_BUS_ID = f"{STANDARD}/pciBusID"
# kube-scheduler's DynamicResources adds this finalizer before it writes an allocation, so a claim
# in use is not deleted under the pod (k8s.io/api/resource/v1 Finalizer).
FINALIZER = "resource.kubernetes.io/delete-protection"
# matchAttribute constraints the core can enforce: the scope the GPU set must stay within.
SCOPE_OF_ATTRIBUTE = {PCIE_ROOT: TopologyScope.PCIE, NUMA_NODE: TopologyScope.NUMA}
# Same product on every device: a gpusched node has one GPU model, so it always holds.
SAME_ON_A_NODE = {f"{NVIDIA_DRIVER}/productName", f"{NVIDIA_DRIVER}/architecture"}


class DraError(ValueError):
    """A DRA object gpusched cannot use; the message names the object, the field and why."""


# --- devices -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class DraDevice:
    driver: str
    pool: str
    name: str
    node: str
    attributes: Mapping[str, AttributeValue]  # fully qualified names
    capacity: Mapping[str, Fraction]  # fully qualified names

    @property
    def key(self) -> tuple[str, str, str]:
        """<driver>/<pool>/<device>: a device's identity in the API."""
        return (self.driver, self.pool, self.name)

    def attribute(self, name: str) -> AttributeValue | None:
        """By short (driver's domain) or qualified name."""
        return self.attributes.get(name if "/" in name else f"{self.driver}/{name}")

    @property
    def numa(self) -> int | None:
        value = self.attributes.get(NUMA_NODE)
        if isinstance(value, tuple):
            return value[0] if value else None
        return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class SliceView:
    """Node-local devices by node, and what could not be used."""

    devices: Mapping[str, tuple[DraDevice, ...]]
    warnings: tuple[str, ...] = ()


def devices_by_node(slices: Iterable[Mapping[str, Any]]) -> SliceView:
    """The devices of every complete pool's newest generation, per node."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    warnings: list[str] = []
    for doc in slices:
        name = str((doc.get("metadata") or {}).get("name") or "?")
        spec = doc.get("spec") or {}
        pool = spec.get("pool") or {}
        if not spec.get("driver") or not pool.get("name"):
            warnings.append(f"ResourceSlice {name}: spec.driver and spec.pool.name are required")
            continue
        if not spec.get("nodeName"):
            warnings.append(f"ResourceSlice {name}: devices not local to one node are not used")
            continue
        pools.setdefault((str(spec["driver"]), str(pool["name"])), []).append(doc)
    found: dict[str, list[DraDevice]] = {}
    for (driver, pool), docs in sorted(pools.items()):
        newest = max(int((d["spec"]["pool"]).get("generation") or 0) for d in docs)
        current = [d for d in docs if int(d["spec"]["pool"].get("generation") or 0) == newest]
        expected = int(current[0]["spec"]["pool"].get("resourceSliceCount") or 1)
        if len(current) < expected:
            warnings.append(
                f"pool {driver}/{pool}: {len(current)} of {expected} ResourceSlices published; "
                "not used until complete"
            )
            continue
        for doc in current:
            node = str(doc["spec"]["nodeName"])
            for raw in doc["spec"].get("devices") or []:
                found.setdefault(node, []).append(_device(driver, pool, node, raw))
    return SliceView({n: tuple(d) for n, d in found.items()}, tuple(warnings))


def _device(driver: str, pool: str, node: str, raw: Mapping[str, Any]) -> DraDevice:
    name = str(raw.get("name") or "")
    where = f"device {driver}/{pool}/{name}"
    attributes: dict[str, AttributeValue] = {}
    for key, value in (raw.get("attributes") or {}).items():
        qualified = str(key) if "/" in str(key) else f"{driver}/{key}"
        attributes[qualified] = _attribute(value, f"{where}: attributes.{key}")
    capacity: dict[str, Fraction] = {}
    for key, value in (raw.get("capacity") or {}).items():
        qualified = str(key) if "/" in str(key) else f"{driver}/{key}"
        try:
            capacity[qualified] = quantity.parse((value or {}).get("value"), negative=True)
        except (ValueError, TypeError, AttributeError):
            raise DraError(f"{where}: capacity.{key}.value is not a quantity") from None
    return DraDevice(driver, pool, name, node, attributes, capacity)


def _attribute(value: object, where: str) -> AttributeValue:
    if not isinstance(value, Mapping) or len(value) != 1:
        raise DraError(f"{where} must have exactly one of int, bool, string, version")
    ((kind, raw),) = value.items()
    if kind == "int" and isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if kind == "bool" and isinstance(raw, bool):
        return raw
    if kind in ("string", "version") and isinstance(raw, str):
        return raw
    if kind == "ints" and isinstance(raw, list) and all(isinstance(v, int) for v in raw):
        return tuple(raw)
    raise DraError(f"{where}: {kind} {raw!r} is not a DRA attribute value")


@dataclass(frozen=True)
class DeviceMap:
    """A node's GPU devices by gpusched GPU index."""

    by_index: Mapping[int, DraDevice]
    unmapped: tuple[DraDevice, ...] = ()
    matched_by: str = ""  # "uuid" | "pciBusID" | "index" | "minor" | "name"

    def index_of(self, key: tuple[str, str, str]) -> int | None:
        return next((i for i, d in self.by_index.items() if d.key == key), None)

    def mask_of(self, keys: set[tuple[str, str, str]]) -> int:
        """Bitmask of the GPU indices whose devices are among `keys` (e.g. held by claims)."""
        return sum(1 << i for i, d in self.by_index.items() if d.key in keys)


def map_devices(
    devices: Sequence[DraDevice],
    gpus: Sequence[GpuDevice],
    identities: Sequence[GpuIdentity] = (),
) -> DeviceMap:
    """Which DRA device is which of the node's GPUs: by UUID (the agent's annotation names the
    GPUs), else PCI bus id, else the driver's `index`, else `minor`, else device-name order."""
    gpu_devices = [d for d in devices if d.attribute("type") in (None, "gpu")]
    by_uuid = {str(d.attribute("uuid")): d for d in gpu_devices if d.attribute("uuid")}
    uuids = [gpu.uuid for gpu in gpus]
    if uuids and all(u in by_uuid for u in uuids):
        return _mapped({gpu.index: by_uuid[gpu.uuid] for gpu in gpus}, gpu_devices, "uuid")
    buses = [_bus(i.pci_bus_id) for i in identities]
    by_bus = {_bus(str(_bus_of(d))): d for d in gpu_devices if _bus_of(d)}
    if len(buses) == len(gpus) and buses and all(b in by_bus for b in buses):
        mapping = {gpu.index: by_bus[buses[k]] for k, gpu in enumerate(gpus)}
        return _mapped(mapping, gpu_devices, "pciBusID")
    for attribute in ("index", "minor"):
        numbered = {d.attribute(attribute): d for d in gpu_devices}
        if all(gpu.index in numbered for gpu in gpus) and len(numbered) == len(gpu_devices):
            return _mapped({gpu.index: numbered[gpu.index] for gpu in gpus}, gpu_devices, attribute)
    ordered = sorted(gpu_devices, key=lambda d: _natural(d.name))
    return _mapped({gpu.index: d for gpu, d in zip(gpus, ordered, strict=False)}, ordered, "name")


def _mapped(mapping: dict[int, DraDevice], devices: Sequence[DraDevice], how: str) -> DeviceMap:
    used = {d.key for d in mapping.values()}
    return DeviceMap(mapping, tuple(d for d in devices if d.key not in used), how)


def _bus_of(device: DraDevice) -> AttributeValue | None:
    return device.attributes.get(PCI_BUS_ID) or device.attribute("pcieBusID")


def _bus(text: str) -> str:
    """A PCI address in one spelling: nvidia-smi prints an 8-digit domain (00000000:18:00.0),
    sysfs and the DRA driver 4 digits (0000:18:00.0)."""
    parts = text.strip().lower().split(":")
    if len(parts) == 3:
        try:
            return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
        except ValueError:
            pass
    return text.strip().lower()


def _natural(name: str) -> tuple[object, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def topology_of(device_map: DeviceMap) -> NodeTopology | None:
    """A topology from the standard attributes, when every GPU publishes its NUMA node: one
    PCIe root complex counts as one switch (PXB), one NUMA node as NODE, else SYS. The agent's
    annotation, with NVLink detail, is the better source; this is for nodes without it."""
    order = sorted(device_map.by_index)
    numa = [device_map.by_index[i].numa for i in order]
    if not order or order != list(range(len(order))) or any(n is None for n in numa):
        return None
    roots = [device_map.by_index[i].attributes.get(PCIE_ROOT) or f"own-{i}" for i in order]
    seen: dict[object, int] = {}
    switch = tuple(seen.setdefault(root, len(seen)) for root in roots)
    numa_ids = tuple(int(n) for n in numa if n is not None)

    def link(i: int, j: int) -> str:
        if i == j:
            return "X"
        if switch[i] == switch[j]:
            return "PXB"
        return "NODE" if numa_ids[i] == numa_ids[j] else "SYS"

    n = len(order)
    return NodeTopology(
        numa_ids, switch, tuple(tuple(link(i, j) for j in range(n)) for i in range(n))
    )


# --- device classes and claims -------------------------------------------------------------------


def _selectors(raw: object, where: str) -> tuple[Selector, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise DraError(f"{where}.selectors must be a list")
    out: list[Selector] = []
    for k, item in enumerate(raw):
        cel = (item or {}).get("cel") if isinstance(item, Mapping) else None
        expression = (cel or {}).get("expression") if isinstance(cel, Mapping) else None
        if not isinstance(expression, str):
            raise DraError(f"{where}.selectors[{k}].cel.expression is required")
        try:
            out += parse_selector(expression)
        except SelectorError as exc:
            raise DraError(f"{where}.selectors[{k}]: {exc}") from exc
    return tuple(out)


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[Selector, ...]


def device_class(doc: Mapping[str, Any]) -> DeviceClass:
    name = str((doc.get("metadata") or {}).get("name") or "")
    if not name:
        raise DraError("DeviceClass without metadata.name")
    spec = doc.get("spec") or {}
    return DeviceClass(name, _selectors(spec.get("selectors"), f"DeviceClass {name}: spec"))


@dataclass(frozen=True)
class RequestAsk:
    name: str
    device_class: str
    selectors: tuple[Selector, ...]  # the class's and the request's
    count: int | None  # None: allocationMode All (every matching device of the node)

    def matches(self, device: DraDevice) -> bool:
        return all(selector.matches(device) for selector in self.selectors)

    def wanted(self, device_map: DeviceMap) -> int:
        """The count, or for `All` every matching device of the node."""
        if self.count is not None:
            return self.count
        return sum(self.matches(d) for d in device_map.by_index.values())


@dataclass(frozen=True)
class ClaimAsk:
    """What a ResourceClaim asks of the core."""

    namespace: str
    name: str
    uid: str
    requests: tuple[RequestAsk, ...]
    scope: TopologyScope | None = None  # from matchAttribute pcieRoot / numaNode
    models: frozenset[str] = field(default_factory=frozenset)  # productName == "..." selectors

    @property
    def policy(self) -> TopologyPolicy | None:
        """A matchAttribute constraint must hold: the core's `restricted` with its scope."""
        return TopologyPolicy.RESTRICTED if self.scope is not None else None

    def gpus(self, device_map: DeviceMap) -> int:
        return sum(r.wanted(device_map) for r in self.requests)

    def eligible(self, device_map: DeviceMap) -> int:
        """Bitmask of the node's GPU indices some request may take (the Reserve's free mask is
        narrowed to it)."""
        mask = 0
        for index, device in device_map.by_index.items():
            if any(r.matches(device) for r in self.requests):
                mask |= 1 << index
        return mask


_EXACT_KEYS = {"deviceClassName", "selectors", "allocationMode", "count"}


def claim_ask(doc: Mapping[str, Any], classes: Mapping[str, DeviceClass]) -> ClaimAsk:
    meta = doc.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    where = f"ResourceClaim {namespace}/{name}"
    devices = (doc.get("spec") or {}).get("devices") or {}
    raw_requests = devices.get("requests") or []
    if not isinstance(raw_requests, list) or not raw_requests:
        raise DraError(f"{where}: spec.devices.requests must list at least one request")
    requests = []
    for k, raw in enumerate(raw_requests):
        path = f"{where}: spec.devices.requests[{k}]"
        if not isinstance(raw, Mapping) or not raw.get("name"):
            raise DraError(f"{path}.name is required")
        if "firstAvailable" in raw:
            raise DraError(f"{path}.firstAvailable is not supported; use exactly")
        exact = raw.get("exactly")
        if not isinstance(exact, Mapping):
            raise DraError(f"{path}.exactly is required")
        unsupported = sorted(set(exact) - _EXACT_KEYS)
        if unsupported:
            raise DraError(f"{path}.exactly.{unsupported[0]} is not supported")
        class_name = str(exact.get("deviceClassName") or "")
        if class_name not in classes:
            raise DraError(f"{path}.exactly.deviceClassName: no DeviceClass {class_name!r}")
        mode = exact.get("allocationMode", "ExactCount")
        count = exact.get("count", 1)
        if mode not in ("ExactCount", "All"):
            raise DraError(f"{path}.exactly.allocationMode: {mode!r} is not ExactCount or All")
        if mode == "ExactCount" and (
            not isinstance(count, int) or isinstance(count, bool) or count < 1
        ):
            raise DraError(f"{path}.exactly.count must be a positive integer")
        requests.append(
            RequestAsk(
                name=str(raw["name"]),
                device_class=class_name,
                selectors=classes[class_name].selectors
                + _selectors(exact.get("selectors"), f"{path}.exactly"),
                count=count if mode == "ExactCount" else None,
            )
        )
    scope = _constraints(devices.get("constraints") or [], {r.name for r in requests}, where)
    models = frozenset(
        str(s.value)
        for r in requests
        for s in r.selectors
        if s.kind == "attribute" and s.what == f"{NVIDIA_DRIVER}/productName" and s.op == "=="
    )
    return ClaimAsk(namespace, name, str(meta.get("uid") or ""), tuple(requests), scope, models)


def _constraints(raw: object, names: set[str], where: str) -> TopologyScope | None:
    if not isinstance(raw, list):
        raise DraError(f"{where}: spec.devices.constraints must be a list")
    scopes = []
    for k, constraint in enumerate(raw):
        path = f"{where}: spec.devices.constraints[{k}]"
        if not isinstance(constraint, Mapping):
            raise DraError(f"{path} must be an object")
        if "distinctAttribute" in constraint:
            raise DraError(f"{path}.distinctAttribute is not supported")
        unknown = set(constraint.get("requests") or []) - names
        if unknown:
            raise DraError(f"{path}.requests: no request {sorted(unknown)[0]!r}")
        attribute = str(constraint.get("matchAttribute") or "")
        if attribute in SCOPE_OF_ATTRIBUTE:
            scopes.append(SCOPE_OF_ATTRIBUTE[attribute])
        elif attribute not in SAME_ON_A_NODE:
            supported = ", ".join(sorted({*SCOPE_OF_ATTRIBUTE, *SAME_ON_A_NODE}))
            raise DraError(f"{path}.matchAttribute {attribute!r}: supported are {supported}")
    # PCIe is the tighter scope; it is within one NUMA node (gpu_sets: PCIE implies NUMA-local).
    if TopologyScope.PCIE in scopes:
        return TopologyScope.PCIE
    return scopes[0] if scopes else None


# --- allocation ----------------------------------------------------------------------------------


def allocated_keys(claims: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """Devices some claim holds (its status.allocation): never given to another claim."""
    held = set()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            held.add(
                (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            )
    return held


def allocation_status(
    claim: Mapping[str, Any],
    ask: ClaimAsk,
    node: str,
    gpu_indices: Sequence[int],
    device_map: DeviceMap,
    *,
    pod_name: str,
    pod_uid: str,
) -> dict[str, Any]:
    """The claim's `status` after allocating the placement's GPUs and reserving it for the pod,
    as the DynamicResources plugin writes it (one UpdateStatus with both). DraError when the GPUs
    do not satisfy the requests (the placement must then be undone)."""
    chosen = []
    for index in gpu_indices:
        device = device_map.by_index.get(index)
        if device is None:
            raise DraError(f"{node}: GPU {index} has no DRA device")
        chosen.append(device)
    assignment = _assign(ask, chosen, device_map)
    status = dict(claim.get("status") or {})
    status["allocation"] = {
        "devices": {
            "results": [
                {"request": request, "driver": d.driver, "pool": d.pool, "device": d.name}
                for request, d in assignment
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != pod_uid]
    status["reservedFor"] = [*reserved, reserved_for(pod_name, pod_uid)]
    return status


def reserved_for(pod_name: str, pod_uid: str) -> dict[str, str]:
    """A ResourceClaimConsumerReference to a pod (the core API group: apiGroup left out)."""
    return {"resource": "pods", "name": pod_name, "uid": pod_uid}


def _assign(
    ask: ClaimAsk, chosen: Sequence[DraDevice], device_map: DeviceMap
) -> list[tuple[str, DraDevice]]:
    """Give each request its devices out of `chosen`, the most selective request first."""
    wanted = {r.name: r.wanted(device_map) for r in ask.requests}
    left = list(chosen)
    out: list[tuple[str, DraDevice]] = []
    for request in sorted(ask.requests, key=lambda r: sum(r.matches(d) for d in left)):
        fits = [d for d in left if request.matches(d)][: wanted[request.name]]
        if len(fits) < wanted[request.name]:
            raise DraError(
                f"ResourceClaim {ask.namespace}/{ask.name}: request {request.name} needs "
                f"{wanted[request.name]} matching devices, the chosen GPUs hold {len(fits)}"
            )
        out += [(request.name, d) for d in fits]
        left = [d for d in left if d not in fits]
    if left:
        raise DraError(
            f"ResourceClaim {ask.namespace}/{ask.name}: {len(left)} chosen GPUs more than asked"
        )
    order = {r.name: k for k, r in enumerate(ask.requests)}
    return sorted(out, key=lambda item: (order[item[0]], _natural(item[1].name)))
