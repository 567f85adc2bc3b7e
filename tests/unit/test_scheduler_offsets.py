"""What the scheduler may commit of ``meridian.queries``: up to its lowest unacknowledged offset."""
from __future__ import annotations

from services.scheduler.offsets import Acknowledgements


def test_the_commit_point_waits_for_the_lowest_unacknowledged_offset() -> None:
    acks = Acknowledgements()
    for offset in (10, 11, 12):
        acks.read(0, offset)
    assert acks.commit_points() == {0: 10}
    acks.acknowledge(0, 12)  # a drop answered before an earlier query's batch was written
    acks.acknowledge(0, 11)
    assert acks.commit_points() == {0: 10}
    acks.acknowledge(0, 10)
    assert acks.commit_points() == {0: 13}, "every offset read is acknowledged: resume after the last"


def test_partitions_are_apart_and_a_forgotten_one_ignores_late_acknowledgements() -> None:
    acks = Acknowledgements()
    acks.read(0, 3)
    acks.read(1, 7)
    acks.acknowledge(1, 7)
    assert acks.commit_points() == {0: 3, 1: 8}
    assert acks.commit_points({1}) == {1: 8}
    acks.forget({0})
    acks.acknowledge(0, 3)
    assert acks.commit_points() == {1: 8}
