"""Message contracts for every Meridian topic (schema version 1).

Every message is JSON produced by ``model.model_dump_json()`` and read with ``Model.model_validate_json``;
a query or a dispatched batch whose tensors carry binary data is that JSON followed by its binary section,
framed by `schemas.wire`.
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

#: priority classes, as Triton numbers them: 1 is served first, 9 last; a query that names none is its
#: application's default class (``MERIDIAN_APPLICATION_PRIORITY``, else `DEFAULT_PRIORITY`)
HIGHEST_PRIORITY, LOWEST_PRIORITY = 1, 9
DEFAULT_PRIORITY = 5
Priority = Annotated[int, Field(ge=HIGHEST_PRIORITY, le=LOWEST_PRIORITY)]

IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:\-]*$"
Identifier = Annotated[str, Field(min_length=1, max_length=128, pattern=IDENTIFIER_PATTERN)]
#: where a message sits in Kafka, ``<topic>/<partition>/<offset>``: no client chooses it, and no query id
#: (an `Identifier`) can equal it
Position = Annotated[str, Field(max_length=300, pattern=r"^[A-Za-z0-9._-]+/[0-9]+/[0-9]+$")]


def position(topic: str, partition: int, offset: int) -> str:
    """A message's `Position`."""
    return f"{topic}/{partition}/{offset}"
Seconds = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]

#: the fixed-size datatypes of the Open Inference Protocol that Meridian carries, and their bytes per element
DATATYPE_SIZES = {"FP32": 4, "FP16": 2, "INT64": 8, "INT32": 4, "UINT8": 1}
#: OIP's datatype names <-> numpy's
NUMPY_DATATYPES = {"FP32": "float32", "FP16": "float16", "INT64": "int64", "INT32": "int32", "UINT8": "uint8"}
Datatype = Literal["FP32", "FP16", "INT64", "INT32", "UINT8", "BYTES"]
#: bytes a JSON ``data`` element may take in a dispatched batch (a float's shortest repr is at most 24
#: characters, with its comma): what the core counts against a message's cap for tensors sent as JSON
JSON_ELEMENT_BYTES = 25
#: OIP's binary BYTES encoding puts each element's length before it, as 4 bytes little-endian
BYTES_LENGTH_PREFIX = 4


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1] = SCHEMA_VERSION


def _mib(size: int) -> str:
    """``5452595`` -> ``5.2 MiB``."""
    return f"{size / 2**20:.3g} MiB"


class TensorParameters(BaseModel):
    """The OIP tensor parameters Meridian reads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the tensor's data is this many bytes of the message's binary section (OIP's binary tensor data
    #: extension), not a JSON ``data`` list
    binary_data_size: int | None = Field(default=None, ge=0, le=1 << 40)


class InferTensor(BaseModel):
    """One tensor as the Open Inference Protocol (KServe v2) writes it: ``name``, ``shape``, ``datatype``,
    and its data either as a flat JSON ``data`` list (row-major; strings for ``BYTES``) or as
    ``parameters.binary_data_size`` bytes of the message's binary section (`schemas.wire`): raw
    little-endian elements, or for ``BYTES`` each element as a 4-byte little-endian length and its bytes.

    An encoded image (JPEG, PNG) is one ``BYTES`` element: a query of ``n`` images has shape ``[n]``.
    Checked from the header alone, so a forwarder never reads the bytes: the declared size must be the
    size its shape and datatype need (``BYTES``: at least its length prefixes), within the payload limit.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    shape: list[Annotated[int, Field(ge=1, le=1 << 24)]] = Field(min_length=1, max_length=8)
    datatype: Datatype
    parameters: TensorParameters | None = None
    data: list[int] | list[float] | list[str] | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _size_matches_shape(cls, data: object, handler: ModelWrapValidatorHandler["InferTensor"]) -> "InferTensor":
        """Checked once: a tensor already checked, put into another message (a query's inputs into its
        batch), is not checked again."""
        if isinstance(data, cls):
            return data
        tensor = handler(data)
        elements = math.prod(tensor.shape)
        size = tensor.binary_size
        if (size is None) == (tensor.data is None):
            raise ValueError(f"tensor {tensor.name!r} needs its data either as `data` or as "
                             f"`parameters.binary_data_size` bytes of the binary section, not both or neither")
        if tensor.datatype == "BYTES":
            needs = elements * BYTES_LENGTH_PREFIX
            if size is not None and size < needs:
                raise ValueError(f"tensor {tensor.name!r}: `binary_data_size` is {size} bytes, but {elements} BYTES "
                                 f"elements need at least {needs} for their length prefixes")
        else:
            needs = elements * DATATYPE_SIZES[tensor.datatype]
            if size is not None and size != needs:
                raise ValueError(f"tensor {tensor.name!r}: `binary_data_size` is {size} bytes but shape "
                                 f"{tensor.shape} of {tensor.datatype} needs {needs}")
        carried = size if size is not None else elements * (DATATYPE_SIZES.get(tensor.datatype) or 1)
        if max(needs, carried) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"tensor {tensor.name!r}: {_mib(max(needs, carried))} exceeds the "
                             f"{_mib(MAX_PAYLOAD_BYTES)} limit of a query's payload")
        if tensor.data is not None:
            if len(tensor.data) != elements:
                raise ValueError(f"tensor {tensor.name!r}: `data` holds {len(tensor.data)} elements but shape "
                                 f"{tensor.shape} needs {elements}")
            kind = type(tensor.data[0])
            wanted = (str,) if tensor.datatype == "BYTES" else (int,) if tensor.datatype in ("INT64", "INT32", "UINT8") \
                else (int, float)
            if kind not in wanted:
                raise ValueError(f"tensor {tensor.name!r}: `data` of {tensor.datatype} must hold "
                                 f"{' or '.join(w.__name__ for w in wanted)} elements, not {kind.__name__}")
        return tensor

    @property
    def binary_size(self) -> int | None:
        """Bytes of the binary section this tensor's data takes (None: its data is JSON)."""
        return None if self.parameters is None else self.parameters.binary_data_size

    @property
    def payload_bytes(self) -> int:
        """What its data adds to a message: its binary bytes, or at most this much as JSON."""
        size = self.binary_size
        return size if size is not None else len(self.data or ()) * JSON_ELEMENT_BYTES


def binary_bytes(tensors: list[InferTensor] | None) -> int:
    """Bytes of the binary section ``tensors`` take, in order."""
    return sum(t.binary_size or 0 for t in tensors or ())


def payload_bytes(tensors: list[InferTensor] | None) -> int:
    return sum(t.payload_bytes for t in tensors or ())


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
    #: its priority class, 1 (served first) to 9; None: its application's default. Among queries that can
    #: still meet their deadlines a higher class is served first, and a lower one is shed first
    priority: Priority | None = None
    #: rows in the query (its own batch size)
    batch_size: int = Field(ge=1, le=MAX_QUERY_ROWS)
    #: the model's input, one OIP tensor whose first axis is the rows (or the encoded images); absent only
    #: for workloads served by emulated devices
    inputs: list[InferTensor] | None = Field(default=None, min_length=1, max_length=1)
    #: client send time, unix seconds
    sent_at: Seconds

    @model_validator(mode="after")
    def _rows_match_inputs(self) -> "Query":
        if self.inputs is not None and self.inputs[0].shape[0] != self.batch_size:
            raise ValueError(f"`batch_size` is {self.batch_size} but `inputs` has {self.inputs[0].shape[0]} rows")
        return self

    @property
    def binary_bytes(self) -> int:
        """Bytes of the binary section that must follow this query's header (`schemas.wire`)."""
        return binary_bytes(self.inputs)

    @property
    def payload_bytes(self) -> int:
        """What its inputs add to a dispatched batch's message (the core bounds a batch by it)."""
        return payload_bytes(self.inputs)


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
    #: the priority class its query was served in (None: answered before the scheduler gave it one)
    priority: Priority | None = None
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
    #: the model's outputs as OIP tensors (JSON ``data``)
    outputs: list[InferTensor] | None = None


class QueryWork(BaseModel):
    """One query inside a dispatched batch."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    query_id: Identifier
    #: where its message was read (copied into its result: see ``Result.query_position``)
    query_position: Position | None = None
    application: Identifier
    batch_size: int = Field(ge=1, le=MAX_QUERY_ROWS)
    slo_ms: float = Field(gt=0.0)
    #: its priority class (copied into its result)
    priority: Priority | None = None
    #: its query's inputs; binary data in the batch's binary section, query after query
    inputs: list[InferTensor] | None = None
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


class MachineDescription(BaseModel):
    """What a real worker found it computes on, at its start: the onnxruntime execution provider, the
    processor's or GPU's name, the intra-op threads it may use, and a GPU's memory."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: Literal["CPUExecutionProvider", "CUDAExecutionProvider"]
    name: str = Field(min_length=1, max_length=200)
    threads: int = Field(ge=1, le=1024)
    memory_mb: int | None = Field(default=None, ge=0)


class MeasuredLatency(BaseModel):
    """One variant's latency as a real worker measured it on its own machine (milliseconds): per batch size
    it ran, the time to load it, and the time to decode and prepare one encoded image where it takes them;
    on a GPU, the memory (MiB) its session held once its largest measured batch had run."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    batch_latency_ms: dict[Annotated[int, Field(ge=1, le=MAX_QUERY_ROWS)],
                           Annotated[float, Field(gt=0.0, allow_inf_nan=False)]] = Field(min_length=1, max_length=16)
    load_latency_ms: float | None = Field(default=None, ge=0.0, allow_inf_nan=False)
    image_prepare_ms: float | None = Field(default=None, ge=0.0, allow_inf_nan=False)
    device_memory_mb: float | None = Field(default=None, ge=0.0, allow_inf_nan=False)


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
    #: a real worker's machine (None when emulating one)
    machine: MachineDescription | None = None
    #: variant -> its latency measured on this machine, for each loaded variant measured (at start, or
    #: found measured on this machine before); the scheduler serves those variants from these numbers
    measured: dict[Identifier, MeasuredLatency] = Field(default_factory=dict, max_length=64)
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
    "LOWEST_PRIORITY",
    "SCHEMA_VERSION",
    "AllocationPlan",
    "BatchFinished",
    "BatchRefused",
    "DATATYPE_SIZES",
    "DEFAULT_PRIORITY",
    "Datatype",
    "DeadLetter",
    "DispatchBatch",
    "EXPORTED_MODELS",
    "HIGHEST_PRIORITY",
    "HopTimestamps",
    "InferTensor",
    "NUMPY_DATATYPES",
    "BYTES_LENGTH_PREFIX",
    "LoadStatistics",
    "LoadVariant",
    "MachineDescription",
    "MeasuredLatency",
    "PlanPlacement",
    "Priority",
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
    "TensorParameters",
    "UnloadVariant",
    "VariantLoaded",
    "VariantUnloaded",
    "WorkerCommand",
    "WorkerEvent",
    "WorkerHeartbeat",
    "WorkerStopped",
    "binary_bytes",
    "payload_bytes",
    "position",
    "registry_reply_adapter",
    "worker_command_adapter",
    "worker_event_adapter",
]
