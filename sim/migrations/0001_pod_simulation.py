"""The simulator's own table of how it runs each pod, filled from the pods' former `simulation`
column before scheduling's 0014 removes it (run_before), so a development database upgrades
without losing a running simulation; undone, the rows go back into the column."""

import django.db.models.deletion
from django.db import migrations, models

BATCH = 2000


def copy_from_pods(apps, schema_editor):
    Pod = apps.get_model("scheduling", "Pod")
    PodSimulation = apps.get_model("sim", "PodSimulation")
    rows = []
    for pk, doc, started_at in (
        Pod.objects.values_list("pk", "simulation", "started_at").order_by("pk").iterator(BATCH)
    ):
        if not doc:
            continue
        lost = float(doc.get("lost_s") or 0.0)
        arrival = doc.get("arrival_s")
        rows.append(
            PodSimulation(
                pod_id=pk,
                arrival_s=None if arrival is None else float(arrival),
                duration_s=float(doc.get("duration_s") or 0.0),
                utilization=doc.get("utilization") or {},
                lost_s=lost,
                lost_since=started_at if lost else None,
            )
        )
        if len(rows) >= BATCH:
            PodSimulation.objects.bulk_create(rows)
            rows = []
    PodSimulation.objects.bulk_create(rows)


def copy_back_to_pods(apps, schema_editor):
    Pod = apps.get_model("scheduling", "Pod")
    PodSimulation = apps.get_model("sim", "PodSimulation")
    for run in PodSimulation.objects.order_by("pk").iterator(BATCH):
        doc = {"duration_s": run.duration_s}
        if run.arrival_s is not None:
            doc["arrival_s"] = run.arrival_s
        if run.utilization:
            doc["utilization"] = run.utilization
        if run.lost_s and run.lost_since is not None:
            doc["lost_s"] = run.lost_s
        Pod.objects.filter(pk=run.pod_id).update(simulation=doc)


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("scheduling", "0013_event_ids_in_commit_order"),
    ]
    run_before = [
        ("scheduling", "0014_no_simulation_in_the_schema"),
    ]

    operations = [
        migrations.CreateModel(
            name="PodSimulation",
            fields=[
                (
                    "pod",
                    models.OneToOneField(
                        db_constraint=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="sim",
                        serialize=False,
                        to="scheduling.pod",
                    ),
                ),
                ("arrival_s", models.FloatField(blank=True, null=True)),
                ("duration_s", models.FloatField(default=0.0)),
                ("utilization", models.JSONField(blank=True, default=dict)),
                ("lost_s", models.FloatField(default=0.0)),
                ("lost_since", models.DateTimeField(blank=True, null=True)),
            ],
        ),
        migrations.RunPython(copy_from_pods, copy_back_to_pods),
    ]
