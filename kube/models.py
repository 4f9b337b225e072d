"""Which Kubernetes pod each of our Pod rows mirrors (scheduling.models stays Kubernetes-free)."""

from __future__ import annotations

from django.db import models

from scheduling.models import Pod, Workload


class KubePod(models.Model):
    """A Kubernetes pod mirrored into the database: ours to place (`owned`) or a pod bound by
    someone else whose resources must be counted."""

    uid = models.CharField(max_length=64, unique=True)  # metadata.uid
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    pod = models.OneToOneField(Pod, on_delete=models.CASCADE, related_name="kube")
    scheduler_name = models.CharField(max_length=253)
    owned = models.BooleanField(default=False)  # pending for our schedulerName when first seen
    reported_reason = models.CharField(max_length=1024, blank=True, default="")  # last event
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["namespace", "name"])]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class KubeJob(models.Model):
    """A batch/v1 Job run as one workload (kube.jobs), and the scheduling directives its pod
    template had before gpusched wrote the admitted flavor's into it (restored on a suspend, as
    Kueue's RestorePodSetsInfo does)."""

    uid = models.CharField(max_length=64, unique=True)  # metadata.uid
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    workload = models.OneToOneField(Workload, on_delete=models.CASCADE, related_name="kube_job")
    node_selector = models.JSONField(default=dict, blank=True)
    tolerations = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["namespace", "name"])]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
