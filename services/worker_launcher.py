"""How planners and autoscalers get machines: start a worker of a device type, stop it.

`WorkerLauncher` is the interface a cloud or Kubernetes launcher would implement; `LocalWorkerLauncher`
runs workers as local processes. A device this machine has runs a real onnxruntime worker; any other
device is emulated from its measured profile (the worker says so in its results and metrics).
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Protocol

from services.launcher import LocalLauncher
from shared.profiles.sources import load_profile_source
from shared.settings import Settings


class WorkerLauncher(Protocol):
    def start(self, worker_id: str, device: str, variants: Sequence[str]) -> None: ...

    def stop(self, worker_id: str) -> None: ...


class LocalWorkerLauncher:
    def __init__(self, launcher: LocalLauncher, settings: Settings, *, metrics_port_base: int) -> None:
        self.launcher = launcher
        self.settings = settings
        self._ports = itertools.count(metrics_port_base)
        self.device_source = {device: source for source in settings.profile_sources
                              for device in load_profile_source(source, settings).device_by_name}

    def start(self, worker_id: str, device: str, variants: Sequence[str]) -> None:
        emulate = None if device == self.settings.local_device else device
        self.launcher.start_worker(worker_id, variants=list(variants), metrics_port=next(self._ports),
                                   emulate=emulate, profile_source=self.device_source.get(device, "dir"))

    def stop(self, worker_id: str) -> None:
        self.launcher.stop(f"worker-{worker_id}")
