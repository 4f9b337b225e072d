"""Telemetry storage: the latest reading of every GPU, a short raw history, 1-minute rollups.

Rows are keyed by names, never by foreign keys into `scheduling`: node name (the exporter's
Hostname), GPU index, MIG instance id ("" for a whole GPU), pod namespace and name. Selectors
join them to nodes, allocations and tenants by those names. Only `telemetry.services` writes.

    GpuLatest      one row per GPU / MIG instance: its last values and when they were measured
    GpuSampleRaw   every ingested reading, one row per GPU and pod, kept for a few minutes
    GpuMinute      per GPU and minute: samples, avg / max / p95 of busy, framebuffer, power
    PodMinute      per pod and minute: GPUs held, GPUs used (sum of busy), framebuffer
    NodeTelemetry  per node: when it last reported, and fresh / stale
    SourceStatus   per source: last attempt, last success, failures, last error
"""

from django.db import models

from telemetry.dcgm import LABEL_LIMITS  # what ingest lets through fits these columns


class GpuLatest(models.Model):
    node = models.CharField(max_length=LABEL_LIMITS["node"])
    gpu_index = models.PositiveSmallIntegerField()
    mig_instance = models.CharField(max_length=LABEL_LIMITS["mig_instance"], blank=True, default="")
    uuid = models.CharField(max_length=LABEL_LIMITS["uuid"], blank=True)
    model_name = models.CharField(max_length=LABEL_LIMITS["model_name"], blank=True)
    mig_profile = models.CharField(max_length=LABEL_LIMITS["mig_profile"], blank=True)
    # [[namespace, pod, container], ...]: the pods the exporter maps to this GPU.
    pods = models.JSONField(default=list, blank=True)
    # Ratios 0-1, framebuffer in MiB, power in W, temperature in °C; NULL = not reported.
    busy = models.FloatField(null=True)
    gpu_util = models.FloatField(null=True)
    mem_copy_util = models.FloatField(null=True)
    gr_engine_active = models.FloatField(null=True)
    tensor_active = models.FloatField(null=True)
    dram_active = models.FloatField(null=True)
    fb_used_mib = models.FloatField(null=True)
    fb_free_mib = models.FloatField(null=True)
    power_w = models.FloatField(null=True)
    temp_c = models.FloatField(null=True)
    xid_last = models.IntegerField(null=True)
    source = models.CharField(max_length=32, blank=True)
    sampled_at = models.DateTimeField()  # when the values were measured (their age starts here)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["node", "gpu_index", "mig_instance"], name="telemetry_gpulatest_key"
            )
        ]

    def __str__(self) -> str:
        mig = f"/{self.mig_instance}" if self.mig_instance else ""
        return f"{self.node}:{self.gpu_index}{mig}"


class GpuSampleRaw(models.Model):
    observed_at = models.DateTimeField(db_index=True)  # the ingest cycle's time
    node = models.CharField(max_length=LABEL_LIMITS["node"])
    gpu_index = models.PositiveSmallIntegerField()
    mig_instance = models.CharField(max_length=LABEL_LIMITS["mig_instance"], blank=True, default="")
    namespace = models.CharField(
        max_length=LABEL_LIMITS["namespace"], blank=True, default=""
    )  # "" = no pod
    pod = models.CharField(max_length=LABEL_LIMITS["pod"], blank=True, default="")
    # A GPU shared by several pods has a row per pod, with the same values: GPU rollups read
    # only the first (primary) one.
    primary = models.BooleanField(default=True)
    busy = models.FloatField(null=True)
    fb_used_mib = models.FloatField(null=True)
    power_w = models.FloatField(null=True)

    def __str__(self) -> str:
        return f"{self.node}:{self.gpu_index} @ {self.observed_at:%H:%M:%S}"


class GpuMinute(models.Model):
    minute = models.DateTimeField()  # start of the minute
    node = models.CharField(max_length=LABEL_LIMITS["node"])
    gpu_index = models.PositiveSmallIntegerField()
    mig_instance = models.CharField(max_length=LABEL_LIMITS["mig_instance"], blank=True, default="")
    samples = models.PositiveIntegerField()
    busy_avg = models.FloatField(null=True)
    busy_max = models.FloatField(null=True)
    busy_p95 = models.FloatField(null=True)  # nearest rank
    fb_used_avg = models.FloatField(null=True)
    fb_used_max = models.FloatField(null=True)
    power_avg = models.FloatField(null=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "node", "gpu_index", "mig_instance"],
                name="telemetry_gpuminute_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.node}:{self.gpu_index} @ {self.minute:%H:%M}"


class PodMinute(models.Model):
    minute = models.DateTimeField()
    namespace = models.CharField(max_length=253)
    pod = models.CharField(max_length=253)
    samples = models.PositiveIntegerField()
    gpus_avg = models.FloatField()  # GPUs (or MIG instances) the pod held
    used_avg = models.FloatField()  # GPUs it kept busy: the sum of busy over its GPUs
    used_max = models.FloatField()
    used_p95 = models.FloatField()  # nearest rank
    fb_used_avg = models.FloatField()
    fb_used_max = models.FloatField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "namespace", "pod"], name="telemetry_podminute_key"
            )
        ]
        indexes = [models.Index(fields=["namespace", "minute"])]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.pod} @ {self.minute:%H:%M}"


class NodeTelemetry(models.Model):
    class State(models.TextChoices):
        FRESH = "fresh"
        STALE = "stale"
        MISSING = "missing"  # only reported by selectors, for nodes that never reported

    node = models.CharField(max_length=253, unique=True)
    state = models.CharField(max_length=8, choices=State.choices, default=State.FRESH)
    last_sample_at = models.DateTimeField()
    gpus = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=32, blank=True)

    def __str__(self) -> str:
        return f"{self.node}: {self.state}"


class SourceStatus(models.Model):
    name = models.CharField(max_length=32, unique=True)
    last_attempt_at = models.DateTimeField(null=True)
    last_success_at = models.DateTimeField(null=True)
    consecutive_failures = models.PositiveIntegerField(default=0)
    failures_total = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_gpus = models.PositiveIntegerField(default=0)
    # What the last successful attempt left out (a cap reached, series on no node of the
    # cluster); "" when it kept everything.
    last_warning = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return self.name
