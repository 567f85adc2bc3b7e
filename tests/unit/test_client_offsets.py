"""The client asks a partition's end again while a topic created a moment ago has no leader yet."""
from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from shared.adapters.client import MeridianClient


class Consumer:
    def __init__(self, errors: list[int]) -> None:
        self.errors, self.asked = errors, 0

    def get_watermark_offsets(self, tp, timeout):
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, 42


def client_with(consumer: Consumer) -> MeridianClient:
    client = MeridianClient.__new__(MeridianClient)
    client._consumer = consumer
    return client


def test_a_partition_without_a_leader_yet_is_asked_again() -> None:
    consumer = Consumer([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    assert client_with(consumer)._end_offset(TopicPartition("t", 0), time.monotonic() + 5) == 42
    assert consumer.asked == 3


def test_other_errors_and_a_leader_that_never_comes_are_raised() -> None:
    with pytest.raises(KafkaException):
        client_with(Consumer([KafkaError.TOPIC_AUTHORIZATION_FAILED]))._end_offset(TopicPartition("t", 0),
                                                                                     time.monotonic() + 5)
    with pytest.raises(KafkaException):
        client_with(Consumer([KafkaError.NOT_LEADER_FOR_PARTITION] * 100))._end_offset(TopicPartition("t", 0),
                                                                                         time.monotonic() + 0.3)
