"""Which offsets of ``meridian.queries`` the scheduler may commit.

A query's message is acknowledged once its batch or final answer is durable, and answers are not
written in the order messages are read (a drop goes out before an earlier query's batch). A partition's
commit point is therefore its lowest offset read and not yet acknowledged, or one past the last offset
read when every one is: a restart re-reads from there, and skips what it finds handed on.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field


@dataclass
class _Partition:
    next_offset: int
    unacknowledged: deque[int] = field(default_factory=deque)  # ascending: offsets are read in order
    acknowledged: set[int] = field(default_factory=set)  # of those, the ones acknowledged out of order

    def commit_point(self) -> int:
        waiting, acknowledged = self.unacknowledged, self.acknowledged
        while waiting and waiting[0] in acknowledged:
            acknowledged.discard(waiting.popleft())
        return waiting[0] if waiting else self.next_offset


class Acknowledgements:
    """Offsets read and acknowledged, per partition owned; `commit_points` says what may be committed."""

    def __init__(self) -> None:
        self._partitions: dict[int, _Partition] = {}

    def read(self, partition: int, offset: int) -> None:
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = _Partition(offset)
        state.unacknowledged.append(offset)
        state.next_offset = offset + 1

    def acknowledge(self, partition: int, offset: int) -> None:
        """Late acknowledgements of a partition given up meanwhile are ignored: its new owner re-reads the
        message and finds it handed on."""
        state = self._partitions.get(partition)
        if state is not None:
            state.acknowledged.add(offset)

    def commit_points(self, partitions: set[int] | None = None) -> dict[int, int]:
        """partition -> the offset to commit (the next one to read after a restart), for ``partitions``
        (default: every partition read)."""
        return {partition: state.commit_point() for partition, state in self._partitions.items()
                if partitions is None or partition in partitions}

    def forget(self, partitions: set[int]) -> None:
        for partition in partitions:
            self._partitions.pop(partition, None)
