"""GpuSample builders for the service and selector tests."""

from __future__ import annotations

from datetime import UTC, datetime

from telemetry.dcgm import GpuKey, GpuSample, PodRef

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def sample(
    node: str = "node-1",
    index: int = 0,
    *,
    busy: float | None = 0.5,
    fb_used: float | None = 1000.0,
    pod: str | None = None,
    namespace: str = "ns",
    mig: str = "",
    profile: str = "",
    timestamp: float | None = None,
    **values: float,
) -> GpuSample:
    fields: dict[str, float] = dict(values)
    if busy is not None:
        fields["gr_engine_active"] = busy
    if fb_used is not None:
        fields["fb_used_mib"] = fb_used
    return GpuSample(
        key=GpuKey(node, index, mig),
        uuid=f"GPU-{node}-{index}",
        model_name="NVIDIA H100 80GB HBM3",
        mig_profile=profile,
        pod=PodRef(namespace, pod, "main") if pod else None,
        values=fields,
        timestamp=timestamp,
    )
