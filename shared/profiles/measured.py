"""Profiles as real workers measured them on their machines, for everyone who plans with profiles.

A real worker measures the variants it starts with at its first start (`services.worker.self_measure`)
and announces the result in every heartbeat. `AnnouncedMeasurements` gathers those announcements as the
heartbeats arrive: per (variant, device key), each batch size the median of what that device's workers
measured (a worker's measurement stays after it left). `with_measured` turns a profile set into the same
set with those latencies. The scheduler's core (admission, drop deadlines, predicted ends, and through
`DispatchPolicy.on_profiles` every dispatch policy) and the planning loops (Proteus' MILP, Kairos'
configuration search) each keep one and serve or plan by its result, live and in the simulator alike.
"""
from __future__ import annotations

from collections.abc import Mapping

from schemas import MeasuredLatency, WorkerHeartbeat
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile


class AnnouncedMeasurements:
    """What real workers announced they measured, per (variant, device key), medians over workers."""

    def __init__(self) -> None:
        #: (variant, device) -> worker -> its announcement
        self._by_worker: dict[tuple[str, str], dict[str, MeasuredLatency]] = {}
        #: (variant, device) -> the median of its workers' announcements
        self.measured: dict[tuple[str, str], MeasuredLatency] = {}
        #: device -> the $/h its workers announced
        self.prices: dict[str, float] = {}

    def heard(self, worker_id: str, device: str, measured: Mapping[str, MeasuredLatency],
              price_per_hour: float) -> bool:
        """A heartbeat's announcement; True when it changed what is known (a first or a new measurement)."""
        changed = [(variant, latency) for variant, latency in measured.items()
                   if self._by_worker.get((variant, device), {}).get(worker_id) != latency]
        for variant, latency in changed:
            by_worker = self._by_worker.setdefault((variant, device), {})
            by_worker[worker_id] = latency
            self.measured[variant, device] = median_measurement(list(by_worker.values()))
        if changed:
            self.prices[device] = price_per_hour
        return bool(changed)

    def heard_in(self, event: object) -> bool:
        """`heard` for a worker event: a heartbeat's announcement, when it carries one; True when it changed
        what is known."""
        return (isinstance(event, WorkerHeartbeat) and bool(event.measured)
                and self.heard(event.worker_id, event.device, event.measured, event.price_per_hour))

    def applied_to(self, profiles: ProfileSet) -> ProfileSet:
        """``profiles`` with what was announced (`with_measured`)."""
        return with_measured(profiles, self.measured, self.prices)


def with_measured(profiles: ProfileSet, measured: Mapping[tuple[str, str], MeasuredLatency],
                  prices: Mapping[str, float]) -> ProfileSet:
    """``profiles`` with the latencies real workers measured: ``measured`` maps (variant, device key) to
    what that device's workers announced, ``prices`` a device key to the $/h they announced.

    A measured (variant, device) keeps its profile's other fields (accuracy, inputs, memory) and takes
    the measured batches; a larger batch its profile has and the measurement left out is that profile's
    latency scaled by measured / profiled at the largest batch measured. A device no profile names (a
    machine measured nowhere before) starts from the variant's profile on another device, scaled the same
    way. A variant the set does not profile is left out: its family and accuracy come from a profile, not
    from a measurement.
    """
    if not measured:
        return profiles
    by_variant: dict[str, list[VariantProfile]] = {}
    for profile in profiles.variants:
        by_variant.setdefault(profile.variant, []).append(profile)
    replaced: dict[tuple[str, str], VariantProfile] = {}
    for (variant, device), latency in measured.items():
        known = by_variant.get(variant)
        if not known:
            continue
        base = next((p for p in known if p.device == device), known[0])
        replaced[variant, device] = measured_profile(base, device, latency)
    devices = {d.name: d for d in profiles.devices}
    for _, device in replaced:
        if device not in devices:
            kind = "gpu" if device.startswith("gpu-") else "cpu"
            devices[device] = DeviceType(name=device, kind=kind, price_per_hour=prices.get(device, 0.0))
    variants = [p for p in profiles.variants if (p.variant, p.device) not in replaced]
    return ProfileSet(source=f"{profiles.source} + measured by workers", devices=list(devices.values()),
                      slo_ms=profiles.slo_ms, variants=[*variants, *replaced.values()])


def measured_profile(base: VariantProfile, device: str, measured: MeasuredLatency) -> VariantProfile:
    """``base`` (the variant's profile on ``device``, or on another device) as ``device`` measured it."""
    latencies = dict(measured.batch_latency_ms)
    largest = max(latencies)
    reference = base.batch_latency_ms.get(largest)
    if reference is None:  # the profile has no such batch: scale by its nearest batch at or above it
        reference = base.latency_ms(largest) if largest <= max(base.batch_latency_ms) else None
    if reference is not None:
        scale = latencies[largest] / reference
        latencies.update({b: ms * scale for b, ms in base.batch_latency_ms.items() if b > largest})
    return base.model_copy(update={
        "device": device, "batch_latency_ms": dict(sorted(latencies.items())), "latency_samples_ms": None,
        "measured": True,
        "load_latency_ms": measured.load_latency_ms if measured.load_latency_ms is not None else base.load_latency_ms,
        "image_prepare_ms": measured.image_prepare_ms if measured.image_prepare_ms is not None
        else base.image_prepare_ms})


def median_measurement(announced: list[MeasuredLatency]) -> MeasuredLatency:
    """Per batch size (and for loading and preparing an image), the median of what workers announced."""
    if len(announced) == 1:
        return announced[0]

    def median(values: list[float | None]) -> float | None:
        known = sorted(v for v in values if v is not None)
        return None if not known else (known[(len(known) - 1) // 2] + known[len(known) // 2]) / 2.0

    batches = sorted({b for a in announced for b in a.batch_latency_ms})
    return MeasuredLatency(
        batch_latency_ms={b: median([a.batch_latency_ms.get(b) for a in announced]) for b in batches},
        load_latency_ms=median([a.load_latency_ms for a in announced]),
        image_prepare_ms=median([a.image_prepare_ms for a in announced]))
