"""The one profile format every policy, the simulator and the workers read.

A profile set is a JSON document (``profiles/*.json``, or built in memory by a loader such as
``shared.profiles.kairos``) that says, for each (variant, device type), how long a batch takes.

Format (``schema_version`` 1)::

    {
      "schema_version": 1,
      "source": "where the numbers come from (measured here, authors' data, ...)",
      "devices": [{"name": "g4dn.xlarge", "kind": "gpu", "price_per_hour": 0.526}, ...],
      "slo_ms": {"rm2": 350.0, ...},                  # default latency SLO per family
      "variants": [
        {"variant": "rm2", "family": "rm2", "device": "g4dn.xlarge",
         "accuracy": 0.78 | null,                       # top-1 on held-out data, 0..1
         "batch_latency_ms": {"10": 5.4, "20": 6.1},     # typical (mean or median, see source) latency
         "latency_samples_ms": {"10": [5.3, 5.5]} | null,
         "load_latency_ms": 120.0 | null, "peak_memory_mb": 80.0 | null,
         "max_batch": 1000, "measured": true,
         "input_shape": [3, 224, 224] | null, "input_dtype": "float32" | null,
         "image_preprocessing": {"size": 224, "crop_padding": 32, "mean": 127.0, "std": 128.0} | null,
         "image_prepare_ms": 3.1 | null}
      ]
    }

Lookup rule: a batch ``b`` uses the smallest profiled batch size ``>= b`` (the Kairos authors round up to
the next multiple of 10; the registry profiles powers of two). A batch above the largest profiled size is
out of profile and raises.
"""
from __future__ import annotations

import bisect
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _CachedModel(BaseModel):
    """A frozen model with ``cached_property`` lookups that a copy must not inherit."""

    model_config = ConfigDict(frozen=True)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        copy = super().model_copy(update=update, deep=deep)
        for name, attribute in vars(type(self)).items():
            if isinstance(attribute, cached_property):
                copy.__dict__.pop(name, None)
        return copy


class DeviceType(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    kind: Literal["gpu", "cpu"]
    price_per_hour: float = Field(ge=0.0)
    #: seconds from asking for a worker of this type to its first heartbeat (None: not measured, taken as 0)
    startup_s: float | None = Field(default=None, ge=0.0)


class ImagePreprocessing(BaseModel):
    """How a variant's model was fed images when it was trained and exported, so that a worker prepares an
    encoded image (`shared.imaging`) as the model expects: a central square crop of ``size / (size +
    crop_padding)`` of the shorter side, resized (bilinear, antialiased) to ``size`` x ``size``, RGB
    scaled as ``(pixel - mean) / std``, channels first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    size: int = Field(ge=1, le=4096)
    crop_padding: int = Field(ge=0)
    mean: float
    std: float = Field(gt=0.0)


class VariantProfile(_CachedModel):
    variant: str
    family: str
    device: str
    accuracy: float | None = Field(default=None, ge=0.0, le=1.0)
    batch_latency_ms: dict[int, float]
    latency_samples_ms: dict[int, list[float]] | None = None
    load_latency_ms: float | None = None
    peak_memory_mb: float | None = None
    max_batch: int = Field(ge=1)
    measured: bool = True
    #: one row's shape (no batch axis) and dtype the model takes: queries are checked against them at
    #: admission; None for profiles of models that are only emulated
    input_shape: tuple[int, ...] | None = None
    input_dtype: str | None = None
    #: the model takes encoded images too (OIP ``BYTES``), prepared this way into ``input_shape``
    image_preprocessing: ImagePreprocessing | None = None
    #: milliseconds this device takes to decode one encoded image and prepare it so (`shared.imaging`):
    #: what each image row of a batch adds to ``batch_latency_ms``, which is measured on tensors
    image_prepare_ms: float | None = Field(default=None, ge=0.0)

    @field_validator("batch_latency_ms")
    @classmethod
    def _positive_latencies(cls, value: dict[int, float]) -> dict[int, float]:
        if not value:
            raise ValueError("`batch_latency_ms` must profile at least one batch size")
        if any(b < 1 or lat <= 0 for b, lat in value.items()):
            raise ValueError("`batch_latency_ms` needs batch sizes >= 1 and latencies > 0")
        return dict(sorted(value.items()))

    @cached_property
    def _batches(self) -> list[int]:
        return list(self.batch_latency_ms)

    def profiled_batch(self, batch_size: int) -> int:
        """The profiled batch size that stands for ``batch_size`` (the smallest one >= it)."""
        index = bisect.bisect_left(self._batches, batch_size)
        if batch_size < 1 or index == len(self._batches):
            raise ValueError(
                f"batch size {batch_size} is outside the profile of {self.variant!r} on "
                f"{self.device!r} (1..{self._batches[-1]})"
            )
        return self._batches[index]

    def latency_ms(self, batch_size: int, images: int = 0) -> float:
        """A batch of ``batch_size`` rows, ``images`` of them encoded images the worker prepares first."""
        return self.batch_latency_ms[self.profiled_batch(batch_size)] + images * (self.image_prepare_ms or 0.0)


class ProfileSet(_CachedModel):
    schema_version: Literal[1] = 1
    source: str
    devices: list[DeviceType]
    slo_ms: dict[str, float] = Field(default_factory=dict)
    variants: list[VariantProfile]

    @cached_property
    def _by_key(self) -> dict[tuple[str, str], VariantProfile]:
        return {(p.variant, p.device): p for p in self.variants}

    @cached_property
    def device_by_name(self) -> dict[str, DeviceType]:
        return {d.name: d for d in self.devices}

    def get(self, variant: str, device: str) -> VariantProfile:
        try:
            return self._by_key[(variant, device)]
        except KeyError:
            raise KeyError(f"no profile for variant {variant!r} on device {device!r}") from None

    def find(self, variant: str, device: str) -> VariantProfile | None:
        return self._by_key.get((variant, device))

    def latency_ms(self, variant: str, device: str, batch_size: int) -> float:
        return self.get(variant, device).latency_ms(batch_size)

    def variants_of(self, family: str) -> list[VariantProfile]:
        return [p for p in self.variants if p.family == family]

    @classmethod
    def load(cls, path: str | Path) -> "ProfileSet":
        return cls.model_validate_json(Path(path).read_text())

    def save(self, path: str | Path) -> None:
        Path(path).write_text(self.model_dump_json(indent=1, exclude_none=False) + "\n")
