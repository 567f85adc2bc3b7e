"""Spoofing: messages claiming another client's query id, of every kind the scheduler rejects, sent before
that client's query and after it. An answer belongs to the message that asked (`shared.adapters.answers`),
so none of them may become the client's answer: ``spoiled`` must be 0.
"""
from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel

from schemas import Query, ResultStatus, wire
from shared.adapters.client import MeridianClient
from shared.settings import Settings
from shared.tensors import encode, encode_images

Hostile = Callable[[Query, str], bytes]


def _query(template: Query, query_id: str, **fields: object) -> bytes:
    update = {"query_id": query_id, "sent_at": time.time(), **fields}
    return template.model_copy(update=update).model_dump_json().encode()


def _raw(template: Query, query_id: str, tensor: dict, rows: int = 1) -> bytes:
    """A query whose input is ``tensor`` as OIP JSON (no check of it on the way out)."""
    return json.dumps({**json.loads(_query(template, query_id)), "batch_size": rows, "inputs": [tensor]}).encode()


def _binary(template: Query, query_id: str, tensor: dict, binary: bytes, rows: int = 1) -> bytes:
    """... framed with ``binary`` (`schemas.wire`)."""
    return wire.pack(_raw(template, query_id, tensor, rows), [binary])


def _oversized(template: Query, query_id: str) -> bytes:
    """A well-formed 15 MB tensor: over the 4 MiB payload limit, under the broker's 16 MiB."""
    rows = 3600  # 3600 x 1 x 32 x 32 float32 = 14.7 MB
    size = rows * 1024 * 4
    tensor = {"name": "input", "shape": [rows, 1, 32, 32], "datatype": "FP32", "parameters": {"binary_data_size": size}}
    return _binary(template, query_id, tensor, bytes(size), rows)


def _claims_2gb(template: Query, query_id: str) -> bytes:
    """A header declaring 2 GB of binary data, with a few bytes of it."""
    tensor = {"name": "input", "shape": [1, 1, 8, 8], "datatype": "FP32", "parameters": {"binary_data_size": 2 << 30}}
    return _binary(template, query_id, tensor, bytes(256))


def _short_binary(template: Query, query_id: str) -> bytes:
    """A tensor whose header is right, followed by fewer bytes than it declares."""
    tensor = {"name": "input", "shape": [1, 1, 8, 8], "datatype": "FP32", "parameters": {"binary_data_size": 256}}
    return _binary(template, query_id, tensor, bytes(100))


def _image_for_digits(template: Query, query_id: str) -> bytes:
    """An encoded image (BYTES) for a model that takes FP32 rows."""
    inputs = encode_images([b"\xff\xd8\xff\xe0 not really a JPEG"])
    return _binary(template, query_id, inputs.tensors[0].model_dump(exclude_none=True), inputs.binary)


#: messages that parse but cannot be served, by kind: (the message claiming a query id, made from a valid
#: query just before it is sent, as ``sent_at`` is checked; what the reason it is rejected with says)
REFUSED: dict[str, tuple[Hostile, str]] = {
    "unknown application": (lambda t, qid: _query(t, qid, application="nope"), "unknown application"),
    "unknown model": (lambda t, qid: _query(t, qid, model="resnet9000"), "unknown model"),
    "slo below any latency": (lambda t, qid: _query(t, qid, slo_ms=0.0001), "below the fastest"),
    "sent a year ahead": (lambda t, qid: _query(t, qid, sent_at=time.time() + 365 * 86_400),
                          "`sent_at` is 365 days ahead of the scheduler's clock"),
    "sent a minute ahead": (lambda t, qid: _query(t, qid, sent_at=time.time() + 60),
                            "s ahead of the scheduler's clock"),
    "wrong row shape": (lambda t, qid: _query(t, qid, batch_size=1, inputs=encode(np.zeros((1, 3, 3), np.float32))),
                        "`inputs` are rows of shape [3, 3] of FP32, but the model takes rows of shape [1, 8, 8]"),
    "images for a tensor model": (_image_for_digits, "`inputs` are encoded images, but the model takes rows of shape"),
}

#: messages that do not parse, by kind: refused under their position, never under the id they claim
UNPARSED: dict[str, tuple[Hostile, str]] = {
    "wrong types": (lambda t, qid: json.dumps({"query_id": qid, "application": 5, "slo_ms": "fast"}).encode(),
                    "`application` must be a valid string (got 5)"),
    "oversized payload": (_oversized, "exceeds the 4 MiB limit"),
    "less binary data than declared": (_short_binary, "the message carries 100 bytes of binary data, but its "
                                                      "`inputs` declare 256"),
    "header claiming 2 GB": (_claims_2gb, "`binary_data_size` is 2147483648 bytes but shape [1, 1, 8, 8] of FP32 needs 256"),
    "data length disagreeing with shape": (
        lambda t, qid: _raw(t, qid, {"name": "input", "shape": [1, 1, 8, 8], "datatype": "FP32", "data": [0.0, 1.0, 2.0]}),
        "`data` holds 3 elements but shape [1, 1, 8, 8] needs 64"),
}

HOSTILE = {**REFUSED, **UNPARSED}


class SpoofingOutcome(BaseModel):
    kinds: list[str]
    #: genuine queries, one per kind and order (the other message before it, and after it)
    genuine: int
    #: genuine queries whose answer is not their own `ok`
    spoiled: int
    #: the other messages' results the client kept apart, and those kept apart with the reason of their kind
    kept_apart: int
    kept_apart_with_their_reason: int
    elapsed_s: float


def spoof(settings: Settings, template: Query, *, timeout_s: float = 60.0) -> SpoofingOutcome:
    """Claim a fresh query id per kind and order with a hostile message; send the genuine ``template`` query
    under it, the hostile message first (once answered) or last (once the genuine query is)."""
    started = time.monotonic()
    before = {kind: f"spoofed-before-{uuid.uuid4().hex[:12]}" for kind in HOSTILE}
    after = {kind: f"spoofed-after-{uuid.uuid4().hex[:12]}" for kind in HOSTILE}
    with MeridianClient(settings, applications=[template.application]) as client:
        for kind, query_id in before.items():
            client.send_raw(HOSTILE[kind][0](template, query_id))
        client.flush()
        client.wait_for([before[k] for k in REFUSED], timeout_s)  # taken as they say until the id is sent
        client.wait_for_refusals([before[k] for k in UNPARSED], timeout_s)
        genuine = [client.send(template.model_copy(update={"query_id": query_id}))
                   for query_id in [*before.values(), *after.values()]]
        client.flush()
        client.wait_for([q.query_id for q in genuine], timeout_s)
        for kind, query_id in after.items():
            client.send_raw(HOSTILE[kind][0](template, query_id))
        client.flush()
        client.wait_for_refusals([*before.values(), *after.values()], timeout_s)
        answers = [client.results.get(q.query_id) for q in genuine]
        spoiled = sum(answer is None or answer[0].status is not ResultStatus.OK for answer in answers)
        kept = {query_id: client.refusals.get(query_id, []) for query_id in [*before.values(), *after.values()]}
    expected = {**{before[k]: HOSTILE[k][1] for k in HOSTILE},
                **{after[k]: HOSTILE[k][1] if k in UNPARSED else "duplicate query id" for k in HOSTILE}}
    return SpoofingOutcome(
        kinds=list(HOSTILE), genuine=len(genuine), spoiled=spoiled, kept_apart=sum(map(len, kept.values())),
        kept_apart_with_their_reason=sum(any(expected[q] in (r.reason or "") for r in kept[q]) for q in kept),
        elapsed_s=round(time.monotonic() - started, 1))
