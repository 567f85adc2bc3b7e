"""Load the Kairos authors' measurements (HPDC'23 artifact) into the one profile format.

The data stay in the materials folder; this module reads them from the folder its caller names (a
service's or bench's ``Settings.kairos_data_dir``: ``<repo>/../shared/data/kairos``, or
``$MERIDIAN_MATERIALS_DIR/data/kairos``), it never copies them and never reads the environment itself.

* variant = family = model name (``ncf``, ``rm2``, ``wnd``, ``mtwnd``, ``dien``): Kairos serves one
  model per system, so the model is the variant;
* devices = the paper's four EC2 types with their on-demand price; ``g4dn`` is the GPU base;
* ``slo_ms`` = the paper's p99 QoS target per model (Table 3);
* batch sizes 10..1000 in steps of 10: a query's size is rounded up to the grid, as the authors do.

With ``samples=True`` each profile also carries the per-batch samples the authors' emulation draws from:
inference + data-loading latency added element-wise, the largest sample dropped.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

#: Kairos caps query size at 1000 "because of QoS constraints"
KAIROS_MAX_BATCH = 1000
_GPU_FAMILIES = ("g4dn", "g5", "p3", "p4d")


@dataclass(frozen=True, slots=True)
class KairosPool:
    """The paper's instance pool: types (base first), loose per-type caps, prices and the budget."""

    devices: tuple[str, ...]
    max_counts: tuple[int, ...]
    prices: tuple[float, ...]
    budget_per_hour: float

    @property
    def base(self) -> str:
        return self.devices[0]


def load_kairos_pool(data_dir: str | Path) -> KairosPool:
    """The pool of ``data_dir/instance.json``: g4dn.xlarge base, three CPU auxiliaries, $2.5/h.

    ``data_dir`` is the folder holding the Kairos files (the caller's `Settings.kairos_data_dir`).
    """
    raw = json.loads((Path(data_dir) / "instance.json").read_text())
    return KairosPool(
        devices=tuple(raw["ins_types"]),
        max_counts=tuple(int(n) for n in raw["max_num"]),
        prices=tuple(float(p) for p in raw["price"]),
        budget_per_hour=float(raw["cost"]),
    )


def load_kairos_profiles(data_dir: str | Path, *, samples: bool = False) -> ProfileSet:
    """Read ``latency_mean.json`` (and optionally ``latency_samples.json``) into a ``ProfileSet``.

    Parameters
    ----------
    data_dir : folder holding the Kairos files (the caller's `Settings.kairos_data_dir`).
    samples : also attach ``latency_samples_ms`` (99 per batch size; the file is ~2.6 MB).
    """
    folder = Path(data_dir)
    mean = json.loads((folder / "latency_mean.json").read_text())
    sampled = (
        json.loads((folder / "latency_samples.json").read_text())["models"] if samples else None
    )
    devices = [
        DeviceType(name=name, kind=_device_kind(name), price_per_hour=float(price))
        for name, price in mean["price_per_hr"].items()
    ]
    variants = []
    for model, per_device in mean["latency_ms"].items():
        for device, table in per_device.items():
            variants.append(
                VariantProfile(
                    variant=model,
                    family=model,
                    device=device,
                    batch_latency_ms={int(b): float(lat) for b, lat in table.items()},
                    latency_samples_ms=(
                        _samples_of(sampled[model][device]) if sampled is not None else None
                    ),
                    max_batch=KAIROS_MAX_BATCH,
                )
            )
    return ProfileSet(
        source=f"Kairos HPDC'23 artifact ({folder.name}/): {mean['_source']}",
        devices=devices,
        slo_ms={model: float(qos) for model, qos in mean["qos_ms"].items()},
        variants=variants,
    )


def _device_kind(name: str) -> str:
    return "gpu" if name.split(".")[0] in _GPU_FAMILIES else "cpu"


def _samples_of(per_batch: dict[str, dict[str, list[float]]]) -> dict[int, list[float]]:
    """Inference + load element-wise, the largest dropped (the authors' emulation)."""
    out = {}
    for batch, parts in per_batch.items():
        total = np.asarray(parts["inference_ms"]) + np.asarray(parts["load_ms"])
        out[int(batch)] = np.delete(total, total.argmax()).tolist()
    return out
