"""One application's dispatch policy switched while the scheduler serves, on a `SwitchPolicy` read from
``meridian.control``.

The faust event loop runs one handler at a time and `SchedulerCore.step` never awaits, so a switch made
in a handler falls between two steps: `PerApplicationDispatch.switch` hands the application's queued
queries to the new policy there, and the handler steps right after. A switch is refused, with the reason
for the dead letters, when it names an unknown policy or application, a policy whose feed this
scheduler did not start, or a policy that cannot be built now (a RAMSIS set missing from Redis).
"""
from __future__ import annotations

import asyncio
import logging
from typing import cast

from redis.exceptions import RedisError

from schemas import SwitchPolicy
from shared import metrics
from shared.policy.per_application import PerApplicationDispatch
from shared.policy.registry import BuildContext, Feed, build_dispatch, dispatch_entry
from shared.serving import SchedulerCore

logger = logging.getLogger(__name__)


class PolicySwitcher:
    """Carries out `SwitchPolicy` commands on the core's `PerApplicationDispatch`, and keeps
    ``meridian_scheduler_policy`` saying which policy serves each application.

    ``feeds``: the feeds running beside this scheduler; ``context``: what a policy is built with.
    """

    def __init__(self, core: SchedulerCore, *, feeds: set[Feed], context: BuildContext) -> None:
        dispatch = cast(PerApplicationDispatch, core.policy)
        self._settings, self._core, self._dispatch = context.settings, core, dispatch
        self._feeds, self._context = feeds, context
        for application in sorted({*core.catalogue.applications, *self._settings.application_policies}):
            metrics.SCHEDULER_POLICY.labels(application, dispatch.policy_of(application)).set(1)

    async def apply(self, switch: SwitchPolicy) -> str | None:
        """Switch, and return None; or return why not (nothing changed)."""
        application, name = switch.application, switch.policy
        refusal = self._refusal(application, name)
        if refusal is not None:
            return refusal
        current = self._dispatch.policy_of(application)
        if current == name:
            logger.info("application %r is already served by dispatch policy %r", application, name)
            return None
        try:  # RAMSIS reads Redis: off the event loop
            policy = await asyncio.to_thread(build_dispatch, name, self._core.catalogue.profiles, self._context)
        except (ValueError, RedisError) as exc:
            return f"cannot start dispatch policy {name!r} for application {application!r}: {exc}"
        self._dispatch.switch(application, policy)
        metrics.SCHEDULER_POLICY.labels(application, current).set(0)
        metrics.SCHEDULER_POLICY.labels(application, name).set(1)
        logger.info("application %r: dispatch policy %s -> %s, as %s asked at %.3f", application, current, name,
                    switch.requested_by or "an operator", switch.at)
        return None

    def _refusal(self, application: str, name: str) -> str | None:
        try:
            entry = dispatch_entry(name)
        except ValueError as exc:
            return str(exc)
        applications = self._core.catalogue.applications
        if application not in applications and application not in self._settings.application_policies:
            return f"unknown application {application!r}; this scheduler serves: {', '.join(sorted(applications))}"
        for feed in entry.feeds:
            if feed not in self._feeds:
                return (f"dispatch policy {name!r} needs {feed.value}, which this scheduler did not start: name it "
                        "in MERIDIAN_SCHEDULER_POLICY or MERIDIAN_APPLICATION_POLICIES when starting the scheduler")
        return None
