"""What every fault must leave true of the placements, checked through the ORM on the current
database, and a small command line to do the same on a database the test process is not
connected to (a private PostgreSQL cluster):

    python -m tests.faults.dbtool setup NODES      migrate, register NODES simulated 8-GPU nodes,
                                                   `createtenant team-a` (quota for all of them);
                                                   prints createtenant's JSON (with the token)
    python -m tests.faults.dbtool check            one JSON object: counts and problems

(DATABASE_URL selects the database, as for manage.py.)"""

from __future__ import annotations

import json
import os
import sys
from typing import Any


def placement_problems() -> list[str]:
    """Every way the placements break the rules: a Bound pod without exactly one active
    allocation, a pod placed twice, a GPU over-committed or whose `used_milli` disagrees with what
    its active assignments hold, an exclusive GPU shared, a node's CPU over-committed."""
    from django.db.models import Count, Q, Sum

    from scheduling.models import Allocation, Gpu, GpuAssignment, Node, Pod

    problems: list[str] = []
    per_pod = dict(
        Allocation.objects.filter(active=True)
        .values("pod")
        .annotate(n=Count("id"))
        .values_list("pod", "n")
    )
    for pod in Pod.objects.filter(phase__in=["Bound", "Running"]).values_list("pk", flat=True):
        if per_pod.get(pod, 0) != 1:
            problems.append(f"pod {pod} is bound with {per_pod.get(pod, 0)} active allocations")
    doubled = [pod for pod, n in per_pod.items() if n > 1]
    if doubled:
        problems.append(f"pods with more than one active allocation: {doubled[:10]}")
    unbound = Allocation.objects.filter(active=True).exclude(pod__phase__in=["Bound", "Running"])
    if unbound.exists():
        problems.append(f"{unbound.count()} active allocations of pods not bound")
    for gpu in Gpu.objects.annotate(
        held=Sum("assignments__milli", filter=Q(assignments__active=True)),
        exclusive_holders=Count(
            "assignments", filter=Q(assignments__active=True, assignments__exclusive=True)
        ),
        shared_holders=Count(
            "assignments", filter=Q(assignments__active=True, assignments__exclusive=False)
        ),
    ):
        held = gpu.held or 0
        if not 0 <= gpu.used_milli <= 1000 or held > 1000:
            problems.append(f"GPU {gpu.pk} over-committed: used {gpu.used_milli}, held {held}")
        if gpu.used_milli != held:
            problems.append(f"GPU {gpu.pk}: used_milli {gpu.used_milli} != assignments {held}")
        if gpu.exclusive_holders > 1 or (gpu.exclusive_holders and gpu.shared_holders):
            problems.append(
                f"GPU {gpu.pk}: {gpu.exclusive_holders} exclusive and {gpu.shared_holders} "
                "shared holders"
            )
    doubled_exclusive = (
        GpuAssignment.objects.filter(active=True, exclusive=True)
        .values("gpu")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    if doubled_exclusive.exists():
        problems.append(f"exclusive GPUs held twice: {list(doubled_exclusive)[:10]}")
    for node in Node.objects.all():
        if not 0 <= node.cpu_used_milli <= node.cpu_milli:
            problems.append(f"node {node.name}: cpu used {node.cpu_used_milli}/{node.cpu_milli}")
    return problems


def placement_report() -> dict[str, Any]:
    """Counts per workload and pod phase, and the problems."""
    from django.db.models import Count

    from scheduling.models import Pod, Workload

    return {
        "workloads": sorted(Workload.objects.values_list("name", flat=True)),
        "pods_per_workload": dict(
            Pod.objects.values("workload__name")
            .annotate(n=Count("id"))
            .values_list("workload__name", "n")
        ),
        "phases": dict(
            Pod.objects.values("phase").annotate(n=Count("id")).values_list("phase", "n")
        ),
        "problems": placement_problems(),
    }


def main(argv: list[str]) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpusched.settings")
    import django

    django.setup()
    if argv[:1] == ["setup"] and len(argv) == 2:
        from django.core.management import call_command

        from tests.scheduling import factories

        call_command("migrate", verbosity=0)
        factories.nodes(int(argv[1]))
        quota = ["cpu=100000", "memory=100Ti", "nvidia.com/gpu=100000"]
        call_command("createtenant", "team-a", *(f"--quota={q}" for q in quota), "--json")
        return 0
    if argv == ["check"]:
        print(json.dumps(placement_report()))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
