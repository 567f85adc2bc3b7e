"""Hostile input: property-generated malformed and adversarial messages on every input topic.

Every generated message is invalid by construction: random bytes, JSON of the wrong shape, a valid
message with an unknown field (every schema forbids extras), with a field of an impossible type, with a
required field removed, or (queries only) a well-formed query no catalogue can serve. So each one must
come back as a dead letter with a reason, and the services must stay up.
"""
from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable

from hypothesis import HealthCheck, Phase, given, seed as seed_examples, settings as hypothesis_settings
from hypothesis import strategies as st
from kafka import TopicPartition
from pydantic import BaseModel, Field

from schemas import (AllocationPlan, DeadLetter, DispatchBatch, HopTimestamps, LoadStatistics, Query, QueryWork,
                     RegisterModel, WorkerHeartbeat)
from shared.adapters import topics
from shared.adapters.kafka_io import make_consumer, make_producer
from shared.settings import Settings

#: an impossible value for every typed field: no str, number, bool, list of scalars or mapping accepts it
IMPOSSIBLE = [[{"\u0000": [None]}]]

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20)


class HostileOutcome(BaseModel):
    sent: int
    dead_lettered: int
    #: messages with no dead letter by the end of the wait
    lost: int
    per_topic: dict[str, dict[str, int]] = Field(default_factory=dict)
    services_alive: bool
    elapsed_s: float


def templates(worker_id: str) -> dict[str, tuple[dict, list[str]]]:
    """One valid message per input topic, as a JSON object to corrupt, with its required fields."""
    now = time.time()
    messages = {
        topics.QUERIES: Query(query_id="h", application="digits", model="digits", slo_ms=100.0, batch_size=1,
                              sent_at=now),
        topics.WORKER_EVENTS: WorkerHeartbeat(worker_id="h", device="cpu-1t", emulated=True, variants=["v"],
                                              max_batch=1, inflight=0, busy_fraction=0.0, price_per_hour=0.0,
                                              at=now),
        topics.PLANS: AllocationPlan(plan_id="h", planner="h", status="optimal", message="", placements=[],
                                     at=now),
        topics.LOAD_STATS: LoadStatistics(application="digits", window_s=1.0, arrival_rate_qps=1.0, queue_depth=0,
                                          at=now),
        topics.REGISTRATIONS: RegisterModel(request_id="h", model_name="h", app_id="h", input_shape=[1, 8, 8],
                                            model_onnx_b64="AA==", validation_npz_b64="AA==",
                                            sent_at=now),
        topics.dispatch_topic(worker_id): DispatchBatch(batch_id="h", worker_id=worker_id, variant="v", queries=[
            QueryWork(query_id="h", application="digits", batch_size=1, slo_ms=100.0, timestamps=HopTimestamps())
        ]),
    }
    return {topic: (message.model_dump(mode="json"),
                    sorted(name for name, f in type(message).model_fields.items() if f.is_required()))
            for topic, message in messages.items()}


def hostile_messages(template: dict, required: list[str], *, semantic: bool) -> st.SearchStrategy[bytes]:
    corrupted = st.one_of(
        st.builds(lambda k, v: {**template, f"x_{k}": v}, st.text(min_size=1, max_size=8), JSON),
        st.builds(lambda k: {**template, k: IMPOSSIBLE}, st.sampled_from(sorted(template))),
        st.builds(lambda k: {f: v for f, v in template.items() if f != k}, st.sampled_from(required)),
    ).map(lambda obj: json.dumps(obj).encode())
    options = [st.binary(max_size=512).map(lambda b: b"\xff" + b),  # never valid UTF-8 JSON
               JSON.filter(lambda v: not isinstance(v, dict) or "schema_version" not in v)
                   .map(lambda v: json.dumps(v).encode()),
               corrupted]
    if semantic:  # well-formed queries that no catalogue can serve
        options.append(st.builds(lambda app, slo: json.dumps({**template, "application": app, "slo_ms": slo}).encode(),
                                 st.from_regex(r"\Anope-[a-z0-9]{1,12}\Z"), st.floats(1e-9, 1e-3)))
    return st.one_of(options)


def generate(strategy: st.SearchStrategy[bytes], count: int, seed: int) -> list[bytes]:
    """``count`` examples from hypothesis' generator, one per example (reproducible from ``seed``).

    One message per example keeps them varied (lists of messages per example run faster but repeat
    most messages).
    """
    out: list[bytes] = []

    @hypothesis_settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
                         suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(message: bytes) -> None:
        out.append(message)

    seed_examples(seed)(collect)()
    return out


def flood(settings: Settings, worker_id: str, *, per_topic: int, seed: int = 0, timeout_s: float = 300.0,
          alive: Callable[[], bool] = lambda: True) -> HostileOutcome:
    """Send ``per_topic`` hostile messages to each input topic; count the dead letters that come back."""
    started = time.monotonic()
    batches = {topic: generate(hostile_messages(template, required, semantic=topic == topics.QUERIES), per_topic,
                               seed)
               for topic, (template, required) in templates(worker_id).items()}
    reader = make_consumer(settings, group_id=None, fetch_max_wait_ms=50)
    tp = TopicPartition(topics.DEAD_LETTER, 0)
    reader.assign([tp])
    reader.seek_to_end(tp)
    reader.position(tp)
    producer = make_producer(settings)
    sent = Counter()
    for topic, messages in batches.items():
        for message in messages:
            producer.send(topic, value=message)
        sent[topic] = len(messages)
    producer.flush()
    producer.close(timeout=5)
    # the scheduler and the fleet both read plans: count each topic's first consumer once per message
    counted = Counter()
    deadline = time.monotonic() + timeout_s
    while any(counted[t] < sent[t] for t in sent) and time.monotonic() < deadline:
        for records in reader.poll(timeout_ms=500).values():
            for record in records:
                letter = DeadLetter.model_validate_json(record.value)
                if letter.source_topic in sent and letter.service == _first_reader(letter.source_topic):
                    counted[letter.source_topic] += 1
    reader.close()
    dead = sum(min(counted[t], sent[t]) for t in sent)
    return HostileOutcome(sent=sum(sent.values()), dead_lettered=dead, lost=sum(sent.values()) - dead,
                          per_topic={t: {"sent": sent[t], "dead_lettered": counted[t]} for t in sent},
                          services_alive=alive(), elapsed_s=round(time.monotonic() - started, 1))


def _first_reader(topic: str) -> str:
    if topic in (topics.QUERIES, topics.WORKER_EVENTS, topics.PLANS):
        return "scheduler"
    if topic == topics.LOAD_STATS:
        return "planner"
    if topic == topics.REGISTRATIONS:
        return "registry"
    return "worker"
