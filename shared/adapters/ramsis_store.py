"""Policy sets in Redis: written by the offline generator, read by the scheduler (and extended live).

Layout (every key under ``prefix``, ``meridian:`` by default)::

    ramsis:sets          set   of policy-set names (e.g. ``digits:1ms``)
    ramsis:set:<name>    hash  field ``<K>/<rate_qps>`` -> one policy as JSON
                               (``meridian.ramsis.policy`` version 1, see `shared.ramsis.policy`)

One field per policy lets a background generator add a policy without rewriting the set; `save`
replaces a whole set in one transaction. Values are JSON only: nothing is ever unpickled.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from shared.adapters.redis_text import text
from shared.ramsis.policy import PolicySet, RamsisPolicy

if TYPE_CHECKING:
    import redis


class RedisPolicyStore:
    """RAMSIS policy sets in Redis, around a ``redis.Redis`` client (either ``decode_responses``).

    Examples
    --------
    >>> from shared.ramsis.generator import PolicyGenerator
    >>> from shared.ramsis.testing import FakeRedis, tiny_problem
    >>> store = RedisPolicyStore(FakeRedis())
    >>> store.save("tiny", PolicySet([PolicyGenerator(tiny_problem())(2, 50.0)]))
    >>> store.names(), [(p.workers, p.rate_qps) for p in store.load("tiny").policies]
    (['tiny'], [(2, 50.0)])
    """

    def __init__(self, client: redis.Redis, *, prefix: str = "meridian:") -> None:
        self._redis = client
        self._prefix = prefix

    def _set_key(self, name: str) -> str:
        if not name:
            raise ValueError("`name` must not be empty")
        return f"{self._prefix}ramsis:set:{name}"

    @property
    def _names_key(self) -> str:
        return f"{self._prefix}ramsis:sets"

    @staticmethod
    def _field(policy: RamsisPolicy) -> str:
        return f"{policy.workers}/{policy.rate_qps!r}"

    def save(self, name: str, policies: PolicySet) -> None:
        """Replace the set ``name`` with ``policies``, atomically."""
        key = self._set_key(name)
        pipe = self._redis.pipeline(transaction=True)
        pipe.delete(key)
        if len(policies):
            pipe.hset(key, mapping={self._field(p): p.to_json() for p in policies.policies})
            pipe.sadd(self._names_key, name)
        else:
            pipe.srem(self._names_key, name)
        pipe.execute()

    def add(self, name: str, policy: RamsisPolicy) -> None:
        """Add (or replace) one policy of the set ``name``."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self._set_key(name), self._field(policy), policy.to_json())
        pipe.sadd(self._names_key, name)
        pipe.execute()

    def load(self, name: str) -> PolicySet:
        """The set ``name`` (empty when there is none)."""
        fields = self._redis.hgetall(self._set_key(name))
        return PolicySet(RamsisPolicy.from_json(text(value)) for value in fields.values())

    def names(self) -> list[str]:
        return sorted(text(n) for n in self._redis.smembers(self._names_key))


def policy_set_reader(redis_url: str) -> Callable[[str], PolicySet]:
    """Reads a set by name from the Redis at ``redis_url`` (what a RAMSIS policy is built with), connecting
    at each read: a policy is built at start and on a switch only."""
    import redis

    return lambda name: RedisPolicyStore(redis.Redis.from_url(redis_url)).load(name)
