"""The Kubernetes launcher through the official client, its HTTP answered from files: the worker pool's
StatefulSet as the API server returns it (the chart's rendered pool, with the fields the server adds) and
the server's Status objects for a missing, an existing and a forbidden pod (tests/unit/kubernetes_responses;
written in the API's shapes from its reference, as no API server is reachable here to record them). Each
test checks the requests the client sent: method, path, body. A live cluster: `test_kubernetes_live`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import RESTResponse

from services import kubernetes_machines
from services.kubernetes_machines import KubernetesWorkerLauncher, pod_for, pod_name
from shared.settings import Settings

RESPONSES = Path(__file__).parent / "kubernetes_responses"
POOL = "meridian-worker-cpu"


class _Answer:
    """What urllib3 hands the client: a status, a reason, a body and headers."""

    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.reason, self.data = status, {200: "OK", 201: "Created"}.get(status, "Error"), body
        self.headers = {"Content-Type": "application/json"}


class Server:
    """Answers each request from a route table, (method, path) -> (status, body) or a function of the request's
    body giving them, and keeps the requests."""

    def __init__(self, routes: dict) -> None:
        self.routes, self.requests = routes, []

    def __call__(self, method, url, headers=None, body=None, post_params=None, _request_timeout=None):
        path = "/" + url.split("://", 1)[1].split("/", 1)[1].split("?")[0]
        self.requests.append((method, path, body))
        route = self.routes[method, path]
        status, data = route(body) if callable(route) else route
        return RESTResponse(_Answer(status, data))


def launcher(server: Server, monkeypatch: pytest.MonkeyPatch) -> tuple[KubernetesWorkerLauncher, list[str]]:
    made_topics: list[str] = []
    monkeypatch.setattr(kubernetes_machines, "ensure_topics_exist",
                        lambda settings, specs: made_topics.extend(s.name for s in specs))
    api = k8s.ApiClient(k8s.Configuration(host="https://kubernetes.test"))
    api.rest_client.request = server
    return KubernetesWorkerLauncher(api, Settings(), namespace="serving", pools={"cpu-1t": POOL}), made_topics


def file(name: str) -> bytes:
    return (RESPONSES / name).read_bytes()


def test_a_worker_is_started_as_a_pod_of_its_pools_template_and_stopped_by_deleting_it(monkeypatch) -> None:
    pool_path = f"/apis/apps/v1/namespaces/serving/statefulsets/{POOL}"
    pods = "/api/v1/namespaces/serving/pods"
    pod = f"{pods}/meridian-as-cpu-1t-0"
    server = Server({("GET", pool_path): (200, file("statefulset-worker-cpu.json")),
                     ("POST", pods): lambda body: (201, json.dumps({**body, "status": {"phase": "Pending"}}).encode()),
                     ("DELETE", pod): (200, json.dumps({"kind": "Pod", "apiVersion": "v1",
                                                        "metadata": {"name": "meridian-as-cpu-1t-0"}}).encode())})
    workers, made_topics = launcher(server, monkeypatch)
    workers.start("as-cpu-1t-0", "cpu-1t", ["digits-mlp-s", "digits-cnn-s"])
    assert made_topics == ["meridian.dispatch.as-cpu-1t-0"]
    assert [(m, p) for m, p, _ in server.requests] == [("GET", pool_path), ("POST", pods)]
    created = server.requests[1][2]
    (container,) = created["spec"]["containers"]
    assert container["command"] == ["python", "-m", "services.worker", "--worker-id", "as-cpu-1t-0", "--metrics-port",
                                    "9102", "--variants", "digits-mlp-s,digits-cnn-s", "--threads", "1"]
    assert created["metadata"]["name"] == "meridian-as-cpu-1t-0"
    (owner,) = created["metadata"]["ownerReferences"]  # uninstalling the release removes it too
    assert (owner["kind"], owner["name"], owner["controller"]) == ("StatefulSet", POOL, False)
    labels = created["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == "worker-cpu-autoscaled"  # the StatefulSet never adopts it
    assert labels["app.kubernetes.io/instance"] == "meridian"
    assert {e["name"] for e in container["env"]} >= {"MERIDIAN_KAFKA_BOOTSTRAP", "MERIDIAN_KAFKA_SASL_PASSWORD"}
    workers.stop("as-cpu-1t-0")
    assert server.requests[-1][:2] == ("DELETE", pod)


def test_a_pod_there_already_or_gone_already_is_no_error_and_a_refusal_is(monkeypatch) -> None:
    pods = "/api/v1/namespaces/serving/pods"
    there: dict = {}
    server = Server({("GET", f"/apis/apps/v1/namespaces/serving/statefulsets/{POOL}"):
                     (200, file("statefulset-worker-cpu.json")),
                     ("POST", pods): lambda body: (there.update(body) or 409, file("status-409.json")),
                     ("GET", f"{pods}/meridian-as-cpu-1t-0"): lambda body: (200, json.dumps(there).encode()),
                     ("DELETE", f"{pods}/meridian-as-cpu-1t-9"): (404, file("status-404.json"))})
    workers, _ = launcher(server, monkeypatch)
    workers.start("as-cpu-1t-0", "cpu-1t", ["digits-mlp-s"])  # 409, and the pod there is this worker's
    workers.stop("as-cpu-1t-9")  # 404: gone already
    server.routes["POST", pods] = (409, file("status-409.json"))  # the pod there runs other variants
    with pytest.raises(RuntimeError, match="exists and runs"):
        workers.start("as-cpu-1t-0", "cpu-1t", ["digits-cnn-l"])
    server.routes["POST", pods] = (403, file("status-403.json"))
    with pytest.raises(k8s.ApiException, match="Forbidden"):
        workers.start("as-cpu-1t-1", "cpu-1t", ["digits-mlp-s"])
    with pytest.raises(ValueError, match="no worker pool for device 'g4dn-emu'"):
        workers.start("as-g4dn-emu-0", "g4dn-emu", ["efficientnet-lite0"])


def test_a_pod_name_is_dns_1123_and_a_template_without_the_flags_is_refused() -> None:
    assert pod_name("prod", "AS_cpu.1t-0") == "prod-as-cpu-1t-0"
    assert len(pod_name("prod", "w" * 100)) == 63
    template = k8s.V1PodTemplateSpec(metadata=k8s.V1ObjectMeta(labels={}), spec=k8s.V1PodSpec(
        containers=[k8s.V1Container(name="worker", command=["python", "-m", "services.worker"])]))
    pool = k8s.V1StatefulSet(metadata=k8s.V1ObjectMeta(name="p", uid="u"), spec=k8s.V1StatefulSetSpec(
        selector=k8s.V1LabelSelector(), service_name="p", template=template))
    with pytest.raises(ValueError, match="has no --worker-id"):
        pod_for("w", ["v"], pool)
