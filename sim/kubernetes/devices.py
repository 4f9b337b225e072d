"""Which GPUs a pod really gets on its node, as the node decides it:

- classic device plugin (`nvidia.com/gpu: n`): the kubelet's device manager picks n free healthy
  GPUs itself, lowest indices first. The scheduler's annotation `gpusched.io/gpu-ids` is not
  read by a real kubelet or the NVIDIA device plugin, so it is ignored unless the kubelets are
  told to honour it, as a device plugin that reads the scheduler's annotation does (HAMi's,
  gpushare's: docs/kubernetes.md, "Device choice");
- MIG (`nvidia.com/mig-<profile>: n`): free instances of that profile, lowest (GPU, slot)
  first, or those of `gpusched.io/mig-slots` when honouring;
- GPU shares (`gpusched.io/gpu-milli`): a share device plugin in the style of gpushare's, which
  reads the scheduler's annotation (`gpusched.io/gpu-ids`, the share from
  `gpusched.io/gpu-share-milli`); without the annotation the share reaches no GPU;
- DRA: exactly the devices of the pod's ResourceClaims' status.allocation for this node's pool
  of driver gpu.nvidia.com (`gpu-<i>`, `gpu-<i>-mig-<slot>`); a claim not yet allocated and
  reserved for the pod keeps the pod waiting, as kubelet's PrepareResources does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduling.core.types import GPU_MILLI_RESOURCE, GPU_RESOURCE, MIG_RESOURCE_PREFIX, SharingMode
from sim.kubernetes.cluster import DRIVER, NodeDevices
from sim.kubernetes.pod_spec import ANNOTATION_GPU_IDS, ANNOTATION_GPU_SHARE, ANNOTATION_MIG_SLOTS
from sim.kubernetes.registry import Registry
from sim.kubernetes.resources import named

Obj = dict[str, Any]
CLAIMS = named("resource.k8s.io/resourceclaims")


@dataclass(frozen=True)
class Holding:
    """What one pod holds on its node."""

    gpus: tuple[int, ...] = ()  # whole GPUs
    shares: tuple[tuple[int, int], ...] = ()  # (gpu, milli)
    mig: tuple[tuple[int, int], ...] = ()  # (gpu, slot)

    def indices(self) -> tuple[int, ...]:
        """Every physical GPU index the pod touches."""
        return tuple(sorted({*self.gpus, *(g for g, _ in self.shares), *(g for g, _ in self.mig)}))


class Waiting(Exception):
    """The pod cannot start yet (its claims are not allocated); the message says why."""


class Unavailable(Exception):
    """The device manager cannot give what was admitted (a GPU went away)."""


@dataclass
class NodeGpus:
    devices: NodeDevices
    held: dict[str, Holding] = field(default_factory=dict)  # pod key -> holding

    def busy_whole(self) -> set[int]:
        return {g for h in self.held.values() for g in (*h.gpus, *(s for s, _ in h.shares))}

    def busy_mig(self) -> set[tuple[int, int]]:
        return {m for h in self.held.values() for m in h.mig}

    def assign(
        self, api: Registry, pod: Obj, requests: dict[str, int], *, honour_ids: bool
    ) -> Holding:
        annotations = pod["metadata"].get("annotations") or {}
        if (pod.get("spec") or {}).get("resourceClaims"):
            claimed = self._claimed(api, pod)
            if claimed.gpus or claimed.mig:
                return claimed
        gpus = self._whole(requests.get(GPU_RESOURCE, 0), annotations, honour_ids)
        mig = self._mig(requests, annotations, honour_ids)
        shares: tuple[tuple[int, int], ...] = ()
        milli = requests.get(GPU_MILLI_RESOURCE, 0)
        ids = _ids(annotations.get(ANNOTATION_GPU_IDS, ""))
        if milli and ids and ids[0] in self.devices.gpus:
            share = int(annotations.get(ANNOTATION_GPU_SHARE) or milli)
            shares = ((ids[0], share),)
        return Holding(gpus, shares, mig)

    def _whole(self, count: int, annotations: dict[str, str], honour_ids: bool) -> tuple[int, ...]:
        if not count:
            return ()
        taken = self.busy_whole()
        free = [
            g.index
            for g in self.devices.healthy()
            if g.sharing is not SharingMode.MIG and g.index not in taken
        ]
        wanted = _ids(annotations.get(ANNOTATION_GPU_IDS, "")) if honour_ids else []
        if len(wanted) == count and all(i in free for i in wanted):
            return tuple(wanted)
        if len(free) < count:
            raise Unavailable(_unavailable(GPU_RESOURCE, count, len(free)))
        return tuple(free[:count])

    def _mig(
        self, requests: dict[str, int], annotations: dict[str, str], honour_ids: bool
    ) -> tuple[tuple[int, int], ...]:
        chosen: list[tuple[int, int]] = []
        taken = self.busy_mig()
        wanted = _slots(annotations.get(ANNOTATION_MIG_SLOTS, "")) if honour_ids else []
        for resource, count in sorted(requests.items()):
            if not resource.startswith(MIG_RESOURCE_PREFIX) or not count:
                continue
            profile = resource[len(MIG_RESOURCE_PREFIX) :]
            free = [
                (g.index, slot)
                for g in self.devices.healthy()
                for slot, p in enumerate(g.mig_layout)
                if p == profile and (g.index, slot) not in taken and (g.index, slot) not in chosen
            ]
            preferred = [s for s in wanted if s in free][:count]
            rest = [s for s in free if s not in preferred]
            picked = (preferred + rest)[:count]
            if len(picked) < count:
                raise Unavailable(_unavailable(resource, count, len(free)))
            chosen += picked
        return tuple(chosen)

    def _claimed(self, api: Registry, pod: Obj) -> Holding:
        meta = pod["metadata"]
        namespace, uid = str(meta.get("namespace") or ""), meta.get("uid")
        statuses = {
            s.get("name"): s.get("resourceClaimName")
            for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        }
        gpus: list[int] = []
        mig: list[tuple[int, int]] = []
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
            name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
            if not name:
                raise Waiting(f"claim {entry.get('name')}: waiting for its ResourceClaim")
            claim = api.storage.get(CLAIMS, namespace, str(name))
            if claim is None:
                raise Waiting(f'resourceclaim "{name}" not found')
            status = claim.get("status") or {}
            if not status.get("allocation"):
                raise Waiting(f'resourceclaim "{name}" is not allocated')
            if not any(r.get("uid") == uid for r in status.get("reservedFor") or []):
                raise Waiting(f'resourceclaim "{name}" is not reserved for this pod')
            for result in (status["allocation"].get("devices") or {}).get("results") or []:
                if result.get("driver") != DRIVER or result.get("pool") != self.devices.node:
                    continue
                device = _device(str(result.get("device", "")))
                if device is None:
                    continue
                if device[1] is None:
                    gpus.append(device[0])
                else:
                    mig.append((device[0], device[1]))
        return Holding(tuple(sorted(gpus)), (), tuple(sorted(mig)))


def _unavailable(resource: str, requested: int, available: int) -> str:
    """The kubelet device manager's words."""
    return (
        f"Allocate failed due to requested number of devices unavailable for {resource}. "
        f"Requested: {requested}, Available: {available}, which is unexpected"
    )


def _ids(text: str) -> list[int]:
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return []


def _slots(text: str) -> list[tuple[int, int]]:
    found = []
    for part in text.split(","):
        gpu, _, slot = part.partition(":")
        if gpu.strip().isdigit() and slot.strip().isdigit():
            found.append((int(gpu), int(slot)))
    return found


def _device(name: str) -> tuple[int, int | None] | None:
    """`gpu-3` -> (3, None); `gpu-3-mig-1` -> (3, 1)."""
    parts = name.split("-")
    if len(parts) == 2 and parts[0] == "gpu" and parts[1].isdigit():
        return int(parts[1]), None
    if (
        len(parts) == 4
        and parts[0] == "gpu"
        and parts[2] == "mig"
        and parts[1].isdigit()
        and parts[3].isdigit()
    ):
        return int(parts[1]), int(parts[3])
    return None
