"""How planners and autoscalers get machines: start a worker of a device type, stop it.

`WorkerLauncher` is the interface; `LocalWorkerLauncher` runs workers as local processes,
`services.kubernetes_machines.KubernetesWorkerLauncher` as pods of a cluster (`worker_launcher` picks by
``MERIDIAN_AUTOSCALER_LAUNCHER``). A device this machine has runs a real onnxruntime worker; any other
device is emulated from its measured profile (the worker says so in its results and metrics), its boot
included: an emulated worker serves no sooner than its profile's ``startup_s`` after it was asked for. A
worker's dispatch topic exists once `start` returns, so commands sent to a booting worker wait there for it
(a producer sending to a topic not yet created would block until it is).
"""
from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from typing import Protocol

from services.launcher import LocalLauncher
from shared.adapters import topics
from shared.adapters.kafka_io import ensure_topics_exist
from shared.profiles.sources import load_profile_source
from shared.settings import Settings


class WorkerLauncher(Protocol):
    def start(self, worker_id: str, device: str, variants: Sequence[str]) -> None:
        """Ask for a worker; its dispatch topic exists on return, the worker itself joins when booted."""

    def stop(self, worker_id: str) -> None: ...


class LocalWorkerLauncher:
    def __init__(self, launcher: LocalLauncher, settings: Settings, *, metrics_port_base: int) -> None:
        self.launcher = launcher
        self.settings = settings
        self._ports = itertools.count(metrics_port_base)
        self.device_source: dict[str, str] = {}
        self._startup_s: dict[str, float] = {}
        for source in settings.profile_sources:
            for device, device_type in load_profile_source(source, settings).device_by_name.items():
                self.device_source[device] = source
                self._startup_s[device] = device_type.startup_s or 0.0

    def start(self, worker_id: str, device: str, variants: Sequence[str]) -> None:
        ensure_topics_exist(self.settings, [topics.TopicSpec(topics.dispatch_topic(worker_id), 1)])
        emulate = None if device == self.settings.local_device else device
        ready_at = time.time() + self._startup_s.get(device, 0.0) if emulate else None
        self.launcher.start_worker(worker_id, variants=list(variants), metrics_port=next(self._ports),
                                   emulate=emulate, profile_source=self.device_source.get(device, "dir"),
                                   ready_at=ready_at)

    def stop(self, worker_id: str) -> None:
        self.launcher.stop(f"worker-{worker_id}")


def worker_launcher(settings: Settings, launcher: LocalLauncher, *, metrics_port_base: int) -> WorkerLauncher:
    """The autoscaler's machines: local processes through ``launcher``, or pods (``autoscaler_launcher``)."""
    if settings.autoscaler_launcher == "kubernetes":
        from services.kubernetes_machines import KubernetesWorkerLauncher

        return KubernetesWorkerLauncher.from_settings(settings)
    return LocalWorkerLauncher(launcher, settings, metrics_port_base=metrics_port_base)
