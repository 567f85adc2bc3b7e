"""What each dispatch policy needs from the running system when the scheduler builds it, at start or on
a switch.

Most policies need only the profiles. Proteus batches on purpose (it waits), so it is told how often the
scheduler steps; RAMSIS reads its offline policy set from Redis (``python -m services.ramsis_generate``
writes it) and solves what the set lacks on a background thread. INFaaS (live metadata) and RAMSIS thus
need a feed beside the scheduler (`FEEDS`), started with it: a switch may name one only if the scheduler
started with it configured, so that its feed runs.
"""
from __future__ import annotations

import asyncio
import logging
from typing import Any

import faust
import redis
from redis.exceptions import RedisError

from shared.policy.base import DispatchPolicy
from shared.policy.per_application import PerApplicationDispatch
from shared.policy.registry import make_dispatch
from shared.profiles.format import ProfileSet
from shared.settings import Settings

logger = logging.getLogger(__name__)

#: policies that need a feed beside the scheduler, by what it is
FEEDS = {"infaas": "the metadata-store feed", "ramsis": "the RAMSIS policy generator"}


def dispatch_options(settings: Settings, name: str | None = None, *, step_interval_s: float) -> dict[str, Any]:
    """The keyword options of dispatch policy ``name`` (default: ``settings.scheduler_policy``); ValueError
    if it cannot be built now."""
    name = settings.scheduler_policy if name is None else name
    if name == "kairos":
        # the safeguard stays the paper's xi live: a margin learned from live completions would also count
        # the transport's jitter as prediction error, and has not been measured live yet (bench-kairos
        # measures it in simulation)
        return {"margin_quantile": None, "batch_queries": settings.kairos_batch_queries}
    if name == "infaas":
        from shared.infaas.monitor import MonitorConfig

        return {"monitor": MonitorConfig.from_settings(settings), "worker_timeout_s": settings.worker_timeout_s,
                "max_utilization": settings.infaas_max_dispatch_utilization}
    if name == "proteus":
        return {"decision_interval_s": step_interval_s, "batching": settings.proteus_batching}
    if name == "ramsis":
        from shared.adapters.ramsis_store import RedisPolicyStore

        policies = RedisPolicyStore(redis.Redis.from_url(settings.redis_url)).load(settings.ramsis_policy_set)
        if not len(policies):
            raise ValueError(f"Redis has no RAMSIS policy set {settings.ramsis_policy_set!r}; generate it with "
                             "`python -m services.ramsis_generate ... --name NAME --redis-url URL`")
        return {"policy_set": policies}
    return {}


def build_dispatch(settings: Settings, name: str, profiles: ProfileSet, *, step_interval_s: float) -> DispatchPolicy:
    """A new dispatch policy ``name`` as the live scheduler runs it; ValueError (or RedisError) if it cannot be."""
    return make_dispatch(name, profiles, **dispatch_options(settings, name, step_interval_s=step_interval_s))


def build_policy(settings: Settings, profiles: ProfileSet, *, step_interval_s: float) -> PerApplicationDispatch:
    """Each application's configured policy (``scheduler_policy`` for those not named), switchable while
    serving: what the live scheduler serves with, and what a replay simulates."""
    return PerApplicationDispatch(
        build_dispatch(settings, settings.scheduler_policy, profiles, step_interval_s=step_interval_s),
        {application: build_dispatch(settings, name, profiles, step_interval_s=step_interval_s)
         for application, name in settings.application_policies.items()})


def configured_policies(settings: Settings) -> set[str]:
    """Every dispatch policy the settings name: the feeds of these start with the scheduler."""
    return {settings.scheduler_policy, *settings.application_policies.values()}


def follow_ramsis_generation(app: faust.App, dispatch: PerApplicationDispatch, profiles: ProfileSet,
                             settings: Settings) -> None:
    """Every second: if the load outgrew a serving RAMSIS policy's set, solve the missing policy off the
    event loop, hand it to that policy and keep it in Redis for the next start."""
    from shared.adapters.ramsis_store import RedisPolicyStore
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
