"""Worker: runs the batches the scheduler sends it.

Consumes its own ``meridian.dispatch.<worker_id>`` (group ``meridian.worker.<worker_id>``); produces one
``Result`` per query on its application's ``meridian.results.<application>`` and ``WorkerEvent``s
(heartbeat, batch started/finished, variant loaded/unloaded) on ``meridian.worker-events``, through
librdkafka (`shared.adapters.rdkafka`: the per-query path). A command's offset is committed only after
everything it produced is acknowledged by the broker, so a restarted worker redoes unfinished work.

Run: ``python -m services.worker --worker-id w1 --variants digits-mlp-s [--threads 2]`` (real onnxruntime,
measuring its variants on this machine at its first start) or
``python -m services.worker --worker-id g1 --emulate g4dn.xlarge --profile-source kairos --variants rm2``.
"""
from __future__ import annotations

import argparse
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
from confluent_kafka import Consumer
from pydantic import ValidationError

from schemas import (
    BatchFinished,
    BatchRefused,
    DispatchBatch,
    LoadVariant,
    QueryWork,
    Result,
    ResultStatus,
    UnloadVariant,
    VariantLoaded,
    VariantUnloaded,
    WorkerHeartbeat,
    WorkerStopped,
    wire,
    worker_command_adapter,
)
from services.worker.executors import EmulatedExecutor, ExecutionError, Executor, OnnxExecutor
from services.worker.self_measure import MeasurementCache
from shared import metrics
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error, publish_dead_letter
from shared.adapters.kafka_io import ensure_core_topics
from shared.adapters.rdkafka import RdProducer, assign_at_committed, make_rd_consumer, poll_messages
from shared.device_identity import device_price
from shared.onnx_runtime import PROVIDER_NAMES, provider_named
from shared.profiles.sources import load_profile_source
from shared.serving.expiry import expired_reason, split_by_deadline
from shared.settings import Settings
from shared.tensors import read_batch

SERVICE = "worker"
COMMIT_INTERVAL_S = 0.2

logger = logging.getLogger(__name__)


@dataclass
class WorkerContext:
    worker_id: str
    executor: Executor
    producer: RdProducer
    max_batch: int
    price_per_hour: float
    #: this process's life; batches addressed to an earlier one were re-queued by the scheduler
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex)
    busy_s: float = 0.0
    inflight: int = 0

    @property
    def emulated_label(self) -> str:
        return "true" if self.executor.emulated else "false"


def handle_dispatch(ctx: WorkerContext, batch: DispatchBatch, received_at: float, binary: bytes | memoryview = b"") -> None:
    if batch.incarnation not in (None, ctx.incarnation):
        metrics.WORKER_STALE_BATCHES.labels(ctx.worker_id).inc()
        return  # sent to this worker's previous process: the scheduler re-queues it, running it would repeat it
    if batch.variant not in ctx.executor.loaded():
        metrics.WORKER_REFUSED_BATCHES.labels(ctx.worker_id).inc()
        ctx.producer.send(topics.WORKER_EVENTS, key=ctx.worker_id.encode(), value=BatchRefused(
            worker_id=ctx.worker_id, batch_id=batch.batch_id, variant=batch.variant,
            reason=f"variant {batch.variant!r} is not loaded on this worker", at=time.time()).model_dump_json().encode())
        return
    started = time.time()
    try:
        inputs = dict(zip((q.query_id for q in batch.queries), read_batch([q.inputs for q in batch.queries], binary)))
    except ValueError as exc:
        inputs, unreadable = {}, str(exc)
    else:
        unreadable = None
    queries, expired = split_by_deadline(batch.queries, started)
    for query in expired:
        publish_result(ctx, query, Result(
            query_id=query.query_id, query_position=query.query_position, application=query.application,
            status=ResultStatus.DROPPED, priority=query.priority,
            reason=expired_reason(query, started, ctx.worker_id), worker_id=ctx.worker_id, batch_id=batch.batch_id,
            timestamps=query.timestamps.model_copy(update=dict(worker_received=received_at, result_sent=time.time()))))
    failed: dict[str, str] = {}
    arrays: list[np.ndarray] = []
    for query in queries:
        given = inputs.get(query.query_id)
        if unreadable is not None:
            failed[query.query_id] = unreadable
        elif given is not None:
            try:
                array = ctx.executor.prepare(batch.variant, given)
            except ExecutionError as exc:
                failed[query.query_id] = str(exc)
                continue
            if array is not None:
                arrays.append(array)
    served = [q for q in queries if q.query_id not in failed]
    rows = sum(q.batch_size for q in served)
    outputs, error = None, None
    if served:
        try:
            outputs = ctx.executor.run(batch.variant, _concatenate(arrays, len(served)), rows)
        except (ExecutionError, ValueError) as exc:
            error = str(exc)
    finished = time.time()
    compute_s = finished - started
    ctx.busy_s += compute_s
    metrics.WORKER_BUSY.labels(ctx.worker_id, ctx.executor.device, ctx.emulated_label).inc(compute_s)
    dollars_per_row = ctx.price_per_hour * compute_s / 3600.0 / max(rows, 1)
    offset = 0
    for query in queries:
        predictions, reason = None, failed.get(query.query_id, error)
        if outputs is not None and query.query_id not in failed:
            predictions = np.asarray(outputs[offset:offset + query.batch_size]).argmax(axis=-1).tolist()
            offset += query.batch_size
        result = Result(
            query_id=query.query_id, query_position=query.query_position, application=query.application,
            status=ResultStatus.ERROR if reason else ResultStatus.OK, priority=query.priority, reason=reason,
            note=query.note,
            variant=batch.variant, worker_id=ctx.worker_id, device=ctx.executor.device,
            emulated=ctx.executor.emulated, batch_id=batch.batch_id, predictions=predictions,
            cost_dollars=dollars_per_row * query.batch_size, timestamps=query.timestamps.model_copy(update=dict(
                worker_received=received_at, compute_started=started, compute_finished=finished,
                result_sent=time.time())))
        publish_result(ctx, query, result, compute_s)
        if reason is None:
            metrics.SERVED_ROWS.labels(query.application, batch.variant).inc(query.batch_size)
    ctx.producer.send(topics.WORKER_EVENTS, key=ctx.worker_id.encode(), value=BatchFinished(
        worker_id=ctx.worker_id, batch_id=batch.batch_id, variant=batch.variant, device=ctx.executor.device,
        rows=rows, compute_ms=compute_s * 1000.0, ok=error is None, compute_started_at=started,
        at=time.time()).model_dump_json().encode())


def _concatenate(arrays: list[np.ndarray], queries: int) -> np.ndarray | None:
    """The served queries' inputs as one batch; ``None`` when none carries any (emulated work)."""
    if not arrays:
        return None
    if len(arrays) != queries:
        raise ExecutionError("some queries of the batch carry inputs and some do not")
    if len({(a.shape[1:], a.dtype) for a in arrays}) > 1:
        raise ExecutionError("queries of one batch have different input shapes or datatypes")
    return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]


def publish_result(ctx: WorkerContext, query: QueryWork, result: Result, compute_s: float | None = None) -> None:
    ctx.producer.send(topics.results_topic(query.application), key=query.query_id.encode(),
                      value=result.model_dump_json().encode())
    observe_result(result, query.slo_ms, compute_s)


def observe_result(result: Result, slo_ms: float, compute_s: float | None) -> None:
    app, stamps = result.application or "unknown", result.timestamps
    reason = "none" if result.reason is None else ("deadline" if result.status is ResultStatus.DROPPED else "execution")
    metrics.RESULTS.labels(app, result.status.value, reason).inc()
    within_slo = None
    if result.cost_dollars:
        metrics.ANSWER_COST.labels(app).inc(result.cost_dollars)
    if compute_s is not None:
        metrics.HOP_LATENCY.labels(app, "compute").observe(compute_s)
    if stamps.dispatched is not None and stamps.worker_received is not None:
        metrics.HOP_LATENCY.labels(app, "dispatch").observe(max(0.0, stamps.worker_received - stamps.dispatched))
    if stamps.client_sent is not None and stamps.result_sent is not None:
        latency = max(0.0, stamps.result_sent - stamps.client_sent)
        metrics.QUERY_LATENCY.labels(app).observe(latency)
        within_slo = result.status is ResultStatus.OK and latency * 1000.0 <= slo_ms
        if within_slo:
            metrics.GOODPUT.labels(app).inc()
    metrics.count_class_result(result, within_slo=bool(within_slo))


def handle_load(ctx: WorkerContext, command: LoadVariant, received_at: float, *, measure: bool = False) -> None:
    """Load a variant (the scheduler's command, or one the worker starts with: those are ``measure``d)."""
    try:
        load_ms = ctx.executor.load(command.variant, measure=measure)
    except ExecutionError as exc:
        logger.warning("worker %s: cannot load %s: %s", ctx.worker_id, command.variant, exc)
        return
    ctx.producer.send(topics.WORKER_EVENTS, key=ctx.worker_id.encode(), value=VariantLoaded(
        worker_id=ctx.worker_id, variant=command.variant, load_ms=load_ms, at=time.time()).model_dump_json().encode())
    metrics.WORKER_LOADED_VARIANTS.labels(ctx.worker_id).set(len(ctx.executor.loaded()))
    measured = ctx.executor.measured().get(command.variant)
    for batch, ms in (measured.batch_latency_ms.items() if measured else ()):
        metrics.WORKER_MEASURED_LATENCY.labels(ctx.worker_id, command.variant, str(batch)).set(ms)


def handle_unload(ctx: WorkerContext, command: UnloadVariant, received_at: float) -> None:
    measured = ctx.executor.measured().get(command.variant)
    ctx.executor.unload(command.variant)
    for batch in (measured.batch_latency_ms if measured else ()):
        metrics.WORKER_MEASURED_LATENCY.remove(ctx.worker_id, command.variant, str(batch))
    ctx.producer.send(topics.WORKER_EVENTS, key=ctx.worker_id.encode(), value=VariantUnloaded(
        worker_id=ctx.worker_id, variant=command.variant, at=time.time()).model_dump_json().encode())
    metrics.WORKER_LOADED_VARIANTS.labels(ctx.worker_id).set(len(ctx.executor.loaded()))


HANDLERS = {LoadVariant: handle_load, UnloadVariant: handle_unload}


def heartbeat(ctx: WorkerContext, interval_s: float, stop: threading.Event) -> None:
    last_busy, last_at = ctx.busy_s, time.time()
    while not stop.is_set():
        now = time.time()
        busy = min(1.0, max(0.0, (ctx.busy_s - last_busy) / max(now - last_at, 1e-6)))
        last_busy, last_at = ctx.busy_s, now
        ctx.producer.send(topics.WORKER_EVENTS, key=ctx.worker_id.encode(), value=WorkerHeartbeat(
            worker_id=ctx.worker_id, incarnation=ctx.incarnation, device=ctx.executor.device,
            emulated=ctx.executor.emulated, variants=ctx.executor.loaded(), max_batch=ctx.max_batch, inflight=ctx.inflight,
            busy_fraction=busy, price_per_hour=ctx.price_per_hour, machine=ctx.executor.machine,
            measured=ctx.executor.measured(), at=now).model_dump_json().encode())
        stop.wait(interval_s)


def serve(ctx: WorkerContext, consumer: Consumer, stop: threading.Event, *, commit_interval_s: float) -> None:
    """Results go out as each batch finishes; offsets move at most every ``commit_interval_s``, and only
    after a flush: a crash redoes at most that much work, and the client drops the repeats."""
    committed_at = time.monotonic()
    pending = False
    while not stop.is_set():
        messages = poll_messages(consumer, timeout_s=0.2, max_messages=64)
        pending = pending or bool(messages)
        for message in messages:
            received_at = time.time()
            try:
                header, binary = wire.unpack(message.value())
                command = worker_command_adapter.validate_json(header)
            except ValueError as exc:  # a ValidationError, or a wire.FrameError
                reason = describe_validation_error(exc) if isinstance(exc, ValidationError) else str(exc)
                publish_dead_letter(ctx.producer, message.value(), reason, service=SERVICE,
                                    source_topic=message.topic(), partition=message.partition(),
                                    offset=message.offset())
                continue
            ctx.inflight = 1
            if isinstance(command, DispatchBatch):
                handle_dispatch(ctx, command, received_at, binary)
            else:
                HANDLERS[type(command)](ctx, command, received_at)
            ctx.inflight = 0
        if pending and time.monotonic() - committed_at >= commit_interval_s:
            ctx.producer.flush()  # everything the handled commands produced is on the broker ...
            consumer.commit(asynchronous=True)  # ... before their offsets (the positions after them) move
            committed_at, pending = time.monotonic(), False
    ctx.producer.flush()
    if pending:
        consumer.commit(asynchronous=False)


def bootstrap(args: argparse.Namespace, settings: Settings) -> tuple[WorkerContext, Consumer]:
    profiles = load_profile_source(args.profile_source, settings)
    images = {p.variant: p.image_preprocessing for p in profiles.variants if p.image_preprocessing is not None}
    if args.emulate:
        executor: Executor = EmulatedExecutor(profiles, args.emulate, seed=args.seed)
    else:
        cache = MeasurementCache(settings.var_dir / "measured") if settings.worker_self_measure else None
        executor = OnnxExecutor(settings.models_dir, threads=args.threads, device=args.device,
                                provider=args.provider and provider_named(args.provider), images=images, cache=cache,
                                max_batch=args.max_batch or 64, gpu_memory_share=settings.worker_gpu_memory_share)
        logger.info("worker %s computes on %s: %s, %d thread(s)%s", args.worker_id, executor.device,
                    executor.machine.name, executor.machine.threads,
                    f", {executor.machine.memory_mb} MiB" if executor.machine.memory_mb else "")
    price = device_price(executor.device, settings.device_prices, profiles.device_by_name)
    ensure_core_topics(settings, topics.TopicSpec(topics.dispatch_topic(args.worker_id), 1))
    producer = RdProducer(settings)
    profiled = [max(p.batch_latency_ms) for p in profiles.variants if p.device == executor.device]
    max_batch = args.max_batch or max(profiled, default=64)
    ctx = WorkerContext(args.worker_id, executor, producer, max_batch=max_batch, price_per_hour=price)
    for variant in args.variants:
        handle_load(ctx, LoadVariant(worker_id=args.worker_id, variant=variant), time.time(), measure=True)
    # The worker's topic has one partition and one reader: assign it (no group rebalances to wait for)
    # and commit under the worker's group, so a restart with the same id resumes where it stopped.
    consumer = make_rd_consumer(settings, group_id=topics.worker_group(args.worker_id))
    assign_at_committed(consumer, topics.dispatch_topic(args.worker_id), 0)
    return ctx, consumer


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m services.worker", description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--variants", type=lambda s: [v for v in s.split(",") if v], default=[])
    parser.add_argument("--emulate", metavar="DEVICE", help="replay DEVICE's measured profile instead of computing")
    parser.add_argument("--threads", type=_positive_int, default=1,
                        help="intra-op threads of a real worker on the CPU (its device key is cpu-<threads>t)")
    parser.add_argument("--device", metavar="KEY", default=None,
                        help="the device key a real worker is scheduled and billed as (default: derived from "
                             "the machine it finds: cpu-<threads>t, gpu-<name>)")
    parser.add_argument("--provider", choices=sorted(PROVIDER_NAMES), default=None,
                        help="compute on this onnxruntime provider (default: CUDA where it really runs, else the CPU)")
    parser.add_argument("--profile-source", default="dir", help="'dir' (profiles/*.json) or 'kairos' (authors' data)")
    parser.add_argument("--max-batch", type=int, default=None,
                        help="most rows per batch (default: the largest profiled batch of the device, else 64)")
    parser.add_argument("--metrics-port", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ready-at", type=float, default=None, metavar="UNIX_S",
                        help="load nothing and say nothing before then (an emulated machine's boot)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    settings = Settings()
    if args.ready_at is not None:
        time.sleep(max(0.0, args.ready_at - time.time()))
    ctx, consumer = bootstrap(args, settings)
    metrics.serve_metrics(args.metrics_port or settings.worker_metrics_port, settings.bind_host)
    metrics.WORKER_INFO.labels(ctx.worker_id, ctx.executor.device, ctx.emulated_label).set(1)
    metrics.WORKER_PRICE.labels(ctx.worker_id).set(ctx.price_per_hour)
    metrics.WORKER_BUSY.labels(ctx.worker_id, ctx.executor.device, ctx.emulated_label)  # series exist while idle
    metrics.DEAD_LETTERS.labels(SERVICE)
    for application in settings.applications:
        metrics.GOODPUT.labels(application)
    stop = threading.Event()
    beat = threading.Thread(target=heartbeat, args=(ctx, settings.heartbeat_interval_s, stop), daemon=True)
    beat.start()
    import signal

    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        serve(ctx, consumer, stop, commit_interval_s=COMMIT_INTERVAL_S)
    except KeyboardInterrupt:
        stop.set()
    finally:
        ctx.producer.send(topics.WORKER_EVENTS, key=ctx.worker_id.encode(),
                          value=WorkerStopped(worker_id=ctx.worker_id, at=time.time()).model_dump_json().encode())
        ctx.producer.flush(timeout=5)
        consumer.close()
        ctx.producer.close(timeout=5)
