"""Every Prometheus metric Meridian exports, defined once (dashboards and tests import these names).

Conventions: base units in names (``_seconds``), ``_total`` counters, histograms for every latency so
quantiles aggregate across instances.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram, start_http_server

if TYPE_CHECKING:
    from schemas import Result

LATENCY_BUCKETS = (0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
                   0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)

QUERY_LATENCY = Histogram(
    "meridian_query_latency_seconds", "End-to-end latency, client send to result sent.",
    ["application"], buckets=LATENCY_BUCKETS)
HOP_LATENCY = Histogram(
    "meridian_hop_latency_seconds", "Latency of one hop (queue_wait, dispatch, compute).",
    ["application", "hop"], buckets=LATENCY_BUCKETS)
CLIENT_LATENCY = Histogram(
    "meridian_client_latency_seconds", "Latency a client saw: send to result received.",
    ["application", "status"], buckets=LATENCY_BUCKETS)
RESULTS = Counter(
    "meridian_results_total", "Final results by status and reason class.", ["application", "status", "reason"])
GOODPUT = Counter(
    "meridian_goodput_queries_total", "Queries answered ok within their SLO.", ["application"])
CLASS_RESULTS = Counter(
    "meridian_class_results_total", "Final results by priority class (1 served first, 9 last) and outcome: "
    "within_slo, late, dropped, rejected, error (their ratio is each class's SLO attainment).",
    ["application", "priority", "outcome"])
QUEUE_DEPTH = Gauge("meridian_queue_depth", "Queries waiting in the scheduler.", ["application"])
DISPATCHED_BATCH_ROWS = Histogram(
    "meridian_batch_rows", "Rows per dispatched batch.", ["variant"], buckets=BATCH_BUCKETS)
DEAD_LETTERS = Counter("meridian_dead_letters_total", "Messages copied to the dead-letter topic.", ["service"])

WORKER_BUSY = Counter(
    "meridian_worker_busy_seconds_total", "Time spent computing batches.", ["worker", "device", "emulated"])
WORKER_INFO = Gauge(
    "meridian_worker_info", "1 per live worker, labelled by device type and emulation.",
    ["worker", "device", "emulated"])
WORKER_PRICE = Gauge(
    "meridian_worker_price_dollars_per_hour", "The $/h a worker is billed at (its device's price).", ["worker"])
WORKER_MEASURED_LATENCY = Gauge(
    "meridian_worker_measured_latency_ms", "A loaded variant's batch latency as a real worker measured it on its "
    "own machine.", ["worker", "variant", "batch"])
WORKER_LOADED_VARIANTS = Gauge(
    "meridian_worker_loaded_variants", "Variants loaded on a worker.", ["worker"])
METADATA_REFRESH_FAILURES = Counter(
    "meridian_metadata_refresh_failures_total", "Metadata-store reads that failed (serving went on from the cache).")
WORKER_STALE_BATCHES = Counter(
    "meridian_worker_stale_batches_total", "Batches skipped because they were sent to an earlier process of the "
    "worker (the scheduler re-queued them).", ["worker"])
WORKER_REFUSED_BATCHES = Counter(
    "meridian_worker_refused_batches_total", "Batches handed back unrun because their variant had been unloaded "
    "(the scheduler re-queues them).", ["worker"])
WORKERS_KNOWN = Gauge("meridian_scheduler_workers", "Workers the scheduler currently sees alive.")
TRANSPORT_RESERVE = Gauge(
    "meridian_scheduler_transport_reserve_ms",
    "The quantile of each hop around a batch's compute that a query's SLO keeps for the transport: ``start`` "
    "(dispatch to compute start), ``answer`` (compute end to the end heard); policies plan compute within the rest.",
    ["hop"])
PROFILE_DRIFT = Gauge(
    "meridian_scheduler_profile_drift",
    "Per real worker and variant, its batches' compute over the latency the scheduler predicted for them "
    "(moving average, `shared.serving.drift`): beyond 1.5 or below 1/1.5 the profile it is served by has drifted.",
    ["worker", "variant"])
OWNED_PARTITIONS = Gauge("meridian_scheduler_query_partitions",
                         "Partitions of meridian.queries this scheduler process owns: its share of the applications.")
SCHEDULER_POLICY = Gauge(
    "meridian_scheduler_policy", "1 for the dispatch policy serving an application now, 0 for one that served it "
    "before.", ["application", "policy"])
DISPATCHED_QUERIES = Counter(
    "meridian_scheduler_dispatched_queries_total", "Queries the scheduler dispatched, by application and the "
    "dispatch policy that chose their batch.", ["application", "policy"])

PLANNER_SOLVE = Histogram(
    "meridian_planner_solve_seconds", "Time to compute one plan.", ["service", "planner"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
PLANS = Counter("meridian_plans_total", "Plans published, by status.", ["service", "status"])
FLEET_COST = Gauge("meridian_fleet_cost_dollars_per_hour", "Cost of the planned fleet.", ["application"])
ANSWER_COST = Counter("meridian_answer_cost_dollars_total", "The answers' shares of the bill (each answer's rows' "
                      "share of its batch's compute at its worker's price), by application.", ["application"])
FLEET_WORKERS = Gauge("meridian_fleet_workers", "Workers the fleet service runs, by device.", ["device", "emulated"])


GATEWAY_REQUESTS = Counter("meridian_gateway_requests_total", "Inference requests the gateway answered, by door "
                           "(rest, grpc) and HTTP status (gRPC's mapped from it).", ["door", "application", "code"])
GATEWAY_LATENCY = Histogram("meridian_gateway_request_seconds", "From a request's arrival to its answer, by door "
                            "and application.", ["door", "application"], buckets=LATENCY_BUCKETS)
GATEWAY_INFLIGHT = Gauge("meridian_gateway_inflight", "Requests waiting for their answers.")


def count_class_result(result: "Result", *, within_slo: bool) -> None:
    """One final result in `CLASS_RESULTS` (a result answered before admission gave it a class counts under
    ``none``)."""
    outcome = result.status.value if result.status.value != "ok" else "within_slo" if within_slo else "late"
    priority = "none" if result.priority is None else str(result.priority)
    CLASS_RESULTS.labels(result.application or "unknown", priority, outcome).inc()


def serve_metrics(port: int, host: str) -> None:
    """Expose this process's metrics on ``host:port`` (127.0.0.1 by default)."""
    start_http_server(port, addr=host)

REGISTRATIONS = Counter("meridian_registry_registrations_total", "Registrations handled, by outcome.", ["status"])
REGISTRY_READY = Gauge("meridian_registry_ready", "1 once the registry consumes registrations and worker events.")

# Planner and plan appliers (the fleet service; an autoscaler would use the same counters).
PLANNED_WORKERS = Gauge(
    "meridian_planned_workers", "Workers of each device type in an application's latest plan.",
    ["application", "device"])
PLAN_TIMESTAMP = Gauge(
    "meridian_planner_last_plan_timestamp_seconds", "Unix time of an application's latest plan.", ["application"])
SCALING_ACTIONS = Counter(
    "meridian_scaling_actions_total", "Workers started or stopped by a plan applier or autoscaler.",
    ["service", "action", "device"])
FLEET_PLANS_RECEIVED = Counter(
    "meridian_fleet_plans_received_total", "Plans the fleet service read, by outcome (applied, skipped).",
    ["outcome"])

# Catalogue facts the registry exports, so accuracy and cost can be derived in PromQL.
VARIANT_ACCURACY = Gauge(
    "meridian_variant_accuracy_ratio", "Profiled top-1 accuracy of a model variant (0..1).", ["variant"])
DEVICE_PRICE = Gauge(
    "meridian_device_price_dollars_per_hour", "Price of one machine of a device type.", ["device"])
REGISTRATION_DURATION = Histogram(
    "meridian_registry_registration_seconds", "Time to handle one registration (validate, generate, profile).",
    ["status"], buckets=(0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0))

# Kafka consumer lag (services.observability.lag_exporter).
CONSUMER_LAG = Gauge(
    "meridian_kafka_consumer_lag_messages",
    "Messages a consumer group is behind the log end, summed over the topic's partitions it committed.",
    ["group", "topic"])
CONSUMER_GROUP_MEMBERS = Gauge(
    "meridian_kafka_consumer_group_members",
    "Subscribed members of a consumer group (readers that assign their partitions, like workers, count 0).",
    ["group"])
LAG_COLLECTIONS = Counter(
    "meridian_kafka_lag_collections_total", "Lag collection rounds, by outcome (ok, error).", ["status"])
LAG_COLLECT_DURATION = Histogram(
    "meridian_kafka_lag_collect_seconds", "Time to read every group's offsets and the log ends.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))

# Clients (the load generator).
CLIENT_QUERIES_SENT = Counter(
    "meridian_client_queries_sent_total", "Queries a client sent.", ["application"])

# Rows answered ok per application and variant: with meridian_variant_accuracy_ratio, the effective accuracy of
# each application. To be incremented by the worker (services/worker/app.py, handle_dispatch).
SERVED_ROWS = Counter(
    "meridian_served_rows_total", "Rows answered ok, by application and the variant that served them.",
    ["application", "variant"])
