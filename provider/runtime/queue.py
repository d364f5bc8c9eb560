"""A thread-safe, rate-limited, delaying work queue with client-go's semantics.

The rules, as in client-go's ``workqueue``:

- A key is queued at most once: adding a queued key again does nothing.
- A key is handed to one worker at a time. Adding a key that a worker is
  processing marks it dirty; ``done`` puts it back in the queue, so the update
  that came in during processing is not lost.
- ``add_after`` holds a key until its time comes; adding it again sooner moves it
  earlier, never later.
- ``add_rate_limited`` holds a key for an exponential backoff that grows with the
  key's failures, until ``forget`` resets them.
- After ``shut_down`` new keys are ignored, delayed keys are dropped, and ``get``
  hands out the keys still queued, then returns None.

Delayed keys are promoted by whoever next looks at the queue (``get``, ``len``,
``waiting``), which is why the queue needs no timer thread of its own and why a
fake clock can drive it in tests.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)


class Clock(Protocol):
    """Where the queue reads the time and waits for it to pass."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    def wait(self, condition: threading.Condition, deadline: float | None) -> None:
        """Wait on a condition whose lock the caller holds.

        Returns when the condition is notified, when ``deadline`` (on this clock's
        scale; None for no deadline) has passed, or spuriously: callers re-check.
        """
        ...


class MonotonicClock:
    """The real clock: ``time.monotonic``."""

    def now(self) -> float:
        """Seconds from ``time.monotonic``."""
        return time.monotonic()

    def wait(self, condition: threading.Condition, deadline: float | None) -> None:
        """Wait on ``condition`` until notified or ``deadline`` has passed."""
        if deadline is None:
            condition.wait()
        else:
            condition.wait(max(0.0, deadline - time.monotonic()))


class FakeClock:
    """A clock that moves only when told to, for tests.

    Waiters are woken whenever the time is advanced, so a test can move time past
    a deadline and then wait (on an event, with a real timeout) for what follows.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._lock = threading.Condition()
        self._now = start
        self._waiters: dict[threading.Condition, int] = {}

    def now(self) -> float:
        """The current fake time."""
        with self._lock:
            return self._now

    def wait(self, condition: threading.Condition, deadline: float | None) -> None:
        """Wait on ``condition`` until notified or until the fake time reaches ``deadline``."""
        with self._lock:
            # Checked under the clock's lock: an advance that happened after the
            # caller read the time either sees this waiter or is seen here.
            if deadline is not None and self._now >= deadline:
                return
            self._waiters[condition] = self._waiters.get(condition, 0) + 1
            self._lock.notify_all()
        try:
            condition.wait()
        finally:
            with self._lock:
                self._waiters[condition] -= 1
                if not self._waiters[condition]:
                    del self._waiters[condition]

    def advance(self, seconds: float) -> None:
        """Move the time forward and wake every waiter to re-check its deadline."""
        with self._lock:
            self._now += seconds
            conditions = list(self._waiters)
        # Notified outside the clock's lock: waiters take the condition first and
        # the clock second, and the order must never be reversed.
        for condition in conditions:
            with condition:
                condition.notify_all()

    def block_until_waiters(self, count: int, timeout: float) -> bool:
        """Wait (in real time) until ``count`` threads are waiting on this clock.

        Args:
            count: How many waiting threads to wait for.
            timeout: Real seconds to wait at most.

        Returns:
            True if that many threads were waiting before the timeout.
        """
        with self._lock:
            return self._lock.wait_for(lambda: sum(self._waiters.values()) >= count, timeout)


class RateLimitingQueue(Generic[K]):
    """A work queue of hashable keys with delays and per-key exponential backoff.

    Args:
        base_delay: The first backoff, in seconds.
        max_delay: The longest backoff, in seconds.
        factor: How much each failure multiplies the backoff by.
        clock: Where time is read; ``MonotonicClock`` unless a test passes a fake.
    """

    def __init__(
        self,
        *,
        base_delay: float = 1.0,
        # crossplane-runtime's ratelimiter.NewController: 1 s doubling up to 60 s.
        max_delay: float = 60.0,
        factor: float = 2.0,
        clock: Clock | None = None,
    ) -> None:
        if base_delay <= 0 or max_delay < base_delay or factor < 1:
            msg = "need 0 < base_delay <= max_delay and factor >= 1"
            raise ValueError(msg)
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._factor = factor
        self._clock: Clock = clock or MonotonicClock()
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        # Keys that need processing: queued ones, and processing ones added again.
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        # The earliest time each delayed key is due; the heap may hold stale
        # entries for keys since moved earlier, skipped when they surface.
        self._waiting: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._sequence = itertools.count()
        self._failures: dict[K, int] = {}
        self._shutting_down = False

    def add(self, key: K) -> None:
        """Queue ``key`` unless it is already queued; if it is processing, re-queue it on done."""
        with self._cond:
            self._add(key)

    def add_after(self, key: K, delay_seconds: float) -> None:
        """Queue ``key`` after ``delay_seconds``; an earlier time already set for it wins."""
        with self._cond:
            if self._shutting_down:
                return
            if delay_seconds <= 0:
                self._add(key)
                return
            due = self._clock.now() + delay_seconds
            current = self._waiting.get(key)
            if current is not None and current <= due:
                return
            self._waiting[key] = due
            heapq.heappush(self._heap, (due, next(self._sequence), key))
            # A getter may be sleeping until a later deadline, or with none.
            self._cond.notify_all()

    def add_rate_limited(self, key: K) -> float:
        """Queue ``key`` after its backoff, and count one more failure for it.

        Returns:
            The backoff, in seconds: ``base_delay * factor ** failures``, at most
            ``max_delay``, where ``failures`` is the count before this call.
        """
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            try:
                delay = min(self._base_delay * self._factor**failures, self._max_delay)
            except OverflowError:
                delay = self._max_delay
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Reset ``key``'s failures, so its next backoff is ``base_delay`` again."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        """How many times ``key`` went through ``add_rate_limited`` since it was forgotten."""
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> K | None:
        """Take the next ready key, blocking until one is ready.

        The caller must call ``done(key)`` when it has processed the key.

        Args:
            timeout: Seconds (on the queue's clock) to wait at most; None waits
                until a key is ready or the queue shuts down.

        Returns:
            The key, or None if the timeout passed or the queue is shut down and
            has no key left.
        """
        with self._cond:
            deadline = None if timeout is None else self._clock.now() + timeout
            while True:
                self._promote_due()
                if self._queue:
                    key = self._queue.popleft()
                    self._dirty.discard(key)
                    self._processing.add(key)
                    return key
                if self._shutting_down:
                    return None
                if deadline is not None and self._clock.now() >= deadline:
                    return None
                self._clock.wait(self._cond, _earliest(deadline, self._next_due()))

    def done(self, key: K) -> None:
        """Mark ``key`` processed; it is queued again if it was added meanwhile."""
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def shut_down(self) -> None:
        """Stop taking keys, drop delayed ones and wake every blocked ``get``."""
        with self._cond:
            self._shutting_down = True
            self._waiting.clear()
            self._heap.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        """The number of keys ready to be taken (delayed keys not included)."""
        with self._cond:
            self._promote_due()
            return len(self._queue)

    def waiting(self) -> int:
        """The number of keys waiting for their delay or backoff to pass."""
        with self._cond:
            self._promote_due()
            return len(self._waiting)

    def _add(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._cond.notify()

    def _promote_due(self) -> None:
        now = self._clock.now()
        while self._heap and self._heap[0][0] <= now:
            due, _, key = heapq.heappop(self._heap)
            if self._waiting.get(key) != due:
                continue
            del self._waiting[key]
            self._add(key)

    def _next_due(self) -> float | None:
        while self._heap and self._waiting.get(self._heap[0][2]) != self._heap[0][0]:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None


def _earliest(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
