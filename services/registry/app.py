"""Registry: INFaaS's Model Registrar and monitoring daemon.

Consumes ``meridian.registrations`` (group ``meridian.registry``): validates each `RegisterModel`,
generates and profiles its variants, writes the variant files to ``MERIDIAN_MODELS_DIR``, the profile set
to ``<MERIDIAN_PROFILES_DIR>/registered/<model>.json`` and the profiles and ``app -> model`` to the
metadata store (Redis), then replies a `RegistrationReply` on ``meridian.registry-replies``; a rejected
registration's input is also copied to ``meridian.dead-letter``. A registration's offset is committed
once its reply is acknowledged. While it works it sends `RegistrationProgress` on the same topic and key
(validated, each precision generated, each variant group about to be profiled), so a waiting client
can tell a slow registration from a lost one.

A second thread follows ``meridian.worker-events`` (no consumer group, from the latest offset) and every
monitoring window (``MERIDIAN_INFAAS_MONITOR_WINDOW_S``, 2 s) writes per-instance QPS, latency, state and
per-worker utilization to the metadata store (`shared.infaas.monitor`, through `shared.infaas.daemon`).

At start it seeds the store with the scheduler's catalogue (``MERIDIAN_PROFILE_SOURCES``, previously
registered models) and ``MERIDIAN_APPLICATIONS``, so the store is the one source of profiles.

Run: ``python -m services.registry [--metrics-port PORT]``
"""
from __future__ import annotations

import argparse
import logging
import signal
import threading
import time
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field

from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord
from pydantic import ValidationError

from schemas import (
    MAX_MODEL_BYTES,
    MAX_VALIDATION_BYTES,
    RegisterModel,
    RegistrationProgress,
    RegistrationReply,
    worker_event_adapter,
)
from shared.infaas.daemon import InstanceMonitor
from services.registry.registrar import REGISTERED_SUBDIR, RegistrarConfig, register_model
from services.registry.validation import RegistrationRejected
from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import best_effort_id, describe_validation_error, send_dead_letter
from shared.adapters.infaas_store import RedisMetadataStore
from shared.adapters.kafka_io import ensure_core_topics, ensure_results_topic, make_consumer, make_producer
from shared.infaas.metadata import MetadataStore
from shared.infaas.monitor import MonitorConfig
from shared.profiles.format import ProfileSet
from shared.profiles.sources import load_profile_source
from shared.settings import Settings

SERVICE = "registry"
GROUP = "meridian.registry"

logger = logging.getLogger("services.registry")



@dataclass
class RegistryContext:
    config: RegistrarConfig
    store: MetadataStore
    producer: KafkaProducer
    settings: Settings
    #: model family -> default SLO (ms); shared with the monitor, which sizes instances' peak rates by it
    family_slo_ms: dict[str, float] = field(default_factory=dict)


def _size_reason(exc: ValidationError) -> str | None:
    """A clear reason for the wire contract's size limits, which pydantic words as string lengths."""
    limits = {"model_onnx_b64": ("model", MAX_MODEL_BYTES),
              "validation_npz_b64": ("validation set", MAX_VALIDATION_BYTES)}
    for error in exc.errors():
        field = next(iter(error.get("loc") or ()), None)
        if error.get("type") == "string_too_long" and field in limits:
            what, limit = limits[field]
            return f"{what} exceeds the {limit}-byte limit"
    return None


def publish(ctx: RegistryContext, message: RegistrationProgress | RegistrationReply) -> None:
    """Keyed by request id, so a request's progress and its reply share a partition and arrive in order."""
    ctx.producer.send(topics.REGISTRY_REPLIES, key=message.request_id.encode(),
                      value=message.model_dump_json().encode())


def reply(ctx: RegistryContext, answer: RegistrationReply, *, started: float | None = None) -> None:
    """Send the answer; ``started`` (``time.perf_counter()`` at receipt) times the registration."""
    publish(ctx, answer)
    metrics.REGISTRATIONS.labels(answer.status).inc()
    if started is not None:
        metrics.REGISTRATION_DURATION.labels(answer.status).observe(time.perf_counter() - started)


def reject(ctx: RegistryContext, reason: str, record: ConsumerRecord, *, request_id: str, model_name: str,
           app_id: str, started: float | None = None) -> None:
    logger.info("rejected %r (%s): %s", model_name, request_id, reason)
    reply(ctx, RegistrationReply(request_id=request_id, model_name=model_name, app_id=app_id, status="rejected",
                                 reason=reason[:2000], at=time.time()), started=started)
    send_dead_letter(ctx.producer, record, reason, service=SERVICE)


def handle_register(ctx: RegistryContext, command: RegisterModel, record: ConsumerRecord) -> None:
    started = time.perf_counter()
    ids = dict(request_id=command.request_id, model_name=command.model_name, app_id=command.app_id, started=started)
    try:
        ensure_results_topic(ctx.settings, command.app_id)  # before the scheduler hears of the application
        answer = register_model(command, config=ctx.config, store=ctx.store,
                                progress=lambda message: publish(ctx, message))
    except RegistrationRejected as exc:
        reject(ctx, str(exc), record, **ids)
        return
    except Exception as exc:  # noqa: BLE001 - a bug must not wedge the topic; the developer gets the reason
        logger.error("registration of %s failed:\n%s", command.model_name, traceback.format_exc())
        reject(ctx, f"internal error while registering: {type(exc).__name__}: {exc}", record, **ids)
        return
    ctx.family_slo_ms[command.model_name] = command.slo_ms
    logger.info("registered %s for %s: %d variant profiles in %.1f s", command.model_name, command.app_id,
                len(answer.variants), time.perf_counter() - started)
    try:
        export_catalogue([ProfileSet.load(ctx.config.profiles_dir / REGISTERED_SUBDIR / f"{command.model_name}.json")])
    except (OSError, ValueError):  # the store has the profiles; only the gauges would be late
        logger.warning("cannot export the catalogue gauges of %s:\n%s", command.model_name, traceback.format_exc())
    reply(ctx, answer, started=started)


HANDLERS = {RegisterModel: handle_register}


def serve_registrations(ctx: RegistryContext, consumer: KafkaConsumer, stop: threading.Event) -> None:
    while not stop.is_set():
        for records in consumer.poll(timeout_ms=200, max_records=1).values():
            for record in records:
                started = time.perf_counter()
                try:
                    command = RegisterModel.model_validate_json(record.value)
                except ValidationError as exc:
                    reject(ctx, _size_reason(exc) or describe_validation_error(exc), record,
                           started=started,
                           **{f: best_effort_id(record.value, f) for f in ("request_id", "model_name", "app_id")})
                else:
                    HANDLERS[type(command)](ctx, command, record)
            ctx.producer.flush()
            consumer.commit()


def follow_worker_events(monitor: InstanceMonitor, consumer: KafkaConsumer, stop: threading.Event) -> None:
    """Feed worker events to the monitor; flush it once per window (``MERIDIAN_INFAAS_MONITOR_WINDOW_S``)."""
    interval_s = monitor.config.window_s
    while not stop.is_set():
        for records in consumer.poll(timeout_ms=200).values():
            for record in records:
                try:
                    event = worker_event_adapter.validate_json(record.value)
                except ValidationError:
                    continue  # the scheduler dead-letters bad worker events; one copy is enough
                monitor.observe(event, time.time())
        now = time.time()
        if now - monitor.last_flush_s >= interval_s:
            try:
                monitor.flush(now)
            except Exception:  # noqa: BLE001 - the store may be briefly unreachable; next window retries
                logger.warning("monitor flush failed:\n%s", traceback.format_exc())


def seed_catalogue(store: MetadataStore, settings: Settings) -> tuple[dict[str, str], dict[str, float]]:
    """Store every profile the scheduler serves and the configured applications; return device kinds and
    each family's default SLO (ms)."""
    profile_sets = [load_profile_source(name, settings) for name in settings.profile_sources]
    profile_sets += [ProfileSet.load(f) for f in sorted((settings.profiles_dir / REGISTERED_SUBDIR).glob("*.json"))]
    for profile_set in profile_sets:
        store.put_profiles(profile_set)
    for app_id, families in settings.applications.items():
        for family in families:
            store.register_model(app_id, family)
    export_catalogue(profile_sets)
    return ({d.name: d.kind for ps in profile_sets for d in ps.devices},
            {family: slo for ps in profile_sets for family, slo in ps.slo_ms.items()})


def export_catalogue(profile_sets: Iterable[ProfileSet]) -> None:
    """Each variant's profiled accuracy and each device's price as gauges, for PromQL to join with traffic
    (effective accuracy, running cost of the fleet)."""
    for profile_set in profile_sets:
        for device in profile_set.devices:
            metrics.DEVICE_PRICE.labels(device.name).set(device.price_per_hour)
        for profile in profile_set.variants:
            if profile.accuracy is not None:
                metrics.VARIANT_ACCURACY.labels(profile.variant).set(profile.accuracy)


def bootstrap(settings: Settings) -> tuple[RegistryContext, KafkaConsumer, InstanceMonitor, KafkaConsumer]:
    ensure_core_topics(settings)
    store = RedisMetadataStore.from_url(settings.redis_url)
    device_kinds, family_slo_ms = seed_catalogue(store, settings)
    ctx = RegistryContext(RegistrarConfig(settings.models_dir, settings.profiles_dir), store, make_producer(settings),
                          settings, family_slo_ms)
    registrations = make_consumer(settings, topics.REGISTRATIONS, group_id=GROUP, max_poll_interval_ms=600_000)
    # fetch the topic's metadata before the first join: a join that races it gets no partition
    registrations.partitions_for_topic(topics.REGISTRATIONS)
    events = make_consumer(settings, topics.WORKER_EVENTS, group_id=None, auto_offset_reset="latest")
    monitor = InstanceMonitor(store, device_kinds=device_kinds, worker_timeout_s=settings.worker_timeout_s,
                              last_flush_s=time.time(), config=MonitorConfig.from_settings(settings),
                              family_slo_ms=family_slo_ms)
    return ctx, registrations, monitor, events


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m services.registry", description=__doc__.split("\n\n")[0])
    parser.add_argument("--metrics-port", type=int, default=None, help="default: MERIDIAN_REGISTRY_METRICS_PORT")
    args = parser.parse_args(argv)
    settings = Settings()
    ctx, registrations, monitor, events = bootstrap(settings)
    metrics.serve_metrics(args.metrics_port or settings.registry_metrics_port, settings.bind_host)
    for status in ("registered", "rejected"):  # at 0 before the first registration, so increase() counts it
        metrics.REGISTRATIONS.labels(status)
        metrics.REGISTRATION_DURATION.labels(status)
    metrics.DEAD_LETTERS.labels(SERVICE)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    watcher = threading.Thread(target=follow_worker_events, args=(monitor, events, stop), daemon=True)
    watcher.start()
    metrics.REGISTRY_READY.set(1)
    logger.info("registry ready: models in %s, profiles in %s", settings.models_dir, settings.profiles_dir)
    try:
        serve_registrations(ctx, registrations, stop)
    except KeyboardInterrupt:
        stop.set()
    finally:
        watcher.join(timeout=5)
        registrations.close()
        events.close()
        ctx.producer.close(timeout=5)
