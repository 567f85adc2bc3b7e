"""INFaaS's view of the metadata store, fed into the scheduler every 2 s, and at once for an application
a query names and the scheduler does not know yet.

The `infaas` policy reads live instance states (Active, Overloaded, Interfered) and the models
registered since the scheduler started; Redis being away only leaves the last snapshot in use. The
registry writes an application to the store before it replies, so a query sent once `meridian register`
has answered finds it served, not "unknown", whenever it arrives within the 2 s.
"""
from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable

import faust
from redis.exceptions import RedisError

from shared import metrics
from shared.adapters.infaas_store import RedisMetadataStore
from shared.catalogue import Catalogue
from shared.infaas.records import MetadataSnapshot
from shared.policy.per_application import PerApplicationDispatch
from shared.serving import SchedulerCore
from shared.settings import Settings

METADATA_REFRESH_S = 2.0
#: how long a name the store did not know is taken as unknown without asking again (a stream of queries
#: for an application nobody registered costs one store lookup per name per second, not one per query)
UNKNOWN_RECHECK_S = 1.0
#: names remembered as unknown at most (forgotten all at once beyond: a bound, not a cache policy)
MAX_UNKNOWN_NAMES = 1024

logger = logging.getLogger(__name__)


class MetadataFeed:
    """What the scheduler asks the store between two refreshes: whether an application it does not know
    was registered meanwhile."""

    def __init__(self, store: RedisMetadataStore, refresh: Callable[[], Awaitable[None]]) -> None:
        self._store = store
        self._refresh = refresh
        self._unknown_since: dict[str, float] = {}

    async def learn(self, application: str) -> None:
        """Refresh now if the store has ``application``; a name it lacked is asked about once a second."""
        now = time.monotonic()
        if now - self._unknown_since.get(application, -math.inf) < UNKNOWN_RECHECK_S:
            return
        try:
            registered = await asyncio.to_thread(self._store.families_of, application)
        except RedisError:
            return
        if registered:
            self._unknown_since.pop(application, None)
            await self._refresh()
            return
        if len(self._unknown_since) >= MAX_UNKNOWN_NAMES:
            self._unknown_since.clear()
        self._unknown_since[application] = now


def follow_metadata_store(app: faust.App, core: SchedulerCore, policies: PerApplicationDispatch,
                          settings: Settings) -> MetadataFeed:
    """Read the store once at start and then every ``METADATA_REFRESH_S``; every `infaas` policy serving
    then hears it."""
    store = RedisMetadataStore.from_url(settings.redis_url)

    async def refresh() -> None:
        now = time.time()
        try:
            snapshot = await asyncio.to_thread(store.snapshot, now)
        except RedisError as exc:
            metrics.METADATA_REFRESH_FAILURES.inc()
            logger.warning("metadata store unavailable, serving from cached state: %s", exc)
            return
        for policy in policies.running("infaas"):
            policy.update_from_metadata(snapshot)
        applications = {**settings.applications}
        for application, families in snapshot.applications.items():
            applications[application] = sorted({*applications.get(application, ()), *families})
        if applications != core.catalogue.applications or _new_variants(core.catalogue, snapshot):
            core.catalogue = await asyncio.to_thread(Catalogue.from_settings,
                                                     settings.model_copy(update={"applications": applications}))

    app.task(refresh)
    app.timer(interval=METADATA_REFRESH_S)(refresh)
    return MetadataFeed(store, refresh)


def _new_variants(catalogue: Catalogue, snapshot: MetadataSnapshot) -> bool:
    """A variant the store knows and the catalogue does not: a model was registered."""
    return any(not catalogue.profiles_of(record.variant) for record in snapshot.variants)
