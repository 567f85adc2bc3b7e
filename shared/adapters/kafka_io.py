"""kafka-python clients configured the one Meridian way (loopback, idempotent, low latency)."""
from __future__ import annotations

from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from shared.adapters import topics
from shared.adapters.topics import TopicSpec
from shared.settings import Settings


def security_options(settings: Settings) -> dict[str, Any]:
    sec = settings.kafka_security
    options: dict[str, Any] = {"security_protocol": sec.security_protocol}
    if sec.sasl_mechanism:
        options.update(sasl_mechanism=sec.sasl_mechanism, sasl_plain_username=sec.sasl_username,
                       sasl_plain_password=sec.sasl_password)
    if sec.ssl_cafile:
        options["ssl_cafile"] = sec.ssl_cafile
    return options


#: kafka-python backs off reconnecting exponentially up to 30 s by default, so a client could sleep through
#: most of a broker's restart; capped at 1 s, it is connected again within a second of the broker's return
RECONNECT_OPTIONS: dict[str, Any] = {"reconnect_backoff_ms": 50, "reconnect_backoff_max_ms": 1000}


def make_admin(settings: Settings) -> KafkaAdminClient:
    return KafkaAdminClient(bootstrap_servers=settings.kafka_bootstrap, request_timeout_ms=10_000,
                            **security_options(settings))


def ensure_core_topics(settings: Settings, *extra: TopicSpec) -> None:
    """Create Meridian's core topics (and ``extra``) where missing: every service does so before it starts."""
    ensure_topics_exist(settings, [*topics.core_topics(settings), *extra])


def ensure_results_topic(settings: Settings, application: str) -> None:
    """Create ``application``'s results topic where missing (a newly registered application)."""
    ensure_topics_exist(settings, [topics.TopicSpec(topics.results_topic(application), settings.result_partitions)])


def ensure_topics_exist(settings: Settings, specs: list[TopicSpec]) -> None:
    """Create the topics of ``specs`` where missing and wait until they can be used."""
    admin = make_admin(settings)
    try:
        topics.ensure_topics(admin, specs)
    finally:
        admin.close()


def make_producer(settings: Settings, **overrides: Any) -> KafkaProducer:
    """Idempotent, acks=all producer: a retried send never duplicates within a partition."""
    options: dict[str, Any] = dict(
        bootstrap_servers=settings.kafka_bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=0,
        retries=2**31 - 1,
        max_in_flight_requests_per_connection=5,
        max_request_size=16 * 1024 * 1024,
        **RECONNECT_OPTIONS,
        **security_options(settings),
    )
    options.update(overrides)
    return KafkaProducer(**options)


def make_consumer(settings: Settings, *topics: str, group_id: str | None, **overrides: Any) -> KafkaConsumer:
    """Manual-commit consumer: offsets move only after the work they stand for is done."""
    options: dict[str, Any] = dict(
        bootstrap_servers=settings.kafka_bootstrap,
        group_id=group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=100,
        fetch_min_bytes=1,
        max_partition_fetch_bytes=16 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1_000,
        **RECONNECT_OPTIONS,
        **security_options(settings),
    )
    options.update(overrides)
    return KafkaConsumer(*topics, **options)
