"""Queries sent at a rate from a thread, the load of the live tests."""
from __future__ import annotations

import threading
import time
from collections.abc import Callable

from schemas import Query
from shared.adapters.client import MeridianClient


class Sender:
    """Sends ``make_query()`` at ``rate`` queries/s from a thread, until stopped or ``count`` are sent;
    ``sent`` holds the queries as sent (stamped with their time of sending).

    Paced from a schedule, not by sleeping a period after each send: on a busy host the sends' own time would
    otherwise slow the rate, and a test's timeline would stop matching it.
    """

    def __init__(self, client: MeridianClient, make_query: Callable[[], Query], rate: float,
                 count: int | None = None) -> None:
        self.client, self.make_query, self.count = client, make_query, count
        self.sent: list[Query] = []
        self.follow(lambda _: rate)
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def follow(self, rate: Callable[[float], float]) -> None:
        """From now on send at ``rate(seconds since now)`` queries/s; at 0 none, and the schedule restarts after."""
        self._rate = rate, time.monotonic()  # one assignment: the thread never sees a rate with another's start

    def wait(self) -> None:
        """Until all ``count`` queries are sent."""
        self._thread.join()
        self._raise()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._raise()

    def __enter__(self) -> Sender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        try:
            due = time.monotonic()
            while not self._stop.is_set() and (self.count is None or len(self.sent) < self.count):
                rate, since = self._rate
                qps = rate(time.monotonic() - since)
                if qps <= 0:
                    self._stop.wait(0.05)
                    due = time.monotonic()
                    continue
                self.sent.append(self.client.send(self.make_query()))
                due += 1.0 / qps
                self._stop.wait(max(0.0, due - time.monotonic()))
        except BaseException as error:  # a sender that died would otherwise only show as too few queries
            self._error = error

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
