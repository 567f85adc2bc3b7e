"""INFaaS's view of the metadata store, fed into the scheduler every 2 s.

The `infaas` policy reads live instance states (Active, Overloaded, Interfered) and the models
registered since the scheduler started; Redis being away only leaves the last snapshot in use.
"""
from __future__ import annotations

import asyncio
import logging
import time

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

logger = logging.getLogger(__name__)


def follow_metadata_store(app: faust.App, core: SchedulerCore, policies: PerApplicationDispatch,
                          settings: Settings) -> None:
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


def _new_variants(catalogue: Catalogue, snapshot: MetadataSnapshot) -> bool:
    """A variant the store knows and the catalogue does not: a model was registered."""
    return any(not catalogue.profiles_of(record.variant) for record in snapshot.variants)
