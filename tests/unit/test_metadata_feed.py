"""A query for an application registered since the last refresh is served, not refused as unknown."""
from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from services.scheduler import metadata_feed
from services.scheduler.metadata_feed import MetadataFeed


class Store:
    """The one call the feed makes between refreshes, answered from a dict."""

    def __init__(self, apps: dict[str, list[str]]) -> None:
        self.apps = apps
        self.asked: list[str] = []

    def families_of(self, application: str) -> list[str]:
        self.asked.append(application)
        if application == "redis-down":
            raise RedisConnectionError("down")
        return self.apps.get(application, [])


def feed_of(store: Store) -> tuple[MetadataFeed, list[int]]:
    refreshes: list[int] = []

    async def refresh() -> None:
        refreshes.append(1)

    return MetadataFeed(store, refresh), refreshes  # type: ignore[arg-type]


def test_a_registered_application_refreshes_at_once() -> None:
    feed, refreshes = feed_of(Store({"new-app": ["m"]}))
    asyncio.run(feed.learn("new-app"))
    assert refreshes == [1]


def test_an_unregistered_name_is_asked_about_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = [100.0]
    monkeypatch.setattr(metadata_feed.time, "monotonic", lambda: clock[0])
    store = Store({})
    feed, refreshes = feed_of(store)
    for _ in range(50):
        asyncio.run(feed.learn("nobody"))
    assert store.asked == ["nobody"] and not refreshes
    clock[0] += metadata_feed.UNKNOWN_RECHECK_S
    store.apps["nobody"] = ["m"]  # registered meanwhile
    asyncio.run(feed.learn("nobody"))
    assert store.asked == ["nobody", "nobody"] and refreshes == [1]


def test_names_remembered_as_unknown_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(metadata_feed, "MAX_UNKNOWN_NAMES", 3)
    store = Store({})
    feed, _ = feed_of(store)
    for name in ["a", "b", "c", "d", "a"]:
        asyncio.run(feed.learn(name))
    assert store.asked == ["a", "b", "c", "d", "a"]  # "a" was forgotten when "d" came, so asked again


def test_redis_being_away_leaves_the_query_to_be_refused_as_before() -> None:
    feed, refreshes = feed_of(Store({}))
    asyncio.run(feed.learn("redis-down"))
    assert not refreshes
