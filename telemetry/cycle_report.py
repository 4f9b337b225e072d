"""What one ingest cycle did: the ingester prints it (a line or JSON) and its metrics count it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class CycleReport:
    at: str
    source: str
    ok: bool = False
    gpus: int = 0
    nodes: int = 0
    samples: int = 0
    skipped: int = 0  # exposition lines (or vector items) that could not be read
    skipped_reasons: dict[str, int] = field(default_factory=dict)
    # Samples read but not stored, by reason: a series naming no storable GPU (gpu "-1", a
    # label longer than its column), a value outside its field's range (telemetry/dcgm.py).
    samples_skipped: int = 0
    samples_skipped_reasons: dict[str, int] = field(default_factory=dict)
    values_clamped: dict[str, int] = field(default_factory=dict)  # metric -> values
    # Which rule placed the series on their nodes (telemetry.placement: node label, Hostname,
    # instance, scrape target): label sets per rule.
    nodes_by_rule: dict[str, int] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)  # what a cap or an unknown node cost
    errors: list[str] = field(default_factory=list)
    # Pods the exporter shows on other GPUs than gpusched recorded (new this cycle; each
    # (pod, GPUs) counted once), and how many of all found were corrected (telemetry.holders).
    assignment_mismatches: int = 0
    assignments_corrected: int = 0
    stale_marked: int = 0
    minutes_rolled: int = 0
    raw_pruned: int = 0
    fetch_s: float = 0.0
    store_s: float = 0.0
    total_s: float = 0.0

    def line(self) -> str:
        state = "ok" if self.ok else "FAILED"
        text = (
            f"ingesttelemetry {self.source} {state}: {self.gpus} GPUs on {self.nodes} nodes, "
            f"{self.samples} samples, {self.skipped} lines skipped, {self.samples_skipped} "
            f"samples left out, {self.stale_marked} nodes marked stale, {self.total_s:.3f} s"
        )
        if self.nodes_by_rule:
            rules = ", ".join(f"{rule} {n}" for rule, n in self.nodes_by_rule.items())
            text += f" (nodes by {rules})"
        if self.left_out:
            text += "; left out: " + "; ".join(self.left_out)
        if self.assignment_mismatches:
            text += (
                f", {self.assignment_mismatches} GPU assignment mismatches "
                f"({self.assignments_corrected} corrected)"
            )
        return text + "".join(f"\n  error: {error}" for error in self.errors)
