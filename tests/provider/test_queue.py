"""The work queue: dedupe, dirty keys, delays, backoff, shutdown and concurrency."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from provider.runtime.queue import FakeClock, RateLimitingQueue

Key = tuple[str, str]
A: Key = ("ns", "a")
B: Key = ("ns", "b")
C: Key = ("ns", "c")

# Real seconds a test waits at most for another thread; never reached when all is well.
DEADLINE = 10.0


def fake_queue(**options: float) -> tuple[RateLimitingQueue[Key], FakeClock]:
    clock = FakeClock()
    return RateLimitingQueue[Key](clock=clock, **options), clock


def drain(queue: RateLimitingQueue[Key]) -> list[Key]:
    """Every ready key, in order, each marked done."""
    keys = []
    while (key := queue.get(timeout=0)) is not None:
        queue.done(key)
        keys.append(key)
    return keys


class Getter:
    """A thread blocked in ``get``; ``result`` waits for what it returned."""

    def __init__(self, queue: RateLimitingQueue[Key], timeout: float | None = None) -> None:
        self._returned = threading.Event()
        self._key: Key | None = None

        def run() -> None:
            self._key = queue.get(timeout)
            self._returned.set()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def result(self) -> Key | None:
        assert self._returned.wait(DEADLINE), "get() did not return"
        return self._key

    def returned(self) -> bool:
        return self._returned.is_set()


def test_a_key_added_twice_is_queued_once() -> None:
    queue, _ = fake_queue()
    for key in (A, B, A, A, B):
        queue.add(key)

    assert len(queue) == 2
    assert drain(queue) == [A, B]


def test_a_key_added_while_processing_waits_for_done_then_comes_back_once() -> None:
    queue, _ = fake_queue()
    queue.add(A)
    assert queue.get(timeout=0) == A

    queue.add(A)
    queue.add(A)
    assert len(queue) == 0, "a processing key must not be handed to a second worker"
    assert queue.get(timeout=0) is None

    queue.done(A)
    assert len(queue) == 1
    assert drain(queue) == [A]


def test_a_key_not_added_while_processing_is_gone_after_done() -> None:
    queue, _ = fake_queue()
    queue.add(A)
    assert queue.get(timeout=0) == A
    queue.done(A)

    assert len(queue) == 0
    assert queue.get(timeout=0) is None


def test_delayed_keys_become_ready_in_order_of_their_time() -> None:
    queue, clock = fake_queue()
    queue.add_after(A, 5)
    queue.add_after(B, 2)
    queue.add_after(C, 0)  # no delay: ready now

    assert (len(queue), queue.waiting()) == (1, 2)
    assert drain(queue) == [C]

    clock.advance(1.999)
    assert drain(queue) == []
    clock.advance(0.001)
    assert drain(queue) == [B]
    clock.advance(3)
    assert drain(queue) == [A]
    assert queue.waiting() == 0


@dataclass
class DelayCase:
    reason: str
    delays: tuple[float, ...]
    ready_at: float


@pytest.mark.parametrize(
    "case",
    [
        DelayCase("a sooner add moves a waiting key earlier", (10, 3), ready_at=3),
        DelayCase("a later add does not postpone a waiting key", (3, 10), ready_at=3),
        DelayCase("the earliest of many adds wins", (7, 9, 4, 6), ready_at=4),
    ],
    ids=lambda c: c.reason,
)
def test_a_key_added_after_several_delays_is_ready_once_at_the_earliest(case: DelayCase) -> None:
    queue, clock = fake_queue()
    for delay in case.delays:
        queue.add_after(A, delay)
    assert queue.waiting() == 1

    clock.advance(case.ready_at - 0.5)
    assert len(queue) == 0
    clock.advance(0.5)
    assert drain(queue) == [A]

    clock.advance(max(case.delays))
    assert drain(queue) == [], "the later delays must not queue the key again"
    assert queue.waiting() == 0


def test_a_blocked_get_wakes_when_a_delayed_key_comes_due() -> None:
    queue, clock = fake_queue()
    getter = Getter(queue)
    assert clock.block_until_waiters(1, DEADLINE)

    queue.add_after(A, 5)
    clock.advance(4)
    assert clock.block_until_waiters(1, DEADLINE)
    assert not getter.returned()

    clock.advance(1)
    assert getter.result() == A


def test_a_get_with_a_timeout_returns_none_when_it_passes() -> None:
    queue, clock = fake_queue()
    getter = Getter(queue, timeout=3)
    assert clock.block_until_waiters(1, DEADLINE)

    clock.advance(2)
    assert clock.block_until_waiters(1, DEADLINE)
    assert not getter.returned()

    clock.advance(1)
    assert getter.result() is None


@dataclass
class BackoffCase:
    reason: str
    options: dict[str, float]
    want: tuple[float, ...]


@pytest.mark.parametrize(
    "case",
    [
        BackoffCase(
            "the defaults double from one second up to crossplane-runtime's minute",
            {},
            (1, 2, 4, 8, 16, 32, 60, 60, 60),
        ),
        BackoffCase(
            "a custom base and cap",
            {"base_delay": 0.5, "max_delay": 3},
            (0.5, 1, 2, 3, 3),
        ),
        BackoffCase(
            "a custom factor",
            {"base_delay": 1, "max_delay": 100, "factor": 10},
            (1, 10, 100, 100),
        ),
    ],
    ids=lambda c: c.reason,
)
def test_each_failure_doubles_a_keys_backoff_up_to_the_cap(case: BackoffCase) -> None:
    queue, _ = fake_queue(**case.options)

    got = tuple(queue.add_rate_limited(A) for _ in case.want)

    assert got == pytest.approx(case.want)
    assert queue.failures(A) == len(case.want)


def test_a_backoff_far_past_the_cap_stays_at_the_cap() -> None:
    queue, _ = fake_queue()
    for _ in range(2000):
        queue.add_rate_limited(A)

    assert queue.add_rate_limited(A) == 60


def test_forget_resets_a_keys_backoff_and_leaves_other_keys_alone() -> None:
    queue, _ = fake_queue()
    for _ in range(4):
        queue.add_rate_limited(A)
        queue.add_rate_limited(B)

    queue.forget(A)

    assert queue.failures(A) == 0
    assert queue.add_rate_limited(A) == 1
    assert queue.failures(B) == 4
    assert queue.add_rate_limited(B) == 16


def test_a_rate_limited_key_is_ready_after_its_backoff() -> None:
    queue, clock = fake_queue()
    queue.add_rate_limited(A)
    queue.add_rate_limited(A)  # backoff 2 s, but the first one (1 s) is earlier
    assert (len(queue), queue.waiting()) == (0, 1)

    clock.advance(1)
    assert drain(queue) == [A]
    assert queue.failures(A) == 2


def test_shut_down_wakes_every_blocked_get_with_none() -> None:
    queue, clock = fake_queue()
    getters = [Getter(queue) for _ in range(3)]
    assert clock.block_until_waiters(3, DEADLINE)

    queue.shut_down()

    assert [g.result() for g in getters] == [None, None, None]


def test_shut_down_with_the_real_clock_wakes_a_blocked_get() -> None:
    queue = RateLimitingQueue[Key]()
    getter = Getter(queue)

    queue.shut_down()

    assert getter.result() is None


def test_after_shut_down_queued_keys_drain_and_new_or_delayed_keys_are_dropped() -> None:
    queue, clock = fake_queue()
    queue.add(A)
    queue.add_after(B, 1)

    queue.shut_down()
    queue.add(C)
    queue.add_after(C, 1)
    clock.advance(1)

    assert queue.waiting() == 0
    assert drain(queue) == [A]
    assert queue.get() is None, "a shut-down queue must not block"


def test_a_key_being_processed_at_shut_down_is_handed_out_again_if_it_was_dirty() -> None:
    queue, _ = fake_queue()
    queue.add(A)
    assert queue.get(timeout=0) == A
    queue.add(A)

    queue.shut_down()
    queue.done(A)

    assert drain(queue) == [A]


@pytest.mark.parametrize(
    ("base_delay", "max_delay", "factor"),
    [(0, 300, 2), (2, 1, 2), (1, 300, 0.5)],
    ids=["a zero base", "a cap below the base", "a shrinking factor"],
)
def test_a_queue_with_a_backoff_that_cannot_work_is_refused(
    base_delay: float, max_delay: float, factor: float
) -> None:
    with pytest.raises(ValueError, match="base_delay"):
        RateLimitingQueue[Key](base_delay=base_delay, max_delay=max_delay, factor=factor)


@pytest.fixture
def frequent_thread_switches() -> Iterator[None]:
    """Make the interpreter switch threads often, so races have room to happen."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("frequent_thread_switches")
def test_many_workers_never_process_one_key_at_once_and_lose_no_update() -> None:
    queue = RateLimitingQueue[Key](base_delay=0.001, max_delay=0.002)
    keys = [("ns", f"k{i}") for i in range(8)]
    changed = threading.Condition()
    in_flight: set[Key] = set()
    overlaps: list[Key] = []
    busy = 0  # workers between get() and the end of done()
    processed: Counter[Key] = Counter()
    # A producer bumps a key's version before adding it; a worker reads it when it
    # starts, so the last version seen by some worker must be the last one made.
    version: Counter[Key] = Counter()
    seen: dict[Key, int] = {}

    def work() -> None:
        nonlocal busy
        while (key := queue.get(timeout=DEADLINE)) is not None:
            with changed:
                busy += 1
                if key in in_flight:
                    overlaps.append(key)
                in_flight.add(key)
                seen[key] = max(seen.get(key, 0), version[key])
            # Give other threads a chance to pick the same key up, were it possible.
            time.sleep(0)
            with changed:
                in_flight.discard(key)
                processed[key] += 1
                fail = processed[key] % 7 == 0
            if fail:
                queue.add_rate_limited(key)
            else:
                queue.forget(key)
            queue.done(key)
            with changed:
                busy -= 1
                changed.notify_all()

    def produce(offset: int) -> None:
        for i in range(2000):
            key = keys[(i + offset) % len(keys)]
            with changed:
                version[key] += 1
            queue.add(key)
            time.sleep(0)

    def idle() -> bool:
        return busy == 0 and len(queue) == 0 and queue.waiting() == 0

    workers = [threading.Thread(target=work, daemon=True) for _ in range(6)]
    producers = [threading.Thread(target=produce, args=(n,), daemon=True) for n in range(3)]
    for thread in workers + producers:
        thread.start()
    for thread in producers:
        thread.join(DEADLINE)
        assert not thread.is_alive()
    # Rate-limited keys come back a few milliseconds later: wait until nothing is
    # ready, waiting or being processed, so shutting down drops nothing.
    with changed:
        assert changed.wait_for(idle, DEADLINE), "the queue did not drain"
    queue.shut_down()
    for thread in workers:
        thread.join(DEADLINE)
        assert not thread.is_alive()

    assert overlaps == []
    assert set(processed) == set(keys)
    assert seen == dict(version)
