"""A pod's node selector, tolerations and GPU models move to PodConstraints, one row per distinct
content, referenced by the pods (issue 33): existing pods keep what they had, deduplicated (and
get their own copies back if it is reversed)."""

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from scheduling.pod_template import constraints_digest

CHUNK = 5000


def share_constraints(apps: Any, schema_editor: Any) -> None:
    pod_model = apps.get_model("scheduling", "Pod")
    constraints_model = apps.get_model("scheduling", "PodConstraints")
    ids: dict[str, int] = {}
    last = 0
    while True:
        rows = list(
            pod_model.objects.filter(pk__gt=last)
            .order_by("pk")
            .values_list("pk", "node_selector", "tolerations", "gpu_models")[:CHUNK]
        )
        if not rows:
            return
        last = rows[-1][0]
        pods_of: dict[str, list[int]] = {}
        for pk, selector, tolerations, models_ in rows:
            digest = constraints_digest(selector or {}, tolerations or [], models_ or [])
            if digest not in ids:
                ids[digest] = constraints_model.objects.create(
                    digest=digest,
                    node_selector=selector or {},
                    tolerations=tolerations or [],
                    gpu_models=models_ or [],
                ).pk
            pods_of.setdefault(digest, []).append(pk)
        for digest, pks in pods_of.items():
            pod_model.objects.filter(pk__in=pks).update(constraints_id=ids[digest])


def restore_columns(apps: Any, schema_editor: Any) -> None:
    """Backwards: each pod its own copy again."""
    pod_model = apps.get_model("scheduling", "Pod")
    for row in apps.get_model("scheduling", "PodConstraints").objects.iterator():
        pod_model.objects.filter(constraints_id=row.pk).update(
            node_selector=row.node_selector,
            tolerations=row.tolerations,
            gpu_models=row.gpu_models,
        )


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0019_workload_origin_job"),
    ]

    operations = [
        migrations.CreateModel(
            name="PodConstraints",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("digest", models.CharField(max_length=64, unique=True)),
                ("node_selector", models.JSONField(default=dict)),
                ("tolerations", models.JSONField(default=list)),
                ("gpu_models", models.JSONField(default=list)),
            ],
        ),
        migrations.AddField(
            model_name="pod",
            name="constraints",
            field=models.ForeignKey(
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="pods",
                to="scheduling.podconstraints",
            ),
        ),
        migrations.RunPython(share_constraints, restore_columns, elidable=True),
        migrations.AlterField(
            model_name="pod",
            name="constraints",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.PROTECT,
                related_name="pods",
                to="scheduling.podconstraints",
            ),
        ),
        migrations.RemoveField(model_name="pod", name="gpu_models"),
        migrations.RemoveField(model_name="pod", name="node_selector"),
        migrations.RemoveField(model_name="pod", name="tolerations"),
    ]
