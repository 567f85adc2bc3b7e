"""What machine a real worker computes on: its execution provider, the processor's or GPU's name, its
threads, the device key it is scheduled under, and the price it is billed at.

The key is what profiles, plans and results name a device by. A CPU given ``n`` intra-op threads is
``cpu-<n>t`` (the committed profiles' name for one measured here); a GPU is ``gpu-`` and its name in
lower case (``NVIDIA H200`` -> ``gpu-nvidia-h200``), so two kinds of GPU are two devices. A worker may be
told its key instead (``--device``), e.g. to stand for a cloud instance type its price table names.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
from collections.abc import Mapping

from schemas import MachineDescription
from shared.onnx_runtime import CPU_PROVIDER, CUDA_PROVIDER
from shared.profiles import DeviceType

logger = logging.getLogger(__name__)

#: what ``nvidia-smi`` may take to answer before the GPU is described by its provider alone
NVIDIA_SMI_TIMEOUT_S = 10.0


def describe_machine(provider: str, threads: int) -> MachineDescription:
    """The machine a session on ``provider`` with ``threads`` intra-op threads runs on, as found here."""
    if provider == CUDA_PROVIDER:
        name, memory_mb = _gpu_name_and_memory()
        return MachineDescription(provider=provider, name=name, threads=threads, memory_mb=memory_mb)
    if provider != CPU_PROVIDER:
        raise ValueError(f"`provider` must be {CPU_PROVIDER!r} or {CUDA_PROVIDER!r}, got {provider!r}")
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if threads > usable:
        logger.warning("%d intra-op threads asked for, but this process may use %d CPUs", threads, usable)
    return MachineDescription(provider=provider, name=_cpu_name(), threads=threads)


def device_key(machine: MachineDescription) -> str:
    """``cpu-<threads>t`` for the CPU, ``gpu-<name>`` for a GPU (see the module's docstring)."""
    if machine.provider == CPU_PROVIDER:
        return f"cpu-{machine.threads}t"
    return "gpu-" + (re.sub(r"[^a-z0-9]+", "-", machine.name.lower()).strip("-") or "cuda")


def device_price(key: str, configured: Mapping[str, float], known: Mapping[str, DeviceType]) -> float:
    """The $/h a device is billed at: the configured price table's, else its committed profiles', else 0
    with a warning (an unknown machine is served, and billed at nothing until it is given a price)."""
    if key in configured:
        return configured[key]
    if key in known:
        return known[key].price_per_hour
    logger.warning("device %r has no price (MERIDIAN_DEVICE_PRICES names none, no profile either): billed at 0",
                   key)
    return 0.0


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()[:200] or "CPU"
    except OSError:
        pass
    import platform

    return (platform.processor() or platform.machine() or "CPU")[:200]


def _visible_gpu() -> list[str]:
    """``nvidia-smi``'s option for the GPU onnxruntime computes on: the first of ``CUDA_VISIBLE_DEVICES``."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    return [f"--id={visible}"] if visible else []


def gpu_memory_used_mb() -> float | None:
    """The GPU's memory in use now (MiB, all processes), from ``nvidia-smi``; None without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, *_visible_gpu(), "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout
        return float(out.splitlines()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def _gpu_name_and_memory() -> tuple[str, int | None]:
    """The GPU's name and memory (MiB) from ``nvidia-smi``; ``("CUDA GPU", None)`` without it."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return "CUDA GPU", None
    try:
        out = subprocess.run([smi, *_visible_gpu(), "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout
        name, memory = (part.strip() for part in out.splitlines()[0].split(","))
        return name[:200] or "CUDA GPU", int(float(memory))
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return "CUDA GPU", None
