"""Small problems and an in-memory Redis double, for doctests and unit tests (no files, no server)."""
from __future__ import annotations

from shared.profiles.format import DeviceType, ProfileSet, VariantProfile
from shared.ramsis.problem import Batching, RamsisProblem, build_problem

#: accuracy and batch-1 latency (ms) of the three tiny models; a batch of b takes base * (1 + (b - 1) / 2)
TINY_MODELS = {"fast": (0.70, 5.0), "mid": (0.80, 12.0), "slow": (0.90, 30.0)}


def tiny_profiles(*, max_batch: int = 16) -> ProfileSet:
    """Three models of family ``tiny`` on device ``cpu``, profiled at every batch size up to ``max_batch``."""
    return ProfileSet(
        source="shared.ramsis.testing: synthetic",
        devices=[DeviceType(name="cpu", kind="cpu", price_per_hour=0.0)],
        slo_ms={"tiny": 100.0},
        variants=[
            VariantProfile(
                variant=name, family="tiny", device="cpu", accuracy=acc, max_batch=max_batch,
                batch_latency_ms={b: base * (1 + 0.5 * (b - 1)) for b in range(1, max_batch + 1)},
            )
            for name, (acc, base) in TINY_MODELS.items()
        ],
    )


def tiny_problem(
    *, max_queue: int = 6, delta: int = 10, slo_ms: float = 100.0, batching: Batching = "maximal"
) -> RamsisProblem:
    """The MDP inputs of `tiny_profiles` (FLD grid)."""
    return build_problem(
        tiny_profiles(), slo_ms=slo_ms, family="tiny", max_queue=max_queue, delta=delta, batching=batching
    )


class FakeRedis:
    """The few Redis commands `RedisPolicyStore` uses, in memory, answering bytes like redis-py."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, bytes] | set[bytes]] = {}

    @staticmethod
    def _bytes(value: str | bytes) -> bytes:
        return value if isinstance(value, bytes) else str(value).encode()

    def delete(self, *keys: str) -> int:
        return sum(self.data.pop(k, None) is not None for k in keys)

    def hset(self, key: str, field: str | None = None, value: str | None = None,
             mapping: dict[str, str] | None = None) -> int:
        table = self.data.setdefault(key, {})
        assert isinstance(table, dict)
        items = dict(mapping or {})
        if field is not None:
            items[field] = value  # type: ignore[assignment]
        added = sum(self._bytes(f) not in table for f in items)
        table.update({self._bytes(f): self._bytes(v) for f, v in items.items()})
        return added

    def hgetall(self, key: str) -> dict[bytes, bytes]:
        return dict(self.data.get(key, {}))  # type: ignore[arg-type]

    def sadd(self, key: str, *members: str) -> int:
        group = self.data.setdefault(key, set())
        assert isinstance(group, set)
        added = sum(self._bytes(m) not in group for m in members)
        group.update(self._bytes(m) for m in members)
        return added

    def srem(self, key: str, *members: str) -> int:
        group = self.data.get(key, set())
        assert isinstance(group, set)
        removed = sum(self._bytes(m) in group for m in members)
        group.difference_update(self._bytes(m) for m in members)
        return removed

    def smembers(self, key: str) -> set[bytes]:
        return set(self.data.get(key, set()))  # type: ignore[arg-type]

    def pipeline(self, transaction: bool = True) -> _FakePipeline:
        return _FakePipeline(self)


class _FakePipeline:
    """Queues calls and runs them on `execute`, like a redis-py pipeline."""

    def __init__(self, client: FakeRedis) -> None:
        self._client = client
        self._calls: list[tuple[str, tuple, dict]] = []

    def __getattr__(self, name: str):
        def queue(*args, **kwargs) -> _FakePipeline:
            self._calls.append((name, args, kwargs))
            return self

        return queue

    def execute(self) -> list:
        calls, self._calls = self._calls, []
        return [getattr(self._client, name)(*args, **kwargs) for name, args, kwargs in calls]
