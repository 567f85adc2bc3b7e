"""Switch one application's dispatch policy in the running schedulers.

Run::

    meridian switch --application vision --policy proteus [--requested-by NAME]

Publishes a `SwitchPolicy` on ``meridian.control`` (created if missing) and returns once the broker has
it: exit 0. Every scheduler applies it at its next step, and again after a restart (it reads the topic
from its start, so the newest switch wins); ``meridian_scheduler_policy`` shows the policy serving each
application. The scheduler checks what this command cannot: that it serves the application and can run
the policy now. A switch it refuses lands on ``meridian.dead-letter`` with the reason, and in its log.
Bad input or an unreachable broker: one line on stderr, exit 1.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import NoReturn

from kafka.errors import KafkaError
from pydantic import ValidationError

from schemas import SwitchPolicy
from shared.adapters import topics
from shared.adapters.dead_letter import describe_validation_error
from shared.adapters.kafka_io import ensure_topics_exist, make_producer
from shared.policy.registry import dispatch_names
from shared.settings import Settings

PROG = "meridian switch"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise SystemExit(f"switch: {message} (see --help)")


def publish_switch(settings: Settings, switch: SwitchPolicy) -> int:
    """Publish ``switch``, wait until the broker has it, and return its offset."""
    ensure_topics_exist(settings, [topics.TopicSpec(topics.CONTROL, 1)])
    producer = make_producer(settings, max_block_ms=10_000)
    try:
        future = producer.send(topics.CONTROL, key=switch.application.encode(), value=switch.model_dump_json().encode())
        return future.get(timeout=30).offset
    finally:
        producer.close(timeout=5)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("--application", required=True, help="the application to switch")
    parser.add_argument("--policy", required=True,
                        help=f"the dispatch policy to serve it: {', '.join(dispatch_names())}")
    parser.add_argument("--requested-by", help="who asks (for the scheduler's log)")
    args = parser.parse_args(argv)
    if args.policy not in dispatch_names():
        raise SystemExit(f"switch: unknown dispatch policy {args.policy!r}; valid: {', '.join(dispatch_names())}")
    try:
        switch = SwitchPolicy(application=args.application, policy=args.policy, requested_by=args.requested_by,
                              at=time.time())
    except ValidationError as exc:
        raise SystemExit(f"switch: {describe_validation_error(exc)}") from None
    try:
        settings = Settings()
    except ValidationError as exc:
        problem = describe_validation_error(exc).split(": ", 1)[1]
        raise SystemExit(f"switch: bad MERIDIAN_* settings: {problem}") from None
    try:
        offset = publish_switch(settings, switch)
    except (KafkaError, TimeoutError) as exc:
        raise SystemExit(f"switch: cannot publish to Kafka at {settings.kafka_bootstrap}: {exc!r}") from None
    print(f"published at {topics.CONTROL} offset {offset}: serve {switch.application!r} with {switch.policy!r} "
          "(the schedulers switch at their next step; a refusal goes to meridian.dead-letter)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
