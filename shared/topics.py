"""Topic names, defined once, each paired with its schema, and the topic layout.

Layout (see README "Topics"):
- ``meridian.queries`` is keyed by application, so all of one application's queries land in one
  partition and the consumer group of scheduler processes gives each application exactly one owner.
- The scheduler targets one worker by producing to that worker's own single-partition topic
  ``meridian.dispatch.<worker_id>``, read by the worker's own consumer group ``meridian.worker.<worker_id>``:
  a restarted worker with the same id resumes from its committed offset. Scaling out is starting a worker
  with a new id; it announces itself with heartbeats on ``meridian.worker-events``.
- Worker events are read by every scheduler process (each its own group), so all see the whole fleet.
"""
from __future__ import annotations

from dataclasses import dataclass

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from shared.settings import Settings

QUERIES = "meridian.queries"
RESULTS = "meridian.results"
WORKER_EVENTS = "meridian.worker-events"
LOAD_STATS = "meridian.load-stats"
PLANS = "meridian.plans"
DEAD_LETTER = "meridian.dead-letter"
REGISTRATIONS = "meridian.registrations"
REGISTRY_REPLIES = "meridian.registry-replies"
DISPATCH_PREFIX = "meridian.dispatch."


def dispatch_topic(worker_id: str) -> str:
    return DISPATCH_PREFIX + worker_id


def worker_group(worker_id: str) -> str:
    return f"meridian.worker.{worker_id}"


@dataclass(frozen=True)
class TopicSpec:
    name: str
    partitions: int


def core_topics(settings: Settings) -> list[TopicSpec]:
    return [
        TopicSpec(QUERIES, settings.query_partitions),
        TopicSpec(RESULTS, settings.result_partitions),
        TopicSpec(WORKER_EVENTS, 1),
        TopicSpec(LOAD_STATS, 1),
        TopicSpec(PLANS, 1),
        TopicSpec(DEAD_LETTER, 1),
        TopicSpec(REGISTRATIONS, 1),
        TopicSpec(REGISTRY_REPLIES, 1),
    ]


def ensure_topics(admin: KafkaAdminClient, specs: list[TopicSpec]) -> None:
    """Create missing topics (the broker does not auto-create; faust needs them before it starts)."""
    existing = set(admin.list_topics())
    missing = [NewTopic(s.name, num_partitions=s.partitions, replication_factor=1) for s in specs if s.name not in existing]
    if not missing:
        return
    try:
        admin.create_topics(missing)
    except TopicAlreadyExistsError:
        pass
