"""Machines as Kubernetes pods: INFaaS' autoscaler on a cluster starts a worker of a device as a pod made from
that device's worker pool (the Helm chart's StatefulSet ``<release>-worker-<pool>``: its pod template, with
the worker's id and variants in its command) and stops it by deleting the pod, through the Kubernetes API
(the official Python client). Same contract as `services.machines.LocalWorkerLauncher`.

Why pods of the pool's template and not replicas of the StatefulSet: a StatefulSet scaled down removes its
highest ordinal, while the autoscaler stops the worker it chose (the one idle longest), and it names the
workers it starts. The pods carry the pool's labels with a component of their own (``worker-<pool>``
becomes ``worker-<pool>-autoscaled``), so the StatefulSet's selector never matches them and it never
adopts or removes them; they are named for the release and the worker, owned by the pool's StatefulSet (so
uninstalling the release removes them too), and labelled ``meridian.io/autoscaled`` for the chart's Service
that makes them scrape targets.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence

from kubernetes import client as k8s

from shared.adapters import topics
from shared.adapters.kafka_io import ensure_topics_exist
from shared.settings import Settings

COMPONENT_LABEL = "app.kubernetes.io/component"
INSTANCE_LABEL = "app.kubernetes.io/instance"
#: the label of the autoscaler's pods (the chart's Service for their metrics selects it)
AUTOSCALED_LABEL = "meridian.io/autoscaled"


def pod_name(instance: str, worker_id: str) -> str:
    """A DNS-1123 name for ``worker_id``'s pod in release ``instance``: lower case, ``-`` for anything else,
    63 characters at most."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"{instance}-{worker_id}".lower()).strip("-")
    return name[:63].rstrip("-")


def pod_for(worker_id: str, variants: Sequence[str], pool: k8s.V1StatefulSet) -> k8s.V1Pod:
    """The pod of ``worker_id`` from a worker pool's pod template: its command names the worker and its
    variants, its labels its own component, it is named for the release and the worker, and the pool owns
    it."""
    template = pool.spec.template
    spec = copy.deepcopy(template.spec)
    (container,) = spec.containers
    command = list(container.command)
    for flag, value in (("--worker-id", worker_id), ("--variants", ",".join(variants))):
        if flag not in command:
            raise ValueError(f"the pool's command has no {flag}: {command}")
        command[command.index(flag) + 1] = value
    container.command = command
    labels = dict(template.metadata.labels or {})
    labels[COMPONENT_LABEL] = f"{labels.get(COMPONENT_LABEL, 'worker')}-autoscaled"
    labels[AUTOSCALED_LABEL] = "true"
    owner = k8s.V1OwnerReference(api_version="apps/v1", kind="StatefulSet", name=pool.metadata.name,
                                 uid=pool.metadata.uid, controller=False, block_owner_deletion=False)
    return k8s.V1Pod(api_version="v1", kind="Pod", spec=spec, metadata=k8s.V1ObjectMeta(
        name=pod_name(labels.get(INSTANCE_LABEL, "meridian"), worker_id), labels=labels, owner_references=[owner]))


class KubernetesWorkerLauncher:
    """Starts and stops workers as pods in ``namespace``; ``pools`` maps a device to its pool's StatefulSet."""

    def __init__(self, api: k8s.ApiClient, settings: Settings, *, namespace: str, pools: Mapping[str, str]) -> None:
        self._core = k8s.CoreV1Api(api)
        self._apps = k8s.AppsV1Api(api)
        self._settings = settings
        self._namespace = namespace
        self._pools = dict(pools)
        #: worker id -> its pod's name
        self._pods: dict[str, str] = {}

    @classmethod
    def from_settings(cls, settings: Settings) -> "KubernetesWorkerLauncher":
        """In a pod, with its service account's credentials (else the kubeconfig's)."""
        from kubernetes import config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return cls(k8s.ApiClient(), settings, namespace=settings.kubernetes_namespace,
                   pools=settings.kubernetes_worker_pools)

    def start(self, worker_id: str, device: str, variants: Sequence[str]) -> None:
        if device not in self._pools:
            raise ValueError(f"no worker pool for device {device!r}; MERIDIAN_KUBERNETES_WORKER_POOLS names "
                             f"{sorted(self._pools)}")
        ensure_topics_exist(self._settings, [topics.TopicSpec(topics.dispatch_topic(worker_id), 1)])
        pool = self._apps.read_namespaced_stateful_set(self._pools[device], self._namespace)
        pod = pod_for(worker_id, variants, pool)
        try:
            self._core.create_namespaced_pod(self._namespace, pod)
        except k8s.ApiException as exc:
            if exc.status != 409:
                raise
            # there already: the same worker asked for again, or a pod left by a release before (refused)
            there = self._core.read_namespaced_pod(pod.metadata.name, self._namespace)
            if there.spec.containers[0].command != pod.spec.containers[0].command:
                raise RuntimeError(f"pod {pod.metadata.name} exists and runs {there.spec.containers[0].command}, "
                                   f"not worker {worker_id!r} with {list(variants)}") from None
        self._pods[worker_id] = pod.metadata.name

    def stop(self, worker_id: str) -> None:
        name = self._pods.pop(worker_id, None) or pod_name(self._instance(), worker_id)
        try:
            self._core.delete_namespaced_pod(name, self._namespace)
        except k8s.ApiException as exc:
            if exc.status != 404:  # 404: gone already
                raise

    def _instance(self) -> str:
        """The release of the pools (a worker this launcher did not start is named as if it had)."""
        pool = self._apps.read_namespaced_stateful_set(next(iter(self._pools.values())), self._namespace)
        return (pool.spec.template.metadata.labels or {}).get(INSTANCE_LABEL, "meridian")
