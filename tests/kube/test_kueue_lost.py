"""Kueue's objects lost from the cluster are shown as such: a ClusterQueue deleted while it holds
admitted workloads is terminating on the Queues page, in the admin API and in /metrics (not merely
on Hold), and the pending workloads of a deleted LocalQueue are still counted."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from api import services as api_services
from dashboard.live import QueuesView
from scheduling.models import ClusterQueue
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.api.conftest import client_for
from tests.kube import objects
from tests.kube.kueue_cluster import (
    NS,
    cluster_queue,
    create,
    cycle,
    delete,
    flavor,
    local_queue,
    node_of,
    queued_pod,
)
from tests.test_observability import scrape, value

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_a_cluster_queue_deleted_with_admitted_work_shows_terminating_everywhere(
    fake: SimulatedKubernetes, client: Client
) -> None:
    fake.add_node(objects.node("gpu-a"))
    create(fake, "resourceflavors", flavor())
    create(fake, "clusterqueues", cluster_queue(gpus=4))
    create(fake, "localqueues", local_queue())
    fake.add_pod(queued_pod("running", 2))
    sched = cycle(fake)
    sched.run_once()
    assert node_of(fake, "running") == "gpu-a"

    delete(fake, "localqueues", "team", NS)
    delete(fake, "clusterqueues", "team")
    fake.add_pod(queued_pod("later", 1))
    sched.run_once()
    sched.run_once()

    row = ClusterQueue.objects.get(name="team")
    assert row.stop_policy == "Hold" and row.deleted_from_source_at is not None
    page = QueuesView().build()["cluster_queues"]["team"]
    assert page["deleted_from_cluster_at"] == row.deleted_from_source_at.isoformat()
    user = User.objects.create_user("admin", password="pw", is_staff=True)
    _, token = api_services.token_create(user=user)
    (doc,) = client_for(token).get("/api/v1/admin/clusterqueues").json()["items"]
    assert (doc["name"], doc["stopPolicy"]) == ("team", "Hold")
    assert doc["deletedFromClusterAt"] is not None
    series = scrape(client)
    assert value(series, "gpusched_queue_terminating", cluster_queue="team") == 1
    # Its workload holds its admission, LocalQueue gone or not: one figure everywhere.
    assert doc["admittedWorkloads"] == page["admitted"] == 1
    assert value(series, "gpusched_queue_admitted_workloads", cluster_queue="team") == 1
    # The LocalQueue is gone: its pending workload is counted under no ClusterQueue.
    assert value(series, "gpusched_queue_pending_workloads", cluster_queue="team") == 0
    assert value(series, "gpusched_queue_pending_workloads_without_local_queue") == 1
    assert value(series, "gpusched_workloads", state="Pending") == 1

    # Created in the cluster again: no longer terminating, admitting again.
    create(fake, "clusterqueues", cluster_queue(gpus=4))
    create(fake, "localqueues", local_queue())
    sched.run_once()
    sched.run_once()
    again = ClusterQueue.objects.get(name="team")
    assert (again.stop_policy, again.deleted_from_source_at) == ("None", None)
    series = scrape(client)
    assert value(series, "gpusched_queue_terminating", cluster_queue="team") == 0
    assert value(series, "gpusched_queue_pending_workloads_without_local_queue") == 0
    assert node_of(fake, "later") == "gpu-a"
