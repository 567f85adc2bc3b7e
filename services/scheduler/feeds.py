"""The feeds the configured dispatch policies declare (`shared.policy.registry.Feed`), run beside the
scheduler: the metadata store for INFaaS, policy-set generation for RAMSIS. A switch may name a policy only
if its feeds run, so they start with the scheduler.
"""
from __future__ import annotations

import asyncio
import logging

import faust
import redis
from redis.exceptions import RedisError

from services.scheduler.metadata_feed import MetadataFeed, follow_metadata_store
from shared.adapters.ramsis_store import RedisPolicyStore
from shared.policy.per_application import PerApplicationDispatch
from shared.policy.registry import Feed
from shared.profiles.format import ProfileSet
from shared.serving import SchedulerCore
from shared.settings import Settings

logger = logging.getLogger(__name__)


def start_feeds(feeds: set[Feed], app: faust.App, core: SchedulerCore, settings: Settings) -> MetadataFeed | None:
    """Start ``feeds`` on ``app``; the metadata feed, which admission asks about unknown applications."""
    policies = core.policy
    assert isinstance(policies, PerApplicationDispatch)
    if Feed.POLICY_SETS in feeds:
        follow_ramsis_generation(app, policies, core.catalogue.profiles, settings)
    return follow_metadata_store(app, core, policies, settings) if Feed.METADATA in feeds else None


def follow_ramsis_generation(app: faust.App, dispatch: PerApplicationDispatch, profiles: ProfileSet,
                             settings: Settings) -> None:
    """Every second: if the load outgrew a serving RAMSIS policy's set, solve the missing policy off the
    event loop, hand it to that policy and keep it in Redis for the next start."""
    from shared.ramsis.dispatch import fill_missing
    from shared.ramsis.generator import PolicyGenerator
    from shared.ramsis.problem import quantile_profiles

    store = RedisPolicyStore(redis.Redis.from_url(settings.redis_url))
    generator = PolicyGenerator.extending(dispatch.running("ramsis")[0].policy_set, quantile_profiles(profiles))

    async def generate_missing() -> None:
        try:
            for policy in dispatch.running("ramsis"):
                solved = await asyncio.to_thread(fill_missing, policy, generator)
                if solved is not None:
                    logger.info("generated a RAMSIS policy for K=%d at %g q/s", solved.workers, solved.rate_qps)
                    await asyncio.to_thread(store.add, settings.ramsis_policy_set, solved)
        except (RedisError, ValueError, ArithmeticError) as exc:  # the scheduler serves on with what it has
            logger.warning("RAMSIS policy generation failed: %s", exc)

    app.timer(interval=1.0)(generate_missing)
