"""How a worker runs a batch: for real with onnxruntime, or by replaying a device's measured profile.

A real executor first prepares each query's input alone (`prepare`): a numeric tensor as it is, encoded
images decoded and prepared as the variant's profile says (`shared.imaging`), so a query whose input is
bad is answered ``error`` alone and the rest of its batch runs."""
from __future__ import annotations

import time
from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from shared import imaging
from shared.profiles import ImagePreprocessing, ProfileSet
from shared.serving.service_time import ProfileServiceTime
from shared.tensors import QueryInputs, to_array, to_elements


class ExecutionError(Exception):
    """The batch could not run; every query in it gets an ``error`` result with this reason."""


class Executor(ABC):
    #: the device type this executor stands for (a profile key)
    device: str
    emulated: bool

    @abstractmethod
    def load(self, variant: str) -> float:
        """Load ``variant`` and return the loading latency in ms."""

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
    """Real inference with onnxruntime, one intra-op thread (the fastest setting on a shared 2-core box)."""

    emulated = False

    def __init__(self, models_dir: Path, *, device: str = "cpu-1t",
                 images: dict[str, ImagePreprocessing] | None = None) -> None:
        # what loading a variant imports (onnx reads its recorded optimization level, ~0.9 s to import),
        # imported now, at the worker's start, not inside the first load a waiting query pays for
        import onnx  # noqa: F401

        from shared import onnx_runtime  # noqa: F401
        self.device = device
        self._models_dir = Path(models_dir)
        self._sessions: dict[str, object] = {}
        #: variant -> how its model takes encoded images (from its profile)
        self._images = images or {}

    def load(self, variant: str) -> float:
        from shared.modelzoo.variants import optimization_level_of
        from shared.onnx_runtime import make_session

        path = self._models_dir / f"{variant}.onnx"
        if not path.is_file():
            raise ExecutionError(f"no model file for variant {variant!r} at {path}")
        started = time.perf_counter()
        self._sessions[variant] = make_session(path, optimization_level=optimization_level_of(path))
        return (time.perf_counter() - started) * 1000.0

    def unload(self, variant: str) -> None:
        self._sessions.pop(variant, None)

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

    def load(self, variant: str) -> float:
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
