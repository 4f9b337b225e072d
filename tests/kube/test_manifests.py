"""deploy/: every manifest passes the Kubernetes API's JSON schema (kubernetes-validate, strict;
the Prometheus Operator's custom resources in deploy/monitoring/ are outside its core schemas and
are checked in tests/deploy/test_monitoring.py), both kustomizations build (`kubectl kustomize`),
the KubeSchedulerConfigurations load through our profile loader, the extender stanza obeys
kube-scheduler's validation rules, containers run non-root and read-only, RBAC is least
privilege."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from django.core.management import get_commands
from django.urls import resolve

from kube.kueue import MANAGER_CONFIG
from kube.management.commands.runkube import LEASE_NAME
from kube.translate import pod_info
from scheduling.core.framework import EXTENSION_POINTS
from scheduling.core.profiles import load_profiles
from tests.kube.helpers import DEPLOY, seeds_profile_text, shipped_profile_text
from tests.support.binaries import installed

NOT_API_KINDS = {"KubeSchedulerConfiguration", "Kustomization"}
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}  # custom resources: tests/deploy/
VERSIONS = ("1.30.0", "1.37.0")
HARNESS = ("sim", "bench")


def documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    # deploy/*.yaml, deploy/examples/ and deploy/monitoring/: the Kubernetes manifests (the other
    # folders hold compose, Prometheus and Grafana files).
    folders = ("*.yaml", "examples/*.yaml", "monitoring/*.yaml")
    for path in sorted(path for pattern in folders for path in DEPLOY.glob(pattern)):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                found.append((str(path.relative_to(DEPLOY)), doc))
    return found


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for _, doc in documents() if doc["kind"] == kind]


def named(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in by_kind(kind) if d["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_passes_the_api_schema(version: str) -> None:
    checked = 0
    for path, doc in documents():
        if doc["kind"] in NOT_API_KINDS | OPERATOR_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            raise AssertionError(f"{path} {doc['kind']}/{doc['metadata']['name']}: {exc}") from exc
        checked += 1
    assert checked >= 23


def test_the_validator_catches_a_broken_manifest() -> None:
    broken = named("Deployment", "gpusched-scheduler")
    broken["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = 3
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)
    broken = named("Deployment", "gpusched-web")
    broken["spec"]["replica"] = 2  # a typo: strict schemas refuse unknown fields
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def test_scheduler_configurations_load_through_our_profile_loader() -> None:
    (extender_config,) = by_kind("KubeSchedulerConfiguration")
    (profile,) = load_profiles(yaml.safe_dump(extender_config))
    assert profile.scheduler_name == "default-scheduler"
    (seeds,) = load_profiles(seeds_profile_text())
    assert seeds.scheduler_name == "gpu-topology-scheduler"
    assert [(p.name, p.weight) for p in seeds.enabled("score") if p.name == "GPUTopologyAware"] == [
        ("GPUTopologyAware", 5)
    ]
    assert seeds.plugin_args["GPUTopologyAware"] == {
        "topologyAnnotation": "gpu-topology.nvidia.com/info",
        "preferSameNUMA": True,
    }


@pytest.mark.urls("tests.kube.urls")
def test_the_extender_stanza_follows_kube_scheduler_validation() -> None:
    (config,) = by_kind("KubeSchedulerConfiguration")
    extenders = config["extenders"]
    assert sum(1 for e in extenders if e.get("bindVerb")) <= 1  # only one binder
    for extender in extenders:
        if extender.get("prioritizeVerb"):
            assert extender["weight"] > 0
        names = [r["name"] for r in extender.get("managedResources", [])]
        assert len(names) == len(set(names))
        for name in names:  # extended resources only
            domain = name.split("/")[0]
            assert "/" in name and not domain.endswith("kubernetes.io")
        assert extender["nodeCacheCapable"] is True
        # The URL points at the extender's own Service, over HTTPS, and every verb is one of
        # our routes.
        service = named("Service", "gpusched-extender-api")
        host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
        (port,) = [p["port"] for p in service["spec"]["ports"] if p["name"] == "extender"]
        assert extender["urlPrefix"] == f"https://{host}:{port}/extender"
        for verb in ("filterVerb", "prioritizeVerb", "bindVerb"):
            assert str(resolve(f"/extender/{extender[verb]}").url_name).startswith("extender-")
        # TLS both ways: kube-scheduler verifies the server (no CA would mean no verification
        # at all, pkg/scheduler/extender.go) and presents a client certificate.
        tls = extender["tlsConfig"]
        assert extender["enableHTTPS"] is True and not tls.get("insecure")
        assert tls["serverName"] == host
        assert (tls.get("caFile") or tls.get("caData")) and (
            tls.get("certFile") or tls.get("certData")
        )
        assert tls.get("keyFile") or tls.get("keyData")


def test_the_extender_is_off_the_user_facing_port_and_only_kube_scheduler_reaches_it() -> None:
    web_service = named("Service", "gpusched-web")
    assert [p["name"] for p in web_service["spec"]["ports"]] == ["http"]
    pod = named("Deployment", "gpusched-web")["spec"]["template"]["spec"]
    by_name = {c["name"]: c for c in pod["containers"]}
    web_env = {e["name"]: e.get("value") for e in by_name["web"]["env"]}
    assert web_env.get("GPUSCHED_WEB_EXTENDER") in (None, "0")
    extender_env = {e["name"]: e.get("value") for e in by_name["extender"]["env"]}
    for name in ("TLS_CERT", "TLS_KEY", "CLIENT_CA", "CLIENT_NAMES"):
        assert extender_env[f"GPUSCHED_EXTENDER_{name}"]
    assert by_name["extender"]["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    policy = named("NetworkPolicy", "gpusched-web")
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == named("Deployment", "gpusched-web")["spec"]["selector"]["matchLabels"]
    rules = {rule["ports"][0]["port"]: rule.get("from") for rule in policy["spec"]["ingress"]}
    assert set(rules) == {"http", "ext-metrics", "extender", "webhook"}
    assert rules["http"] is None  # the user-facing port: anyone
    assert rules["webhook"] is None  # kube-apiserver, from a control-plane node's address
    assert rules["ext-metrics"] == [{"namespaceSelector": {}}]  # Prometheus, in the cluster
    (peer,) = rules["extender"]  # the extender: kube-scheduler only
    assert peer["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "kube-system"
    }
    assert peer["podSelector"]["matchLabels"] == {"component": "kube-scheduler"}


def test_the_job_webhook_is_registered_as_kueues_and_reaches_the_web_process_over_tls() -> None:
    (hook,) = named("MutatingWebhookConfiguration", "gpusched-job")["webhooks"]
    assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"
    assert hook["failurePolicy"] == "Fail"
    (rule,) = hook["rules"]
    assert (rule["apiGroups"], rule["apiVersions"], rule["resources"]) == (
        ["batch"],
        ["v1"],
        ["jobs"],
    )
    assert rule["operations"] == ["CREATE"]
    assert hook["objectSelector"]["matchExpressions"] == [
        {"key": "kueue.x-k8s.io/queue-name", "operator": "Exists"}
    ]
    excluded = hook["namespaceSelector"]["matchExpressions"][0]
    assert excluded["operator"] == "NotIn" and "gpu-system" in excluded["values"]
    target = hook["clientConfig"]["service"]
    assert resolve(target["path"]).url_name == "webhook-mutate-job"
    service = named("Service", target["name"])
    assert service["metadata"]["namespace"] == target["namespace"]
    (port,) = service["spec"]["ports"]
    assert port["port"] == target["port"]
    web = named("Deployment", "gpusched-web")["spec"]["template"]["spec"]
    assert (
        service["spec"]["selector"]
        == named("Deployment", "gpusched-web")["spec"]["selector"]["matchLabels"]
    )
    webhook = {c["name"]: c for c in web["containers"]}["webhook"]
    assert port["targetPort"] in {p["name"] for p in webhook["ports"]}
    command = webhook["command"]
    assert command[:3] == ["python", "manage.py", "runweb"]
    mounts = {m["name"]: m["mountPath"] for m in webhook["volumeMounts"]}
    secrets = {v["name"]: v.get("secret", {}).get("secretName") for v in web["volumes"]}
    for flag, file in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key")):
        assert command[command.index(flag) + 1] == f"{mounts['webhook-tls']}/{file}"
    assert secrets["webhook-tls"] == "gpusched-webhook-tls"
    hosts = {e["name"]: e.get("value", "") for e in webhook["env"]}["GPUSCHED_ALLOWED_HOSTS"]
    assert f"{target['name']}.{target['namespace']}.svc" in hosts.split(",")


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    spec = workload["spec"]["template"]["spec"]
    return spec.get("initContainers", []) + spec["containers"]


def test_containers_are_non_root_with_read_only_root_filesystems() -> None:
    deployments = by_kind("Deployment")
    assert {d["metadata"]["name"] for d in deployments} == {
        "gpusched-web",
        "gpusched-scheduler",
        "gpusched-ingester",
    }
    for deployment in deployments + by_kind("Job"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] > 0
        assert not pod.get("hostNetwork") and not pod.get("hostPID")
        for container in containers(deployment):
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True, container["name"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"] for m in container.get("volumeMounts", [])}
            assert "/tmp" in mounts  # the only writable place
            assert "limits" in container["resources"]


def test_rbac_is_least_privilege() -> None:
    def rules(kind: str, name: str) -> set[tuple[str, str, str, str]]:
        found = set()
        for rule in named(kind, name)["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        names = ",".join(rule.get("resourceNames", []))
                        found.add((group, resource, verb, names))
        return found

    for _, doc in documents():
        for rule in doc.get("rules", []):
            assert "*" not in rule["verbs"] + rule["resources"] + rule["apiGroups"]
    assert rules("ClusterRole", "gpusched-scheduler") == {
        ("", "nodes", "list", ""),
        ("", "nodes", "watch", ""),
        ("", "pods", "list", ""),
        ("", "pods", "watch", ""),
        ("", "pods/binding", "create", ""),
        ("", "pods/status", "patch", ""),
        ("events.k8s.io", "events", "create", ""),
        ("topology.node.k8s.io", "noderesourcetopologies", "list", ""),
        # The one cycle's evictions, disruption budgets and gang quorums.
        ("", "pods/eviction", "create", ""),
        ("policy", "poddisruptionbudgets", "list", ""),
        ("scheduling.x-k8s.io", "podgroups", "list", ""),
        ("scheduling.volcano.sh", "podgroups", "list", ""),
        ("scheduling.k8s.io", "podgroups", "list", ""),
        # Submitted workloads made real: pods owned by one ConfigMap each.
        ("", "pods", "create", ""),
        # An admin's cancel deletes pods mirrored from the cluster; cordon, uncordon and drain
        # patch the Node's spec.unschedulable and read it back (scheduling.worker.node_actions).
        ("", "pods", "delete", ""),
        # batch/v1 Jobs run as workloads: watched, resumed and suspended (kube.jobs).
        ("batch", "jobs", "list", ""),
        ("batch", "jobs", "watch", ""),
        ("batch", "jobs", "patch", ""),
        ("batch", "jobs/status", "patch", ""),
        ("", "nodes", "get", ""),
        ("", "nodes", "patch", ""),
        ("", "configmaps", "create", ""),
        ("", "configmaps", "get", ""),
        ("", "configmaps", "delete", ""),
        # Kueue's queue objects and the PriorityClasses, listed (kube.kueue).
        ("kueue.x-k8s.io", "resourceflavors", "list", ""),
        ("kueue.x-k8s.io", "clusterqueues", "list", ""),
        ("kueue.x-k8s.io", "cohorts", "list", ""),
        ("kueue.x-k8s.io", "localqueues", "list", ""),
        ("kueue.x-k8s.io", "workloadpriorityclasses", "list", ""),
        ("scheduling.k8s.io", "priorityclasses", "list", ""),
        # DRA: devices and claims listed; claims allocated and reserved before the Binding.
        ("resource.k8s.io", "resourceslices", "list", ""),
        ("resource.k8s.io", "deviceclasses", "list", ""),
        ("resource.k8s.io", "resourceclaims", "list", ""),
        ("resource.k8s.io", "resourceclaims", "get", ""),
        ("resource.k8s.io", "resourceclaims", "update", ""),
        ("resource.k8s.io", "resourceclaims/status", "update", ""),
    }
    # Kueue's manager ConfigMap, by name, in its own namespace (optional: deploy/examples/).
    assert rules("Role", "gpusched-scheduler-kueue-config") == {
        ("", "configmaps", "get", "kueue-manager-config"),
    }
    binding = named("RoleBinding", "gpusched-scheduler-kueue-config")
    assert f"{binding['metadata']['namespace']}/kueue-manager-config" == MANAGER_CONFIG
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpusched-scheduler", "namespace": "gpu-system"}
    ]
    assert rules("Role", "gpusched-scheduler-lease") == {
        ("coordination.k8s.io", "leases", "create", ""),
        ("coordination.k8s.io", "leases", "get", "gpusched-scheduler"),
        ("coordination.k8s.io", "leases", "update", "gpusched-scheduler"),
    }
    assert rules("ClusterRole", "gpusched-extender") == {
        ("", "pods", "get", ""),
        ("", "pods/binding", "create", ""),
    }
    ingester = named("Deployment", "gpusched-ingester")["spec"]["template"]["spec"]
    assert ingester["automountServiceAccountToken"] is False
    # Each workload runs under its own account, and the lease name matches the command's default.
    accounts = {
        d["metadata"]["name"]: d["spec"]["template"]["spec"]["serviceAccountName"]
        for d in by_kind("Deployment")
    }
    assert accounts == {
        "gpusched-web": "gpusched-web",
        "gpusched-scheduler": "gpusched-scheduler",
        "gpusched-ingester": "gpusched-ingester",
    }
    assert LEASE_NAME == "gpusched-scheduler"


def test_the_shipped_profile_is_the_default_gpusched_profile() -> None:
    (shipped,) = load_profiles(shipped_profile_text())
    (default,) = load_profiles((DEPLOY.parent / "scheduling/profiles/gpusched.yaml").read_text())
    assert shipped == default
    enabled = {point: [p.name for p in shipped.enabled(point)] for point in EXTENSION_POINTS}
    assert {"GPUTopology", "LoadAware", "Fragmentation"} <= set(enabled["score"])
    assert "DefaultPreemption" in enabled["postFilter"] and "Coscheduling" in enabled["permit"]


def test_the_example_pod_is_for_the_profile_and_asks_a_numa_local_gpu_set() -> None:
    (example,) = [d for p, d in documents() if p == "examples/gpu-pod.yaml"]
    info = pod_info(example)
    (shipped,) = load_profiles(shipped_profile_text())
    assert info.scheduler_name == shipped.scheduler_name
    request = info.request()
    assert request.gpus == 4 and request.topology_policy == "single-numa-node"
    assert request.cpu_milli == 16_000 and request.memory_mib == 128 * 1024


def test_the_kustomizations_list_every_manifest_but_the_extras() -> None:
    for folder, extras in (
        (DEPLOY, {"kube-scheduler-extender.yaml"}),
        (DEPLOY / "monitoring", set()),
    ):
        kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
        listed = set(kustomization["resources"])
        shipped = {p.name for p in folder.glob("*.yaml")} - {"kustomization.yaml"}
        assert shipped - listed == extras, folder
        assert listed <= shipped, folder


@pytest.mark.parametrize("folder", [DEPLOY, DEPLOY / "monitoring"], ids=["deploy", "monitoring"])
def test_kubectl_kustomize_builds_every_listed_object(folder: Path) -> None:
    kubectl = installed("kubectl", package="kubernetes-client")
    result = subprocess.run(
        [kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    built = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(result.stdout) if d}
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    listed = {
        (d["kind"], d["metadata"]["name"])
        for name in kustomization["resources"]
        for d in yaml.safe_load_all((folder / name).read_text())
        if d
    }
    assert built == listed


def test_the_seeds_example_pod_names_no_policy_and_is_for_the_seeds_profile() -> None:
    (example,) = [d for p, d in documents() if p == "examples/seed-pod.yaml"]
    info = pod_info(example)
    (seeds,) = load_profiles(seeds_profile_text())
    assert info.scheduler_name == seeds.scheduler_name
    assert info.annotations == {"scheduling.k8s.io/group-name": "llama-ft"}  # Volcano's group
    request = info.request()
    assert request.gpus == 4 and request.topology_policy is None  # the profile's default holds


def test_the_topology_agent_runs_on_gpu_nodes_with_exactly_its_rbac() -> None:
    (daemonset,) = by_kind("DaemonSet")
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"][:4] == ["python", "manage.py", "topologyagent", "--loop"]
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "nvidia.com/gpu" not in str(container["resources"])  # it holds no GPU
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True and context["capabilities"]["drop"] == ["ALL"]

    def rules(kind: str, name: str) -> set[tuple[str, str, str]]:
        return {
            (group, resource, verb)
            for rule in named(kind, name)["rules"]
            for group in rule["apiGroups"]
            for resource in rule["resources"]
            for verb in rule["verbs"]
        }

    assert pod["serviceAccountName"] == "gpusched-topology-agent"
    assert rules("ClusterRole", "gpusched-topology-agent") == {
        ("", "nodes", "get"),
        ("", "nodes", "patch"),
    }
    events = named("Role", "gpusched-topology-agent-events")
    assert events["metadata"]["namespace"] == "default"  # where events about Nodes go
    assert rules("Role", "gpusched-topology-agent-events") == {
        ("events.k8s.io", "events", "create")
    }
    policy = named("ValidatingAdmissionPolicy", "gpusched-topology-agent-own-node")
    assert (
        "gpu-system:gpusched-topology-agent" in policy["spec"]["matchConditions"][0]["expression"]
    )


def test_deploy_runs_the_product_alone() -> None:
    """No container of deploy/ runs a command of the harness (sim, bench) or turns it on."""
    owner = get_commands()
    for workload in by_kind("Deployment") + by_kind("Job") + by_kind("DaemonSet"):
        for container in containers(workload):
            argv = [*container.get("command", []), *container.get("args", [])]
            if "manage.py" in argv:
                command = argv[argv.index("manage.py") + 1]
                assert owner[command] not in HARNESS, (workload["metadata"]["name"], command)
            names = {e["name"] for e in container.get("env", [])}
            assert "GPUSCHED_HARNESS" not in names, workload["metadata"]["name"]
