"""The harness out of the product's schema: a pod's simulation (run time, utilization, time lost
to contention) moves to the simulator's own table (sim.PodSimulation, whose migration copies it
first: it runs before this one wherever the harness is installed), and a node's source has no
default (the database side's simulated cluster and the Kubernetes side each say theirs)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0013_event_ids_in_commit_order"),
    ]

    operations = [
        migrations.RemoveField(model_name="pod", name="simulation"),
        migrations.AlterField(
            model_name="node",
            name="source",
            field=models.CharField(
                choices=[("simulator", "Simulator"), ("kubernetes", "Kubernetes")], max_length=16
            ),
        ),
    ]
