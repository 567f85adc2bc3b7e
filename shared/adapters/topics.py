"""Topic names, defined once, each paired with its schema, and the topic layout.

Layout (see docs/concepts.md, "Topics and services"):
- ``meridian.queries`` is keyed by application, so all of one application's queries land in one
  partition and the consumer group of scheduler processes gives each application exactly one owner.
- The scheduler targets one worker by producing to that worker's own single-partition topic
  ``meridian.dispatch.<worker_id>``, read by the worker's own consumer group ``meridian.worker.<worker_id>``:
  a restarted worker with the same id resumes from its committed offset. Scaling out is starting a worker
  with a new id; it announces itself with heartbeats on ``meridian.worker-events``.
- Worker events are read by every scheduler process (each its own group), so all see the whole fleet.
- ``meridian.control`` carries operators' commands to the running services (``SwitchPolicy``); every
  scheduler reads all of it, oldest first, so the newest command wins also after a restart.
- Each application's results go to its own ``meridian.results.<application>`` (made when the application
  is configured or registered), so a client reads, and may be allowed to read, only its own answers.
  ``meridian.results`` carries only rejections of messages that name no known application.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from kafka.admin import KafkaAdminClient, NewTopic
from kafka.errors import TopicAlreadyExistsError

from shared.settings import Settings

QUERIES = "meridian.queries"
#: the consumer group of the scheduler processes (faust's app id), which reads ``QUERIES``
SCHEDULER_GROUP = "meridian-scheduler"
#: rejections of messages that name no known application (every application's answers have their own topic)
RESULTS = "meridian.results"
RESULTS_PREFIX = "meridian.results."
WORKER_EVENTS = "meridian.worker-events"
LOAD_STATS = "meridian.load-stats"
PLANS = "meridian.plans"
CONTROL = "meridian.control"
DEAD_LETTER = "meridian.dead-letter"
REGISTRATIONS = "meridian.registrations"
REGISTRY_REPLIES = "meridian.registry-replies"
DISPATCH_PREFIX = "meridian.dispatch."


def dispatch_topic(worker_id: str) -> str:
    return DISPATCH_PREFIX + worker_id


def results_topic(application: str | None) -> str:
    """Where the answers to ``application``'s queries go (None: a message of no known application)."""
    return RESULTS_PREFIX + application if application else RESULTS


def results_topics(settings: Settings) -> list[TopicSpec]:
    return [TopicSpec(results_topic(app), settings.result_partitions) for app in settings.applications]


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
        TopicSpec(CONTROL, 1),
        TopicSpec(DEAD_LETTER, 1),
        TopicSpec(REGISTRATIONS, 1),
        TopicSpec(REGISTRY_REPLIES, 1),
        *results_topics(settings),
    ]


def ensure_topics(admin: KafkaAdminClient, specs: list[TopicSpec], *, timeout_s: float = 30.0) -> None:
    """Create missing topics and wait until every partition has a leader.

    The broker does not auto-create topics, and a consumer that subscribes before a new topic's
    metadata is visible is assigned nothing until its next metadata refresh (minutes later).
    """
    existing = set(admin.list_topics())
    # -1: the broker's default.replication.factor (min(3, nodes) in infra/kafka), one setting for every topic
    missing = [NewTopic(s.name, num_partitions=s.partitions, replication_factor=-1)
               for s in specs if s.name not in existing]
    if missing:
        try:
            admin.create_topics(missing)
        except TopicAlreadyExistsError:
            pass
    wanted = {s.name: s.partitions for s in specs}
    deadline = time.monotonic() + timeout_s
    while True:
        ready = {t["name"] for t in admin.describe_topics(list(wanted))
                 if t["error_code"] == 0 and len(t["partitions"]) == wanted[t["name"]]
                 and all(p["leader_id"] >= 0 for p in t["partitions"])}
        if ready == set(wanted):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics without leaders after {timeout_s:g} s: {sorted(set(wanted) - ready)}")
        time.sleep(0.1)
