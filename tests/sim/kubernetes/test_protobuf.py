"""Content negotiation: protobuf request bodies read as the API server reads them, YAML bodies,
415 for what a resource takes no body in, 406 for an answer the server cannot write.

The bodies below are what kubectl v1.32.4 (linux/amd64) sent to the simulated API server for
these commands, recorded from its requests (Content-Type application/vnd.kubernetes.protobuf):

    kubectl create namespace team
    kubectl create configmap settings -n team --from-literal=lr=0.001 --from-file=blob=<16 bytes
        0x00 0x11 ... 0xff>
    kubectl create priorityclass training --value=1000 --description=batch
        --preemption-policy=Never
    kubectl create poddisruptionbudget web -n team --selector=app=web --max-unavailable=1
    kubectl create job pi -n team --image=perl:5.34 -- perl -Mbignum=bpi -wle 'print bpi(20)'
"""

from __future__ import annotations

import base64

import pytest

from sim.kubernetes import protobuf
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import raw

PROTOBUF = "application/vnd.kubernetes.protobuf"
NAMESPACE = bytes.fromhex(
    "6b3873000a0f0a02763112094e616d657370616365121c0a140a047465616d12001a0022002a003200380042"
    "0012001a020a001a002200"
)
CONFIGMAP = bytes.fromhex(
    "6b3873000a0f0a0276311209436f6e6669674d617012450a1c0a0873657474696e677312001a047465616d22"
    "002a00320038004200120b0a026c721205302e3030311a180a04626c6f62121000112233445566778899aabb"
    "ccddeeff1a002200"
)
PRIORITYCLASS = bytes.fromhex(
    "6b3873000a250a147363686564756c696e672e6b38732e696f2f7631120d5072696f72697479436c61737312"
    "2d0a180a08747261696e696e6712001a0022002a0032003800420010e8071800220562617463682a054e6576"
    "65721a002200"
)
PDB = bytes.fromhex(
    "6b3873000a200a09706f6c6963792f76311213506f6444697372757074696f6e427564676574123d0a170a03"
    "77656212001a047465616d22002a003200380042001216120c0a0a0a0361707012037765621a06080010011a"
    "001a0a080018002000280030001a002200"
)
JOB = bytes.fromhex(
    "6b3873000a0f0a0862617463682f763112034a6f6212ab010a160a02706912001a047465616d22002a003200"
    "380042001286013283010a100a0012001a0022002a00320038004200126f124c0a02706912097065726c3a35"
    "2e33341a047065726c1a0c2d4d6269676e756d3d6270691a042d776c651a0d7072696e742062706928323029"
    "2a0042006a007200800100880100900100a201001a054e65766572320042004a005200580060006800820100"
    "8a01009a0100c201001a082000280030003a001a002200"
)


def test_kubectls_bodies_decode_to_the_objects_it_meant() -> None:
    assert protobuf.decode(NAMESPACE) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "team"},
        "spec": {},
        "status": {},
    }
    configmap = protobuf.decode(CONFIGMAP)
    assert configmap["metadata"] == {"name": "settings", "namespace": "team"}
    assert configmap["data"] == {"lr": "0.001"}
    assert base64.b64decode(configmap["binaryData"]["blob"]) == bytes(range(0, 256, 17))
    assert protobuf.decode(PRIORITYCLASS) == {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": "training"},
        "value": 1000,
        "description": "batch",
        "preemptionPolicy": "Never",
    }
    pdb = protobuf.decode(PDB)
    assert pdb["spec"] == {"selector": {"matchLabels": {"app": "web"}}, "maxUnavailable": 1}
    job = protobuf.decode(JOB)
    assert job["apiVersion"] == "batch/v1" and job["spec"].keys() == {"template"}
    pod_spec = job["spec"]["template"]["spec"]
    assert pod_spec == {
        "containers": [
            {
                "name": "pi",
                "image": "perl:5.34",
                "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(20)"],
                "resources": {},
            }
        ],
        "restartPolicy": "Never",
    }


@pytest.mark.parametrize(
    ("path", "body", "key", "name"),
    [
        ("/api/v1/namespaces", NAMESPACE, "namespaces", "team"),
        ("/api/v1/namespaces/team/configmaps", CONFIGMAP, "configmaps", "settings"),
        ("/apis/scheduling.k8s.io/v1/priorityclasses", PRIORITYCLASS, "priorityclasses",
         "training"),
        ("/apis/policy/v1/namespaces/team/poddisruptionbudgets", PDB, "poddisruptionbudgets",
         "web"),
        ("/apis/batch/v1/namespaces/team/jobs", JOB, "jobs", "pi"),
    ],
)  # fmt: skip
def test_protobuf_bodies_create_what_json_would(
    kube: SimulatedKubernetes, path: str, body: bytes, key: str, name: str
) -> None:
    if key != "namespaces":
        kube.add_namespace("team")
    code, doc = raw(kube, "POST", path, body, content_type=PROTOBUF)
    assert code == 201, doc
    assert doc["metadata"]["name"] == name
    stored = kube.get_object(
        key, "team" if key not in ("namespaces", "priorityclasses") else "", name
    )
    assert stored["metadata"]["uid"] == doc["metadata"]["uid"]


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (numbers and lengths below 128)."""
    return bytes([number << 3 | 2, len(payload)]) + payload


def _envelope(api_version: str, kind: str, raw_object: bytes) -> bytes:
    type_meta = _field(1, api_version.encode()) + _field(2, kind.encode())
    return protobuf.MAGIC + _field(1, type_meta) + _field(2, raw_object)


def test_a_field_the_server_does_not_read_is_refused_by_its_path(
    kube: SimulatedKubernetes,
) -> None:
    probe = _field(1, _field(1, b"/healthz"))  # httpGet.path, as a Probe carries it
    container = _field(1, b"main") + _field(2, b"x") + _field(10, probe)  # livenessProbe = 10
    pod = _field(1, _field(1, b"p")) + _field(2, _field(2, container))
    code, doc = raw(
        kube, "POST", "/api/v1/namespaces/ml-team/pods", _envelope("v1", "Pod", pod),
        content_type=PROTOBUF,
    )  # fmt: skip
    assert (code, doc["reason"]) == (415, "UnsupportedMediaType")
    assert doc["message"].startswith(
        "the simulated API server does not read spec.containers[0].livenessProbe from a "
        "protobuf body"
    )
    assert kube.objects("pods", "ml-team") == []
    empty_probe = _field(1, b"main") + _field(2, b"x") + _field(10, b"")  # present, empty
    pod = _field(1, _field(1, b"p")) + _field(2, _field(2, empty_probe))
    code, doc = raw(
        kube, "POST", "/api/v1/namespaces/ml-team/pods", _envelope("v1", "Pod", pod),
        content_type=PROTOBUF,
    )  # fmt: skip
    assert code == 201 and doc["spec"]["containers"][0] == {
        "name": "main", "image": "x", "resources": {}
    }  # fmt: skip


def test_bodies_a_resource_does_not_take(kube: SimulatedKubernetes) -> None:
    flavor = _envelope("kueue.x-k8s.io/v1beta2", "ResourceFlavor", _field(1, _field(1, b"h")))
    code, doc = raw(
        kube, "POST", "/apis/kueue.x-k8s.io/v1beta2/resourceflavors", flavor,
        content_type=PROTOBUF,
    )  # fmt: skip
    assert (code, doc["message"]) == (
        415,
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json, application/yaml",
    )
    code, doc = raw(kube, "POST", "/api/v1/namespaces", b"name: x", content_type="text/plain")
    assert code == 415 and doc["message"].endswith(
        "application/json, application/yaml, application/vnd.kubernetes.protobuf"
    )
    code, doc = raw(kube, "POST", "/api/v1/namespaces", b"{}", content_type=PROTOBUF)
    assert (code, doc["reason"]) == (400, "BadRequest")
    assert doc["message"].startswith("provided data does not appear to be a protobuf message")


def test_yaml_bodies_and_what_the_client_accepts(kube: SimulatedKubernetes) -> None:
    yaml_body = b"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: from-yaml\n"
    code, doc = raw(kube, "POST", "/api/v1/namespaces", yaml_body, content_type="application/yaml")
    assert code == 201 and doc["metadata"]["name"] == "from-yaml"
    accept = f"{PROTOBUF}, application/json"  # client-go's typed clients
    code, doc = raw(kube, "GET", "/api/v1/namespaces/from-yaml", accept=accept)
    assert code == 200 and doc["kind"] == "Namespace"
    code, doc = raw(kube, "GET", "/api/v1/namespaces/from-yaml", accept=PROTOBUF)
    assert (code, doc["reason"]) == (406, "NotAcceptable")
    assert doc["message"] == "only the following media types are accepted: application/json"


def test_a_protobuf_binding_binds(kube: SimulatedKubernetes) -> None:
    """kube-scheduler binds through client-go's typed client, in protobuf."""
    kube.add_pod({"metadata": {"name": "p", "namespace": "ml-team"},
                  "spec": {"containers": [{"name": "main", "image": "x"}]}})  # fmt: skip
    target = _field(1, b"Node") + _field(3, b"h100-0000")
    binding = _field(1, _field(1, b"p") + _field(3, b"ml-team")) + _field(2, target)
    code, doc = raw(
        kube, "POST", "/api/v1/namespaces/ml-team/pods/p/binding",
        _envelope("v1", "Binding", binding), content_type=PROTOBUF,
    )  # fmt: skip
    assert (code, doc["status"]) == (201, "Success")
    assert kube.pod("ml-team", "p")["spec"]["nodeName"] == "h100-0000"
