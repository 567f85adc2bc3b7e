"""Two-device-type fixtures shared by the Kairos policy tests."""
from shared.policy.base import DispatchDecision, PendingQuery, WorkerView
from shared.profiles.format import DeviceType, ProfileSet, VariantProfile

QOS = 100.0


def two_type_profiles(gpu: dict[int, float], cpu: dict[int, float]) -> ProfileSet:
    """One model ``m`` on a ``gpu`` and a ``cpu`` type, with QoS ``QOS``."""
    return ProfileSet(
        source="test",
        devices=[DeviceType(name="gpu", kind="gpu", price_per_hour=1.0),
                 DeviceType(name="cpu", kind="cpu", price_per_hour=0.2)],
        slo_ms={"m": QOS},
        variants=[
            VariantProfile(variant="m", family="m", device="gpu", batch_latency_ms=gpu, max_batch=max(gpu)),
            VariantProfile(variant="m", family="m", device="cpu", batch_latency_ms=cpu, max_batch=max(cpu)),
        ],
    )


def query(i: int, size: int, arrival: float = 0.0) -> PendingQuery:
    return PendingQuery(str(i), "m", size, arrival, QOS, ("m",))


def worker(wid: str, device: str, busy_ms: float = 0.0) -> WorkerView:
    return WorkerView(wid, device, ("m",), int(busy_ms > 0), busy_ms, 0.0, 100)


def dispatched(decision: DispatchDecision) -> dict[str, str]:
    return {a.query_ids[0]: a.worker_id for a in decision.assignments}
