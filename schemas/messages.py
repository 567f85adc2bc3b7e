"""Message contracts for every Meridian topic (schema version 1).

Every message is JSON produced by ``model.model_dump_json()`` and read with ``Model.model_validate_json``.
Each carries ``schema_version``; a reader rejects versions it does not know. Field limits here are the
wire contract (sizes, ranges); policies validate their own math.

Topic -> model (names in ``shared.adapters.topics``):

=========================  =====================================  ===========================
topic                      value                                  key
=========================  =====================================  ===========================
meridian.queries           Query                                  application
meridian.results           Result                                 query id
meridian.dispatch.<wid>    WorkerCommand (DispatchBatch | ...)    batch id / variant
meridian.worker-events     WorkerEvent (Heartbeat, Batch..., ...) worker id
meridian.load-stats        LoadStatistics                         application
meridian.plans             AllocationPlan                         planner name
meridian.control           SwitchPolicy                           application
meridian.dead-letter       DeadLetter                             source topic
meridian.registrations     RegisterModel                          model name
meridian.registry-replies  RegistryReply (...Progress, ...Reply)  request id
=========================  =====================================  ===========================
"""
from __future__ import annotations

import math
from enum import Enum
from typing import Annotated, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, ModelWrapValidatorHandler, TypeAdapter, field_validator,
                      model_validator)

SCHEMA_VERSION = 1
#: the largest tensor payload a query may carry, decoded (bytes)
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
#: the most rows one query may carry
MAX_QUERY_ROWS = 4096

IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$"
Identifier = Annotated[str, Field(min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN)]
#: where a message sits in Kafka, ``<topic>/<partition>/<offset>``: no client chooses it, and no query id
#: (an `Identifier`) can equal it
Position = Annotated[str, Field(max_length=300, pattern=r"^[A-Za-z0-9._-]+/[0-9]+/[0-9]+$")]


def position(topic: str, partition: int, offset: int) -> str:
    """A message's `Position`."""
    return f"{topic}/{partition}/{offset}"
Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]

_DTYPE_SIZES = {"float32": 4, "float16": 2, "int64": 8, "int32": 4, "uint8": 1}


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION


def _mib(size: int) -> str:
    """``5452595`` -> ``5.2 MiB``."""
    return f"{size / 2**20:.3g} MiB"


class TensorPayload(BaseModel):
    """A dense tensor: little-endian raw bytes, base64-encoded."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dtype: Literal["float32", "float16", "int64", "int32", "uint8"]
    shape: list[Annotated[int, Field(ge=1, le=1 << 24)]] = Field(min_length=1, max_length=8)
    #: bounded by the broker's message size; checked against the payload limit before decoding
    data_b64: str

    @model_validator(mode="wrap")
    @classmethod
    def _size_matches_shape(cls, data: object, handler: ModelWrapValidatorHandler["TensorPayload"]) -> "TensorPayload":
        """Checked once: a payload already checked, put into another message (a query's inputs into its
        batch, a worker's outputs into a result), is not checked again (an "after" validator would be: a
        vision query's 0.8 MB decoded twice more at the scheduler). Its size is read off the base64 text,
        not decoded (5x faster)."""
        if isinstance(data, cls):
            return data
        payload = handler(data)
        expected = math.prod(payload.shape) * _DTYPE_SIZES[payload.dtype]
        carried = len(payload.data_b64) * 3 // 4
        if max(expected, carried) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"payload {_mib(max(expected, carried))} exceeds the {_mib(MAX_PAYLOAD_BYTES)} limit")
        decoded = _base64_size(payload.data_b64)
        if decoded != expected:
            raise ValueError(f"`data_b64` holds {decoded} bytes but shape {payload.shape} of {payload.dtype} "
                             f"needs {expected}")
        return payload


_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _base64_size(text: str) -> int:
    """The bytes standard, padded base64 ``text`` decodes to, without decoding it: what
    ``b64decode(validate=True)`` accepts, less padding beyond the last group, which no encoder writes."""
    try:
        raw = text.encode("ascii")
    except UnicodeEncodeError:
        raise ValueError("`data_b64` is not valid base64: it holds characters outside ASCII") from None
    body = raw.rstrip(b"=")
    padding = len(raw) - len(body)
    if len(raw) % 4 or padding > 2:
        raise ValueError(f"`data_b64` is not valid base64: {len(raw)} characters with {padding} of padding")
    if stray := body.translate(None, _BASE64_ALPHABET):
        raise ValueError(f"`data_b64` is not valid base64: it holds {chr(stray[0])!r}")
    return len(raw) // 4 * 3 - padding


class Query(_Message):
    """A client's inference request.

    ``model`` names a model family or one exact variant; left out, any model registered under the
    application may serve it (INFaaS's model-less query: only latency and accuracy goals).
    """

    query_id: Identifier
    application: Identifier
    model: Identifier | None = None
    slo_ms: float = Field(gt=0.0, le=3_600_000.0, allow_inf_nan=False)
    accuracy_floor: float | None = Field(default=None, ge=0.0, le=1.0)
    #: rows in the query (its own batch size)
    batch_size: int = Field(ge=1, le=MAX_QUERY_ROWS)
    #: the input rows; absent only for workloads served by emulated devices
    inputs: TensorPayload | None = None
    #: client send time, unix seconds
    sent_at: Seconds

    @model_validator(mode="after")
    def _rows_match_inputs(self) -> "Query":
        if self.inputs is not None and self.inputs.shape[0] != self.batch_size:
            raise ValueError(f"`batch_size` is {self.batch_size} but `inputs` has {self.inputs.shape[0]} rows")
        return self


class ResultStatus(str, Enum):
    OK = "ok"
    DROPPED = "dropped"
    REJECTED = "rejected"
    ERROR = "error"


class HopTimestamps(BaseModel):
    """Unix seconds at each hop; a hop a query never reached stays ``None``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    client_sent: Seconds | None = None
    scheduler_received: Seconds | None = None
    dispatched: Seconds | None = None
    worker_received: Seconds | None = None
    compute_started: Seconds | None = None
    compute_finished: Seconds | None = None
    result_sent: Seconds | None = None


class Result(_Message):
    """The one final answer to a query (clients drop repeats by ``query_id``).

    Every answer names the query message it answers (``query_position``). Query ids are chosen by
    clients, so anyone may send a message claiming another's; the client library takes a result as the
    answer to its query only if it names the position its own producer's delivery report gave that query,
    and keeps any other result for the id apart. A message refused without a query id of its own (it does
    not parse, or repeats another query's id) is answered under its position as ``query_id`` too; the id
    it claimed is only a hint.
    """

    query_id: str = Field(max_length=256)
    #: the position of the query message this answers (None: a result of a Meridian before positions)
    query_position: Position | None = None
    #: for an answer under a message's position: the query id the message claimed, if any
    claimed_query_id: str | None = Field(default=None, max_length=256)
    application: str | None = Field(default=None, max_length=256)
    status: ResultStatus
    variant: str | None = None
    worker_id: str | None = None
    device: str | None = None
    #: the device's latency was replayed from its measured profile, not computed here
    emulated: bool = False
    batch_id: str | None = None
    timestamps: HopTimestamps = HopTimestamps()
    reason: str | None = Field(default=None, max_length=2000)
    #: what the system changed about the request, e.g. the closest variant served when none met the goals
    note: str | None = Field(default=None, max_length=2000)
    #: this answer's share of the bill: its rows' share of the batch's compute time at the worker's price
    #: (summed per application, the cost of what it was served; idle time is in no answer's share)
    cost_dollars: float | None = Field(default=None, ge=0.0)
    #: top-1 class per row, for classifiers
    predictions: list[int] | None = None
    outputs: TensorPayload | None = None


class QueryWork(BaseModel):
    """One query inside a dispatched batch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query_id: Identifier
    #: where its message was read (copied into its result: see ``Result.query_position``)
    query_position: Position | None = None
    application: Identifier
    batch_size: int = Field(ge=1, le=MAX_QUERY_ROWS)
    slo_ms: float = Field(gt=0.0)
    inputs: TensorPayload | None = None
    timestamps: HopTimestamps
    #: copied into the query's result (see ``Result.note``)
    note: str | None = None
    #: unix seconds after which its answer is useless: a worker that has not started it by then answers
    #: it ``dropped`` instead of computing it
    deadline_at: float | None = None


class DispatchBatch(_Message):
    """Command: run these queries as one batch on ``variant``."""

    command: Literal["dispatch_batch"] = "dispatch_batch"
    batch_id: Identifier
    worker_id: Identifier
    #: the worker process it was meant for (its heartbeat's ``incarnation``); a restarted worker skips
    #: batches of its previous life, which the scheduler re-queues once it hears the new incarnation
    incarnation: Identifier | None = None
    variant: Identifier
    queries: list[QueryWork] = Field(min_length=1)


class LoadVariant(_Message):
    """Command: load ``variant`` (and report its loading latency)."""

    command: Literal["load_variant"] = "load_variant"
    worker_id: Identifier
    variant: Identifier


class UnloadVariant(_Message):
    """Command: unload ``variant`` once the batches already sent for it have run."""

    command: Literal["unload_variant"] = "unload_variant"
    worker_id: Identifier
    variant: Identifier


WorkerCommand = Annotated[Union[DispatchBatch, LoadVariant, UnloadVariant], Field(discriminator="command")]
worker_command_adapter: TypeAdapter[DispatchBatch | LoadVariant | UnloadVariant] = TypeAdapter(WorkerCommand)


class WorkerHeartbeat(_Message):
    event: Literal["heartbeat"] = "heartbeat"
    worker_id: Identifier
    #: new on every start of the worker process
    incarnation: Identifier | None = None
    device: Identifier
    emulated: bool
    variants: list[Identifier]
    max_batch: int = Field(ge=1)
    #: batches received and not finished
    inflight: int = Field(ge=0)
    #: fraction of the last heartbeat interval spent computing
    busy_fraction: float = Field(ge=0.0, le=1.0)
    price_per_hour: float = Field(ge=0.0)
    at: Seconds


class BatchFinished(_Message):
    event: Literal["batch_finished"] = "batch_finished"
    worker_id: Identifier
    batch_id: Identifier
    variant: Identifier
    device: Identifier
    rows: int = Field(ge=0)
    compute_ms: float = Field(ge=0.0)
    ok: bool
    #: when its compute started: the scheduler measures the transport's hops around the compute from it
    compute_started_at: Seconds | None = None
    at: Seconds


class BatchRefused(_Message):
    """The worker did not run the batch (its variant was unloaded before the batch arrived) and answered none
    of its queries: they are the scheduler's again, to re-queue."""

    event: Literal["batch_refused"] = "batch_refused"
    worker_id: Identifier
    batch_id: Identifier
    variant: Identifier
    reason: str = Field(max_length=500)
    at: Seconds


class VariantLoaded(_Message):
    event: Literal["variant_loaded"] = "variant_loaded"
    worker_id: Identifier
    variant: Identifier
    load_ms: float = Field(ge=0.0)
    at: Seconds


class VariantUnloaded(_Message):
    event: Literal["variant_unloaded"] = "variant_unloaded"
    worker_id: Identifier
    variant: Identifier
    at: Seconds


class WorkerStopped(_Message):
    event: Literal["worker_stopped"] = "worker_stopped"
    worker_id: Identifier
    at: Seconds


WorkerEvent = Annotated[
    Union[WorkerHeartbeat, BatchFinished, BatchRefused, VariantLoaded, VariantUnloaded, WorkerStopped],
    Field(discriminator="event"),
]
worker_event_adapter: TypeAdapter[
    WorkerHeartbeat | BatchFinished | BatchRefused | VariantLoaded | VariantUnloaded | WorkerStopped
] = TypeAdapter(WorkerEvent)


class LoadStatistics(_Message):
    """A scheduler's view of one application's load over the last window."""

    application: Identifier
    window_s: float = Field(gt=0.0)
    arrival_rate_qps: float = Field(ge=0.0)
    queue_depth: int = Field(ge=0)
    #: sizes (rows) of the queries that arrived in this window, oldest first (the latest 20,000 at most)
    batch_sizes: list[int] = Field(default_factory=list, max_length=20_000)
    slo_attainment: float | None = Field(default=None, ge=0.0, le=1.0)
    at: Seconds


class PlanPlacement(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    device: Identifier
    variants: list[Identifier]
    #: the worker that realises this slot, once known
    worker_id: Identifier | None = None


class AllocationPlan(_Message):
    """A planner's or autoscaler's decision: which devices, which variants where, how to split load."""

    plan_id: Identifier
    planner: Identifier
    status: Literal["optimal", "feasible", "degraded", "infeasible"]
    message: str = Field(max_length=2000)
    placements: list[PlanPlacement]
    #: application -> variant -> share of its queries
    routing: dict[str, dict[str, float]] = Field(default_factory=dict)
    cost_per_hour: float | None = Field(default=None, ge=0.0)
    objective: float | None = None
    at: Seconds

    @field_validator("routing")
    @classmethod
    def _shares_are_fractions(cls, routing: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        for application, shares in routing.items():
            if any(s < 0 for s in shares.values()) or (shares and abs(sum(shares.values()) - 1.0) > 1e-6):
                raise ValueError(f"routing shares of {application!r} must be >= 0 and sum to 1")
        return routing


class SwitchPolicy(_Message):
    """Command: serve ``application`` with dispatch policy ``policy`` from the scheduler's next step on.

    The scheduler checks both names (it knows the policies and the applications); a switch it refuses
    goes to the dead letters with the reason.
    """

    application: Identifier
    #: a dispatch policy's registry name (``fcfs``, ``proteus`` ...)
    policy: Identifier
    #: who asked, for the log
    requested_by: str | None = Field(default=None, max_length=256)
    at: Seconds


class DeadLetter(_Message):
    """A copy of an input that could not be processed, and why."""

    source_topic: str = Field(max_length=256)
    partition: int | None = None
    offset: int | None = None
    #: the raw message value, base64 (cut to ``MAX_DEAD_LETTER_BYTES``)
    raw_b64: str
    truncated: bool = False
    reason: str = Field(max_length=2000)
    service: str
    at: Seconds


MAX_DEAD_LETTER_BYTES = 64 * 1024
#: the largest ONNX model a registration may carry inline, decoded (bytes)
MAX_MODEL_BYTES = 10 * 1024 * 1024
#: the largest validation set a registration may carry, decoded (bytes)
MAX_VALIDATION_BYTES = 2 * 1024 * 1024


class RegisterModel(_Message):
    """Request: register a trained model under an application; the registry generates and profiles variants.

    ``model_onnx_b64`` is an ONNX file (torch modules are exported to ONNX first, never unpickled);
    ``validation_npz_b64`` is an ``.npz`` with arrays ``x`` (inputs) and ``y`` (labels), read without pickle.
    """

    request_id: Identifier
    model_name: Identifier
    app_id: Identifier
    #: the declared input: shape of one row (no batch axis) and dtype
    input_shape: list[Annotated[int, Field(ge=1, le=1 << 16)]] = Field(min_length=1, max_length=6)
    input_dtype: Literal["float32"] = "float32"
    model_onnx_b64: str = Field(max_length=(MAX_MODEL_BYTES * 4) // 3 + 4)
    validation_npz_b64: str = Field(max_length=(MAX_VALIDATION_BYTES * 4) // 3 + 4)
    #: the default latency SLO of queries to this model's family, if the client gives none
    slo_ms: float = Field(default=100.0, gt=0.0)
    sent_at: Seconds


class RegisteredVariant(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    variant: Identifier
    device: Identifier
    accuracy: float = Field(ge=0.0, le=1.0)
    precision: Literal["fp32", "fp16", "int8"]
    optimization_level: Literal["disabled", "basic", "extended", "all"]
    max_batch: int = Field(ge=1)
    batch_latency_ms: dict[int, float]
    load_latency_ms: float | None = None
    peak_memory_mb: float | None = None


class RegistrationReply(_Message):
    request_id: str = Field(max_length=256)
    model_name: str = Field(max_length=256)
    app_id: str = Field(max_length=256)
    status: Literal["registered", "rejected"]
    reason: str | None = Field(default=None, max_length=2000)
    variants: list[RegisteredVariant] = Field(default_factory=list)
    at: Seconds


RegistrationStage = Literal["validated", "generated", "profiling"]


class RegistrationProgress(_Message):
    """News of a registration still at work, so a client waits for silence rather than for the whole job.

    Sent on the replies topic (same key, so in order) before the request's one `RegistrationReply`;
    ``status`` tells the two apart (`registry_reply_adapter`).
    """

    request_id: str = Field(max_length=256)
    status: Literal["progress"] = "progress"
    stage: RegistrationStage
    #: one line for a person, e.g. ``profiling tiny-fp16-all on cpu-1t (4/6)``
    message: str = Field(max_length=500)
    at: Seconds


RegistryReply = Annotated[Union[RegistrationProgress, RegistrationReply], Field(discriminator="status")]
registry_reply_adapter: TypeAdapter[RegistrationProgress | RegistrationReply] = TypeAdapter(RegistryReply)

#: every topic model, by the name its JSON Schema file is exported under
EXPORTED_MODELS: dict[str, type[BaseModel] | TypeAdapter] = {
    "query": Query,
    "result": Result,
    "worker_command": worker_command_adapter,
    "worker_event": worker_event_adapter,
    "load_statistics": LoadStatistics,
    "allocation_plan": AllocationPlan,
    "switch_policy": SwitchPolicy,
    "dead_letter": DeadLetter,
    "register_model": RegisterModel,
    "registration_reply": RegistrationReply,
    "registration_progress": RegistrationProgress,
}

__all__ = [
    "MAX_DEAD_LETTER_BYTES",
    "MAX_MODEL_BYTES",
    "MAX_VALIDATION_BYTES",
    "MAX_PAYLOAD_BYTES",
    "MAX_QUERY_ROWS",
    "SCHEMA_VERSION",
    "AllocationPlan",
    "BatchFinished",
    "BatchRefused",
    "DeadLetter",
    "DispatchBatch",
    "EXPORTED_MODELS",
    "HopTimestamps",
    "LoadStatistics",
    "LoadVariant",
    "PlanPlacement",
    "Query",
    "QueryWork",
    "RegisterModel",
    "RegisteredVariant",
    "RegistrationProgress",
    "RegistrationReply",
    "RegistrationStage",
    "RegistryReply",
    "Position",
    "Result",
    "ResultStatus",
    "SwitchPolicy",
    "TensorPayload",
    "UnloadVariant",
    "VariantLoaded",
    "VariantUnloaded",
    "WorkerCommand",
    "WorkerEvent",
    "WorkerHeartbeat",
    "WorkerStopped",
    "position",
    "registry_reply_adapter",
    "worker_command_adapter",
    "worker_event_adapter",
]
