"""One settings object per process, read once from ``MERIDIAN_*`` environment variables.

The same names are used by the local stack (``make``), ``docker-compose.yml`` and the tests.
"""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from schemas.wire import MAX_MESSAGE_BYTES

REPO_ROOT = Path(__file__).resolve().parents[1]


class KafkaSecurity(BaseSettings):
    """Client-side Kafka security; PLAINTEXT on the loopback stack, SASL/TLS where configured."""

    model_config = SettingsConfigDict(env_prefix="MERIDIAN_KAFKA_", extra="ignore")

    security_protocol: str = Field(default="PLAINTEXT", pattern="^(PLAINTEXT|SSL|SASL_PLAINTEXT|SASL_SSL)$")
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = None
    ssl_cafile: str | None = None


class InitialMachine(BaseModel):
    """A machine the autoscaler starts before its first poll, with the variants it loads."""

    device: str
    variants: list[str] = Field(default_factory=list)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MERIDIAN_", extra="ignore")

    #: every broker's listener, comma-separated (a client bootstraps while any one of them is up)
    kafka_bootstrap: str = "127.0.0.1:9092"
    #: how long a librdkafka client waits on a broker's answer before it gives the request up, refreshes its
    #: metadata and sends it again (to a partition's new leader): librdkafka's own default (60 s). A broker
    #: cut off from the network answers nothing and closes nothing; see docs/bench/hosts.md. librdkafka
    #: refuses less than a consumer's fetch wait (100 ms here) + 1 s
    kafka_socket_timeout_ms: int = Field(default=60_000, ge=1_100, le=300_000)
    #: Kafka nodes the local stack starts (``infra/kafka/kafka.sh``; topics get min(3, n) replicas)
    kafka_brokers: int = Field(default=1, ge=1, le=9)
    redis_url: str = "redis://127.0.0.1:6379/0"
    #: partitions of the queries topic: the unit by which scheduler processes split applications
    query_partitions: int = Field(default=4, ge=1)
    #: partitions of the results topic (keyed by query id)
    result_partitions: int = Field(default=4, ge=1)
    #: the dispatch policy the scheduler runs (see ``shared.policy.registry``)
    scheduler_policy: str = "fcfs"
    #: this scheduler's lasting name in its consumer group (Kafka static membership, ``group.instance.id``):
    #: restarted under the same name, it is handed its partitions back at once instead of after the
    #: session timeout (10 s). Each scheduler of a group needs its own; none: a dynamic member
    scheduler_instance: str | None = Field(default=None, pattern=r"^[A-Za-z0-9._-]{1,64}$")
    #: application -> the dispatch policy serving it, JSON (the others get ``scheduler_policy``); a
    #: ``SwitchPolicy`` on ``meridian.control`` changes one while serving. Names are checked where policies
    #: are built (``meridian serve`` and the scheduler refuse an unknown one), so settings import no policy
    application_policies: dict[str, str] = Field(default_factory=dict)
    #: application -> the latency SLO (ms) its queries carry: the fleet planner plans capacity for it
    #: (default: its family's profiled default SLO, which need not be what clients ask)
    application_slo_ms: dict[str, float] = Field(default_factory=dict)
    #: the RAMSIS policy set (its name in Redis) the ``ramsis`` dispatch policy serves with
    ramsis_policy_set: str = "digits"
    #: application -> the model families it may query
    applications: dict[str, list[str]] = Field(default_factory=lambda: {"digits": ["digits"]})
    profiles_dir: Path = REPO_ROOT / "profiles"
    #: where the scheduler's catalogue comes from: ``dir`` (profiles/*.json) and/or ``kairos``
    profile_sources: list[str] = Field(default_factory=lambda: ["dir"])
    #: runtime state (broker data, logs, built models); never committed
    var_dir: Path = REPO_ROOT / "var"
    models_dir: Path = REPO_ROOT / "var" / "models"
    #: the materials folder beside the checkout: ``data/`` (the Kairos authors' measurements, traces) and
    #: ``specs/``; read in place, never copied into the repository
    materials_dir: Path = REPO_ROOT.parent / "shared"
    #: a query's deadline is its client's ``sent_at`` plus this many SLOs; it is dropped explicitly once it
    #: can no longer make it (answering it late would only delay the queries behind it)
    drop_after_slo_multiple: float = Field(default=1.0, gt=0.0)
    #: a query's compute must leave this quantile of each transport hop of its SLO free (the hop to the
    #: worker and its start, the answer's way back: learnt from every finished batch) ...
    transport_quantile: float = Field(default=0.95, gt=0.0, le=1.0)
    #: ... this much before the first batches were measured ...
    transport_prior_ms: float = Field(default=30.0, ge=0.0)
    #: ... and at most this share of the SLO
    transport_max_share: float = Field(default=0.25, ge=0.0, lt=1.0)
    #: a worker whose batch (full, or one that left queries queued) is predicted to finish within this is
    #: sent its next batch already, so it does not idle while batches and their ends travel over Kafka
    #: (about one dispatch round trip)
    pipeline_lead_ms: float = Field(default=15.0, ge=0.0)
    #: ... behind any batch that was not full too (machines whose batch time grows with its rows: on make
    #: bench-cost's CPU machines one-row batches otherwise leave a machine idle up to a quarter of the time)
    pipeline_partial_batches: bool = False
    #: clients and services share one time domain (NTP): a query's ``sent_at`` more than this ahead of the
    #: scheduler's clock, or this far off its Kafka record's timestamp, is rejected
    max_clock_skew_s: float = Field(default=5.0, gt=0.0)
    #: a query id the scheduler admitted within this many seconds is answered once; a repeat is rejected
    duplicate_window_s: float = Field(default=600.0, gt=0.0)
    #: the most input bytes one dispatched batch carries: the message cap less 1 MiB for the batch's JSON
    #: (a query's header takes under 1 KB), so no batch's message exceeds the cap
    max_batch_payload_bytes: int = Field(default=MAX_MESSAGE_BYTES - 2**20, ge=1)
    #: application -> the priority class (1 served first, 9 last) of its queries that name none (default 5)
    application_priority: dict[str, Annotated[int, Field(ge=1, le=9)]] = Field(default_factory=dict)
    #: the priority gate (`shared.serving.priorities`): a lower class is shown to the policy only while the
    #: work shown would keep the fleet busy for at most this share of a higher class's SLO ...
    priority_hold_share: float = Field(default=0.35, gt=0.0, le=1.0)
    #: ... a higher class that sent a query within this many seconds
    priority_memory_s: float = Field(default=60.0, gt=0.0)
    #: a (re)starting scheduler reads the dispatch and results topics back to its oldest unacknowledged
    #: query, at most this far, so that it does not hand on again the re-read queries it had handed on
    restart_lookback_s: float = Field(default=120.0, ge=0.0)
    #: seconds between worker heartbeats; a worker silent for 3 of them is considered gone
    heartbeat_interval_s: float = Field(default=1.0, gt=0.0)
    load_stats_interval_s: float = Field(default=2.0, gt=0.0)
    #: the planner the planner service runs (``shared.policy.registry``)
    planner: str = "kairos"
    #: the fleet's cost budget, $/hour
    planner_budget_per_hour: float = Field(default=2.5, gt=0.0)
    #: the fleet a fleet-wide planner (``proteus``) places variants on: device type -> count
    #: (empty: one device of every profiled type)
    planner_fleet: dict[str, int] = Field(default_factory=dict)
    #: a fleet-wide planner re-plans at least this often (and earlier on a burst)
    replan_period_s: float = Field(default=30.0, gt=0.0)
    #: the Proteus planner plans for this many times the measured demand (the artifact's beta: 1.05);
    #: more keeps capacity for what profiles leave out (per-batch transport, service-time tails)
    proteus_headroom: float = Field(default=1.05, ge=1.0)
    #: Proteus' batching per worker: ``proteus`` (the paper's: wait while one more query still fits) or
    #: ``nexus`` (work-conserving, early drop; Meridian's extension: the paper's wait leaves each batch no
    #: slack, and below capacity it loses queries the work-conserving rule serves, see bench-serving)
    proteus_batching: str = Field(default="proteus", pattern="^(proteus|nexus)$")
    #: a query Kairos matched to an idle worker takes along the queries queued behind it while the batch
    #: still meets their QoS (Meridian's extension, the default); ``False`` is the paper's dispatch, one query
    #: at a time, which met the SLO for 74.1% of queries at 0.6x capacity live (bench-serving's
    #: ``kairos-paper``; bench-kairos runs the paper's design throughout)
    kairos_batch_queries: bool = True
    #: queries an application must have sent before its first plan
    planner_min_queries: int = Field(default=1000, ge=1)
    #: Kairos follows the load (Meridian's extension, ``shared.kairos.sizing``): the least-cost configuration
    #: within the budget whose upper bound is this many times the rate (one boot ahead while it rises); None:
    #: the paper's (the budget's best configuration, re-planned on size shifts only)
    planner_kairos_headroom: float | None = Field(default=None, ge=1.0)
    #: ... and it shrinks to a smaller fleet that holds this many times every recent window's rate
    #: (None: 1.25, or the headroom if higher)
    planner_kairos_scale_down_headroom: float | None = Field(default=None, ge=1.0)
    #: the autoscaler service's policy (live: ``infaas``; the baselines ``sm_plus`` and ``clipper_plus``
    #: run in the simulator)
    autoscaler_policy: str = "infaas"
    #: machines the autoscaler starts before its first poll, JSON ``[{"device": ..., "variants": [...]}]``
    #: (e.g. sized for the expected load, as the simulator's runs start; default none: the first load's
    #: queries wait for the machines it asks for)
    autoscaler_initial_fleet: list[InitialMachine] = Field(default_factory=list)
    #: seconds from asking for a machine until it can serve, for device types whose profile does not say (a
    #: local worker process starts in a few)
    autoscaler_worker_startup_s: float = Field(default=5.0, ge=0.0)
    #: how the autoscaler gets machines: ``local`` processes on its own host, or ``kubernetes`` pods made
    #: from the worker pools' templates (``services.kubernetes_machines``)
    autoscaler_launcher: Literal["local", "kubernetes"] = "local"
    #: the namespace the autoscaler's pods go to, and device -> the worker pool's StatefulSet whose pod
    #: template a machine of that device is made from, JSON ``{"cpu-1t": "meridian-worker-cpu"}``
    kubernetes_namespace: str = "default"
    kubernetes_worker_pools: dict[str, str] = Field(default_factory=dict)
    # The INFaaS monitor (``shared.infaas.monitor.MonitorConfig``), one for the registry, the autoscaler
    # and the simulator.
    #: span of the monitor's statistics and period of its state updates [spec §6.8: 2 s]
    infaas_monitor_window_s: float = Field(default=2.0, gt=0.0)
    #: share of the SLO one batch may take; an instance's peak rate uses batches within it [spec silent;
    #: 0.5 as the autoscaler and simulator used]
    infaas_latency_budget: float = Field(default=0.5, gt=0.0, le=1.0)
    #: the Model-Autoscaler's minimum headroom: it adds capacity when a worker's would fall below it [paper §5:
    #: 1.05, explored 1.01-1.1]; more headroom meets a rising load sooner, at a higher bill (make bench-cost)
    infaas_slack_threshold: float = Field(default=1.05, ge=1.0, le=2.0)
    #: headroom a scale-down must leave; unset: the slack threshold [paper: one threshold]; above it, a
    #: replica removed in a dip is not asked back by the next rise of the same size (less churn)
    infaas_scale_down_threshold: float | None = Field(default=None, ge=1.0, le=2.0)
    #: observed / profiled latency above which a not-overloaded instance is Interfered [spec §12.7: 1.5]
    infaas_interfered_ratio: float = Field(default=1.5, ge=1.0)
    #: ... and below which an Interfered one is Active again [spec §12.7: 1.25]
    infaas_mitigated_ratio: float = Field(default=1.25, ge=1.0)
    #: busy share of the window at which an instance counts as at peak [spec silent; the current 0.95]
    infaas_saturated_busy_fraction: float = Field(default=0.95, gt=0.0, le=1.0)
    #: Overloaded also when more than this many seconds of peak work are queued (0: off) [spec §12.8: 1 s]
    infaas_overload_queue_s: float = Field(default=1.0, ge=0.0)
    #: INFaaS' dispatcher leaves out workers busier than this over the monitor's window [REF: 0.8]; with
    #: Meridian's one queue an idle worker is never overloaded, and 1 keeps every worker (see bench-serving)
    infaas_max_dispatch_utilization: float = Field(default=0.8, gt=0.0, le=1.0)
    #: the device type a real (non-emulated) worker on this machine is
    local_device: str = "cpu-1t"
    #: device key -> $/h a real worker of that device is billed at, before its committed profiles' price
    #: (a machine that neither names is billed at 0, with a warning): ``{"cpu-8t": 0.34, "gpu-nvidia-l4": 0.8}``
    device_prices: dict[str, Annotated[float, Field(ge=0.0, allow_inf_nan=False)]] = Field(default_factory=dict)
    #: a real worker measures the variants it starts with on its own machine (cached under
    #: ``<var_dir>/measured/``, so a restart does not measure again) and the scheduler serves them by it
    worker_self_measure: bool = True
    #: the share of its GPU's memory a worker on CUDA may fill with loaded variants (`shared.device_memory`);
    #: a load past it is refused
    worker_gpu_memory_share: float = Field(default=0.9, gt=0.0, le=1.0)
    #: workers the fleet service starts get metrics ports from here upwards
    fleet_metrics_port_base: int = 9200
    scheduler_metrics_port: int = 9101
    worker_metrics_port: int = 9102
    loadgen_metrics_port: int = 9109
    planner_metrics_port: int = 9110
    fleet_metrics_port: int = 9111
    registry_metrics_port: int = 9112
    lag_exporter_metrics_port: int = 9113
    autoscaler_metrics_port: int = 9114
    #: the gateway's Open Inference Protocol REST port (``services.gateway``); it serves ``/metrics`` too
    gateway_port: int = 8000
    #: the gateway's gRPC port (the protocol's ``GRPCInferenceService``); 0: no gRPC door
    gateway_grpc_port: int = Field(default=8001, ge=0, le=65535)
    #: requests one gateway holds waiting for their answers; one more is answered 503 with Retry-After
    gateway_max_inflight: int = Field(default=1024, ge=1)
    #: the largest request body a gateway reads (413 beyond it, before it is read): a query's 4 MiB payload
    #: limit written as JSON ``data`` takes several times that
    gateway_max_request_bytes: int = Field(default=32 * 2**20, ge=1024)
    #: how long past a query's drop time (``drop_after_slo_multiple`` SLOs) a gateway waits for its answer
    #: before it answers 504 itself (the scheduler down, or the answer lost)
    gateway_answer_grace_s: float = Field(default=5.0, gt=0.0)
    #: SHA-256 (hex) of each bearer token a gateway accepts -> the applications it may query (``"*"``: all),
    #: JSON; none: callers need no token (`services.gateway.access`)
    gateway_tokens: dict[str, list[str]] = Field(default_factory=dict)
    #: ... and those stored in Redis (``meridian token add``), read again every ``gateway_token_refresh_s``:
    #: a caller then always needs a token
    gateway_redis_tokens: bool = False
    gateway_token_refresh_s: float = Field(default=5.0, gt=0.0)
    #: requests a second each caller may send a gateway (a token bucket of ``gateway_burst``); None: no limit
    gateway_rate_per_s: float | None = Field(default=None, gt=0.0)
    gateway_burst: int = Field(default=20, ge=1)
    #: the local stack's Prometheus (``make stack-up``, ``meridian stack up``, ``meridian status``)
    prometheus_port: int = 9090
    #: workers the autoscaler starts get metrics ports from here upwards
    autoscaler_worker_port_base: int = 9300
    bind_host: str = "127.0.0.1"
    kafka_security: KafkaSecurity = Field(default_factory=KafkaSecurity)

    @model_validator(mode="after")
    def _scale_down_leaves_the_slack(self) -> Settings:
        down = self.infaas_scale_down_threshold
        if down is not None and down < self.infaas_slack_threshold:
            raise ValueError(f"infaas_scale_down_threshold ({down:g}) must be at least "
                             f"infaas_slack_threshold ({self.infaas_slack_threshold:g}): a scale-down would leave "
                             "less headroom than the next poll scales up for")
        up, down = self.planner_kairos_headroom, self.planner_kairos_scale_down_headroom
        if up is not None and down is not None and down < up:
            raise ValueError(f"planner_kairos_scale_down_headroom ({down:g}) must be at least "
                             f"planner_kairos_headroom ({up:g}): a smaller fleet would hold less than the next "
                             "window grows for")
        return self

    @property
    def worker_timeout_s(self) -> float:
        """A worker silent for 3 heartbeats is gone (the scheduler's and INFaaS' monitoring daemon's rule)."""
        return 3 * self.heartbeat_interval_s

    @property
    def kairos_data_dir(self) -> Path:
        """The Kairos authors' measurements (HPDC'23 artifact): ``instance.json``, ``latency_*.json``, ..."""
        return self.materials_dir / "data" / "kairos"

    def azure_trace(self, name: str) -> Path:
        """One of the materials' Azure LLM inference traces (2023): ``code`` or ``conv``."""
        return self.materials_dir / "data" / "traces" / "azure_llm_2023" / f"{name}.csv"
