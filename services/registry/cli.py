"""Register a model from the command line: send a `RegisterModel` and wait for the registry's reply.

Run::

    python -m services.registry.cli register --model-name digits-small --model-file model.onnx \\
        --validation-set val.npz --app-id digits --input-shape 1,8,8 [--slo-ms 50] [--timeout 120]

Prints the `RegistrationReply` as JSON. Exit codes: 0 registered, 1 rejected (also when the request
breaks the wire contract, e.g. a file over the size limit), 2 no reply before the timeout. A torch
module is registered by exporting it first (`services.registry.torch_export.export_torch_module`);
files are never unpickled.
"""
from __future__ import annotations

import argparse
import base64
import json
import sys
import time
import uuid
from pathlib import Path

from kafka import TopicPartition
from pydantic import ValidationError

from schemas import RegisterModel, RegistrationReply
from services.cli.common import CommandError, require_broker
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error
from shared.adapters.kafka_io import make_consumer, make_producer
from shared.settings import Settings

__all__ = ["ReplyWaiter", "build_request", "main", "request_registration"]


class ReplyWaiter:
    """Reads ``meridian.registry-replies`` from its end at creation, so no reply sent later is missed."""

    def __init__(self, settings: Settings) -> None:
        self._consumer = make_consumer(settings, group_id=None, fetch_max_wait_ms=100)
        partitions = [TopicPartition(topics.REGISTRY_REPLIES, p)
                      for p in sorted(self._consumer.partitions_for_topic(topics.REGISTRY_REPLIES) or {0})]
        self._consumer.assign(partitions)
        self._consumer.seek_to_end(*partitions)
        for partition in partitions:
            self._consumer.position(partition)
        self._seen: dict[str, RegistrationReply] = {}

    def wait(self, request_id: str, timeout_s: float) -> RegistrationReply | None:
        deadline = time.monotonic() + timeout_s
        while request_id not in self._seen and time.monotonic() < deadline:
            for records in self._consumer.poll(timeout_ms=200).values():
                for record in records:
                    answer = RegistrationReply.model_validate_json(record.value)
                    self._seen[answer.request_id] = answer
        return self._seen.pop(request_id, None)

    def close(self) -> None:
        self._consumer.close()


def build_request(*, model_name: str, app_id: str, model_file: Path, validation_set: Path,
                  input_shape: list[int], slo_ms: float = 100.0) -> RegisterModel:
    """The request for two local files; raises pydantic's ValidationError when it breaks the contract."""
    return RegisterModel(
        request_id=f"reg-{uuid.uuid4().hex}", model_name=model_name, app_id=app_id, input_shape=input_shape,
        model_onnx_b64=base64.b64encode(model_file.read_bytes()).decode(),
        validation_npz_b64=base64.b64encode(validation_set.read_bytes()).decode(), slo_ms=slo_ms, sent_at=time.time())


def request_registration(settings: Settings, request: RegisterModel, *, timeout_s: float) -> RegistrationReply | None:
    """Send `request` and wait up to `timeout_s` for its reply (``None`` on timeout)."""
    waiter = ReplyWaiter(settings)
    producer = make_producer(settings)
    try:
        producer.send(topics.REGISTRATIONS, key=request.model_name.encode(), value=request.model_dump_json().encode())
        producer.flush(timeout=30)
        return waiter.wait(request.request_id, timeout_s)
    finally:
        producer.close(timeout=5)
        waiter.close()


def _shape(text: str) -> list[int]:
    try:
        return [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"`--input-shape` must be comma-separated integers, got {text!r}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m services.registry.cli", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    register = commands.add_parser("register", help="register an ONNX model under an application")
    register.add_argument("--model-name", required=True)
    register.add_argument("--model-file", required=True, type=Path, help="an .onnx file")
    register.add_argument("--validation-set", required=True, type=Path, help="an .npz with arrays x and y")
    register.add_argument("--app-id", required=True)
    register.add_argument("--input-shape", required=True, type=_shape, help="one row's shape, e.g. 1,8,8")
    register.add_argument("--slo-ms", type=float, default=100.0, help="default SLO of the model's queries")
    register.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the reply")
    args = parser.parse_args(argv)
    try:
        request = build_request(model_name=args.model_name, app_id=args.app_id, model_file=args.model_file,
                                validation_set=args.validation_set, input_shape=args.input_shape, slo_ms=args.slo_ms)
    except ValidationError as exc:
        print(json.dumps({"status": "rejected", "reason": describe_validation_error(exc)}, indent=1))
        return 1
    settings = Settings()
    try:
        require_broker(settings.kafka_bootstrap)
    except CommandError as exc:
        print(f"meridian register: {exc}", file=sys.stderr)
        return 2
    answer = request_registration(settings, request, timeout_s=args.timeout)
    if answer is None:
        print(f"no reply to {request.request_id} within {args.timeout:g} s", file=sys.stderr)
        return 2
    print(answer.model_dump_json(indent=1))
    return 0 if answer.status == "registered" else 1


if __name__ == "__main__":
    sys.exit(main())
