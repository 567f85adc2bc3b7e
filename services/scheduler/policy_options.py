"""What each dispatch policy needs from the running system when the scheduler builds it.

Most policies need only the profiles. Proteus batches on purpose (it waits), so it is told how often the
scheduler steps; RAMSIS reads its offline policy set from Redis (``python -m services.ramsis_generate``
writes it) and solves what the set lacks on a background thread.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import faust
import redis
from redis.exceptions import RedisError

from shared.profiles.format import ProfileSet
from shared.settings import Settings

logger = logging.getLogger(__name__)


def dispatch_options(settings: Settings, *, step_interval_s: float) -> dict[str, Any]:
    if settings.scheduler_policy == "proteus":
        return {"decision_interval_s": step_interval_s}
    if settings.scheduler_policy == "ramsis":
        from shared.adapters.ramsis_store import RedisPolicyStore

        policies = RedisPolicyStore(redis.Redis.from_url(settings.redis_url)).load(settings.ramsis_policy_set)
        if not len(policies):
            raise SystemExit(f"scheduler: Redis has no RAMSIS policy set {settings.ramsis_policy_set!r}; generate "
                             "it with `python -m services.ramsis_generate ... --name NAME --redis-url URL`")
        return {"policy_set": policies}
    return {}


def follow_ramsis_generation(app: faust.App, policy: Any, profiles: ProfileSet, settings: Settings) -> None:
    """Every second: if the load outgrew the policy set, solve the missing policy off the event loop,
    hand it to the dispatch and keep it in Redis for the next start."""
    from shared.adapters.ramsis_store import RedisPolicyStore
    from shared.ramsis.dispatch import fill_missing
    from shared.ramsis.generator import PolicyGenerator
    from shared.ramsis.problem import quantile_profiles

    store = RedisPolicyStore(redis.Redis.from_url(settings.redis_url))
    generator = PolicyGenerator.extending(policy.policy_set, quantile_profiles(profiles))

    async def generate_missing() -> None:
        try:
            solved = await asyncio.to_thread(fill_missing, policy, generator)
            if solved is not None:
                logger.info("generated a RAMSIS policy for K=%d at %g q/s", solved.workers, solved.rate_qps)
                await asyncio.to_thread(store.add, settings.ramsis_policy_set, solved)
        except (RedisError, ValueError, ArithmeticError) as exc:  # the scheduler serves on with what it has
            logger.warning("RAMSIS policy generation failed: %s", exc)

    app.timer(interval=1.0)(generate_missing)
