"""The Kubernetes launcher against a real API server, where one is reachable: a worker started as a pod of
its pool's template appears, and is gone once stopped. Skipped, with the reason, where none is (this
project's machine has none). Point it at a cluster with a kubeconfig and MERIDIAN_TEST_KUBERNETES_NAMESPACE,
_POOL (a worker pool's StatefulSet, as the Helm chart makes it) and _DEVICE."""
from __future__ import annotations

import os
import time

import pytest

from services.kubernetes_machines import KubernetesWorkerLauncher, pod_name

pytestmark = pytest.mark.integration
NEEDED = ("MERIDIAN_TEST_KUBERNETES_NAMESPACE", "MERIDIAN_TEST_KUBERNETES_POOL", "MERIDIAN_TEST_KUBERNETES_DEVICE")


@pytest.fixture
def workers(settings) -> KubernetesWorkerLauncher:
    missing = [name for name in NEEDED if not os.environ.get(name)]
    if missing:
        pytest.skip(f"no Kubernetes API server to test against: {', '.join(missing)} not set")
    from kubernetes import client as k8s, config

    try:
        config.load_kube_config()
    except config.ConfigException as exc:
        pytest.skip(f"no Kubernetes API server to test against: {exc}")
    return KubernetesWorkerLauncher(k8s.ApiClient(), settings, namespace=os.environ[NEEDED[0]],
                                    pools={os.environ[NEEDED[2]]: os.environ[NEEDED[1]]})


def test_a_worker_pod_is_made_from_its_pool_and_deleted_on_stop(workers: KubernetesWorkerLauncher) -> None:
    from kubernetes import client as k8s

    core, namespace, worker = k8s.CoreV1Api(), os.environ[NEEDED[0]], f"it-{int(time.time())}"
    pool = k8s.AppsV1Api().read_namespaced_stateful_set(os.environ[NEEDED[1]], namespace)
    name = pod_name(pool.spec.template.metadata.labels["app.kubernetes.io/instance"], worker)
    workers.start(worker, os.environ[NEEDED[2]], ["digits-mlp-s"])
    pod = core.read_namespaced_pod(name, namespace)
    assert worker in pod.spec.containers[0].command
    workers.stop(worker)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            core.read_namespaced_pod(name, namespace)
        except k8s.ApiException as exc:
            assert exc.status == 404
            return
        time.sleep(1)
    pytest.fail(f"pod {name} still there 120 s after its stop")
