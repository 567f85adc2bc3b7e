"""How a worker runs a batch: for real with onnxruntime, or by replaying a device's measured profile.

A real executor first prepares each query's input alone (`prepare`): a numeric tensor as it is, encoded
images decoded and prepared as the variant's profile says (`shared.imaging`), so a query whose input is
bad is answered ``error`` alone and the rest of its batch runs. It finds out what machine it runs on
(`shared.device_identity`) and measures its variants there (`self_measure`); on a GPU, the variants it
holds are bounded by the GPU's memory (`shared.device_memory`)."""
from __future__ import annotations

import contextlib
import logging
import time
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from schemas import MachineDescription, MeasuredLatency
from services.worker.self_measure import MeasurementCache, describe, measure_session, model_digest
from shared import imaging
from shared.device_identity import describe_machine, device_key, gpu_memory_used_mb
from shared.device_memory import DeviceMemory, DeviceMemoryFull, footprint_mb
from shared.profiles import ImagePreprocessing, ProfileSet
from shared.serving.service_time import ProfileServiceTime
from shared.tensors import QueryInputs, to_array, to_elements


class ExecutionError(Exception):
    """The batch could not run; every query in it gets an ``error`` result with this reason."""


logger = logging.getLogger(__name__)


class Executor(ABC):
    #: the device type this executor stands for (a profile key)
    device: str
    emulated: bool
    #: the machine a real executor computes on (None when emulating one)
    machine: MachineDescription | None = None

    @abstractmethod
    def load(self, variant: str, *, measure: bool = False) -> float:
        """Load ``variant`` and return the loading latency in ms; ``measure``: measure it on this machine
        unless it was measured here before."""

    def measured(self) -> dict[str, MeasuredLatency]:
        """Loaded variant -> its latency measured on this machine (empty when emulating)."""
        return {}

    @abstractmethod
    def unload(self, variant: str) -> None: ...

    @abstractmethod
    def loaded(self) -> list[str]: ...

    @abstractmethod
    def prepare(self, variant: str, inputs: QueryInputs) -> np.ndarray | None:
        """One query's input as ``variant``'s model takes it (``None`` when emulating); `ExecutionError`
        with the reason when it cannot be."""

    @abstractmethod
    def run(self, variant: str, inputs: np.ndarray | None, rows: int) -> np.ndarray | None:
        """Run one batch; return its outputs (``None`` when emulating)."""


class OnnxExecutor(Executor):
    """Real inference with onnxruntime on the best provider that runs here (CUDA where it really works,
    else the CPU with ``threads`` intra-op threads: one is fastest on a shared 2-core box), or on the one
    ``provider`` names.

    Its device key is derived from the machine it finds (``cpu-<threads>t``, ``gpu-<name>``) unless
    ``device`` names one. With a `MeasurementCache`, a variant loaded with ``measure`` is measured here
    (once: later loads, and other workers of this machine, read the cache), and any variant loaded is
    announced by the latency the cache holds for it. On a GPU whose memory is known, the variants loaded
    hold at most ``gpu_memory_share`` of it.
    """

    emulated = False

    def __init__(self, models_dir: Path, *, threads: int = 1, device: str | None = None, provider: str | None = None,
                 images: dict[str, ImagePreprocessing] | None = None, cache: MeasurementCache | None = None,
                 max_batch: int = 64, gpu_memory_share: float = 0.9) -> None:
        # what loading a variant imports (onnx reads its recorded optimization level, ~0.9 s to import),
        # imported now, at the worker's start, not inside the first load a waiting query pays for
        import onnx  # noqa: F401

        from shared.onnx_runtime import CUDA_PROVIDER, usable_providers
        if provider is not None and provider not in usable_providers():
            raise ExecutionError(f"provider {provider} does not run here; usable: {', '.join(usable_providers())}")
        self._provider = provider or usable_providers()[0]
        self._threads = threads
        self.machine = describe_machine(self._provider, threads)
        self.device = device or device_key(self.machine)
        self._memory = (DeviceMemory(gpu_memory_share * self.machine.memory_mb)
                        if self._provider == CUDA_PROVIDER and self.machine.memory_mb else None)
        self._models_dir = Path(models_dir)
        self._sessions: dict[str, object] = {}
        #: variant -> how its model takes encoded images (from its profile)
        self._images = images or {}
        self._cache = cache
        self._max_batch = max_batch
        self._measured: dict[str, MeasuredLatency] = {}

    def load(self, variant: str, *, measure: bool = False) -> float:
        path = self._models_dir / f"{variant}.onnx"
        if not path.is_file():
            raise ExecutionError(f"no model file for variant {variant!r} at {path}")
        digest = model_digest(path) if self._cache is not None else ""
        known = self._cache.get(self.device, self.machine, variant, digest) if self._cache is not None else None
        if self._memory is not None:
            try:
                self._memory.reserve(variant, footprint_mb(known, path.stat().st_size))
            except DeviceMemoryFull as exc:
                raise ExecutionError(str(exc)) from None
        measuring = known is None and measure and self._cache is not None
        # Workers of one machine measure one at a time, loading included: on a GPU, what the session holds is
        # the GPU's used memory before the load and after the measurement, which another's load would swell.
        with self._cache.alone() if measuring else contextlib.nullcontext():
            if measuring:
                known = self._cache.get(self.device, self.machine, variant, digest)  # measured while we waited?
                measuring = known is None
            used_before_mb = gpu_memory_used_mb() if measuring and self._memory is not None else None
            session, load_ms = self._open(path, variant)
            found = self._measure(variant, digest, session, load_ms, used_before_mb) if measuring else known
        if found is not None:
            self._measured[variant] = found
            if self._memory is not None:
                self._memory.update(variant, footprint_mb(found, path.stat().st_size))
        return load_ms

    def _open(self, path: Path, variant: str) -> tuple[object, float]:
        """``variant``'s session, kept, and the ms it took to make (`ExecutionError` if it cannot be)."""
        from shared.modelzoo.variants import optimization_level_of
        from shared.onnx_runtime import make_session

        started = time.perf_counter()
        try:
            session = make_session(path, optimization_level=optimization_level_of(path), provider=self._provider,
                                   intra_op_threads=self._threads)
        except Exception as exc:  # onnxruntime raises its own types for a model it cannot load
            if self._memory is not None and variant not in self._sessions:
                self._memory.release(variant)
            raise ExecutionError(f"cannot load {path.name}: {exc}"[:500]) from None
        self._sessions[variant] = session
        return session, (time.perf_counter() - started) * 1000.0

    def _measure(self, variant: str, digest: str, session: object, load_ms: float,
                 used_before_mb: float | None) -> MeasuredLatency:
        """Measure ``variant``'s session here and cache it (the caller holds the cache's lock)."""
        began = time.perf_counter()
        found = measure_session(session, max_batch=self._max_batch, load_ms=load_ms, images=self._images.get(variant))
        used_after_mb = gpu_memory_used_mb() if used_before_mb is not None else None
        if used_after_mb is not None and used_after_mb > used_before_mb:  # else: not measured (freed meanwhile)
            found = found.model_copy(update={"device_memory_mb": used_after_mb - used_before_mb})
        self._cache.put(self.device, self.machine, variant, digest, found)
        logger.info("measured %s on %s (%s) in %.1f s: %s", variant, self.device, self.machine.name,
                    time.perf_counter() - began, describe(found))
        return found

    def measured(self) -> dict[str, MeasuredLatency]:
        return {variant: m for variant, m in self._measured.items() if variant in self._sessions}

    def unload(self, variant: str) -> None:
        self._sessions.pop(variant, None)
        self._measured.pop(variant, None)
        if self._memory is not None:
            self._memory.release(variant)

    def loaded(self) -> list[str]:
        return sorted(self._sessions)

    def prepare(self, variant: str, inputs: QueryInputs) -> np.ndarray:
        try:
            if inputs.tensor.datatype != "BYTES":
                return to_array(inputs)
            spec = self._images.get(variant)
            if spec is None:
                raise ExecutionError(f"variant {variant!r} takes no encoded images (its profile says no preprocessing)")
            return np.stack([imaging.prepare(image, spec) for image in to_elements(inputs)])
        except ValueError as exc:  # imaging.ImageError too
            raise ExecutionError(str(exc)[:500]) from None

    def run(self, variant: str, inputs: np.ndarray | None, rows: int) -> np.ndarray:
        from shared.onnx_runtime import run_batch

        session = self._sessions.get(variant)
        if session is None:
            raise ExecutionError(f"variant {variant!r} is not loaded on this worker")
        if inputs is None:
            raise ExecutionError("a real device needs input tensors")
        try:
            return run_batch(session, inputs)
        except Exception as exc:  # onnxruntime raises its own exception types for shape/type errors
            raise ExecutionError(f"inference failed: {exc}"[:500]) from None


class EmulatedExecutor(Executor):
    """Replays a named device's measured latency (as the Kairos authors emulate instance types).

    Service and load times come from `ProfileServiceTime`, the very model the simulator uses: a draw
    from the profile's measured samples when it has them, else its mean.
    """

    emulated = True

    def __init__(self, profiles: ProfileSet, device: str, *, seed: int = 0) -> None:
        if device not in profiles.device_by_name:
            raise ValueError(f"`device` {device!r} has no profile; known: {sorted(profiles.device_by_name)}")
        self.device = device
        self._service = ProfileServiceTime(profiles, sampled=True)
        self._loaded: set[str] = set()
        self._rng = np.random.default_rng(seed)

    def load(self, variant: str, *, measure: bool = False) -> float:
        try:
            load_ms = self._service.load_ms(self.device, variant)
        except KeyError as exc:
            raise ExecutionError(str(exc)) from None
        self._loaded.add(variant)
        time.sleep(load_ms / 1000.0)
        return load_ms

    def unload(self, variant: str) -> None:
        self._loaded.discard(variant)

    def loaded(self) -> list[str]:
        return sorted(self._loaded)

    def prepare(self, variant: str, inputs: QueryInputs) -> None:
        """Nothing to compute: a query of encoded images takes the profiled time to prepare them (its
        tensor's elements are not read, so an emulated worker never meets a bad image)."""
        if inputs.tensor.datatype == "BYTES":
            try:
                time.sleep(self._service.prepare_ms(self.device, variant, inputs.tensor.shape[0]) / 1000.0)
            except KeyError as exc:
                raise ExecutionError(str(exc)) from None
        return None

    def run(self, variant: str, inputs: np.ndarray | None, rows: int) -> None:
        if variant not in self._loaded:
            raise ExecutionError(f"variant {variant!r} is not loaded on this worker")
        try:
            latency_ms = self._service.sample_ms(self.device, variant, rows, self._rng)
        except (KeyError, ValueError) as exc:
            raise ExecutionError(str(exc)) from None
        time.sleep(latency_ms / 1000.0)
        return None
