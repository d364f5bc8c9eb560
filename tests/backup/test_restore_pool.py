"""The restore pool: few restores at once, one per namespace, each within its deadline."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from provider.backup.restore.pool import DeadlineExceededError, Key, RestorePool

# Long enough to mean "never" to the cases that do not end their work.
NEVER = 3600.0


class Works:
    """Restores that run until told to end, counting how many run at once."""

    def __init__(self) -> None:
        self.running: set[Key] = set()
        self.most = 0
        self.release: dict[Key, asyncio.Event] = {}

    def of(self, key: Key) -> Callable[[], Awaitable[None]]:
        self.release[key] = asyncio.Event()

        async def work() -> None:
            self.running.add(key)
            self.most = max(self.most, len(self.running))
            try:
                await self.release[key].wait()
            finally:
                self.running.discard(key)

        return work


def _failure(error: BaseException) -> str:
    return "past its deadline" if isinstance(error, DeadlineExceededError) else str(error)


async def _settled() -> None:
    """Let every task that can run do so until it waits again."""
    for _ in range(10):
        await asyncio.sleep(0)


@dataclass(frozen=True)
class BoundCase:
    reason: str
    limit: int
    keys: list[Key]
    want_running: int


BOUND_CASES = [
    BoundCase(
        "Ten restores in ten namespaces run two at a time with a limit of two.",
        2,
        [(f"team-{i}", "ctp") for i in range(10)],
        2,
    ),
    BoundCase(
        "Five restores in one namespace run one at a time whatever the limit.",
        4,
        [("team-a", f"ctp-{i}") for i in range(5)],
        1,
    ),
    BoundCase(
        "A namespace with many restores takes one slot: the other namespace gets the other.",
        2,
        [("team-a", "one"), ("team-a", "two"), ("team-a", "three"), ("team-b", "one")],
        2,
    ),
]


@pytest.mark.parametrize("case", BOUND_CASES, ids=lambda case: case.reason)
def test_restores_run_at_most_the_limit_at_once_and_one_per_namespace(case: BoundCase) -> None:
    async def run() -> None:
        works = Works()
        pool = RestorePool(limit=case.limit, deadline=NEVER)
        jobs = [pool.start(key, "b", works.of(key), _failure) for key in case.keys]
        await _settled()
        assert len(works.running) == pool.running() == case.want_running
        namespaces = [key[0] for key in works.running]
        assert len(namespaces) == len(set(namespaces)), "one restore per namespace at a time"
        # Each ends in turn; every queued one gets its slot, never more than the limit at once.
        for job in jobs:
            while not job.started:
                for key in list(works.running):
                    works.release[key].set()
                await _settled()
        for key in case.keys:
            works.release[key].set()
        await _settled()
        assert all(job.finished and job.error is None for job in jobs)
        assert works.most == case.want_running
        await pool.close()

    asyncio.run(run())


def test_a_restore_that_never_ends_fails_at_its_deadline_and_frees_its_slot() -> None:
    async def run() -> None:
        woken: list[Key] = []
        pool = RestorePool(limit=1, deadline=0.05, wake=woken.append)
        stuck = ("team-a", "stuck")
        job = pool.start(stuck, "b", _forever, _failure)
        behind = pool.start(("team-b", "next"), "b", _noop, _failure)
        assert job.task is not None and behind.task is not None
        await asyncio.wait_for(asyncio.gather(job.task, behind.task), timeout=10)
        assert (job.finished, job.error) == (True, "past its deadline")
        assert (behind.finished, behind.error) == (True, None)
        assert woken.count(stuck) == 2, "woken when it starts and when it ends"
        await pool.close()

    asyncio.run(run())


async def _forever() -> None:
    await asyncio.Event().wait()


async def _noop() -> None:
    return None


async def _refused() -> None:
    msg = "Backup team-a/b not found"
    raise RuntimeError(msg)


def test_a_failed_restore_says_why_and_runs_again_once_forgotten() -> None:
    async def run() -> None:
        pool = RestorePool(limit=1, deadline=NEVER)
        key = ("team-a", "ctp")
        job = pool.start(key, "b", _refused, _failure)
        assert pool.start(key, "b", _refused, _failure) is job, "started once while it runs"
        assert job.task is not None
        await job.task
        assert job.error == "Backup team-a/b not found"
        assert pool.start(key, "b", _noop, _failure) is job, "kept until the reconcile reads it"
        pool.forget(key)
        again = pool.start(key, "b", _noop, _failure)
        assert again is not job
        assert again.task is not None
        await again.task
        assert (again.finished, again.error) == (True, None)
        await pool.close()

    asyncio.run(run())


def test_cancelling_a_restore_stops_it_and_lets_the_next_in_its_namespace_run() -> None:
    async def run() -> None:
        works = Works()
        pool = RestorePool(limit=2, deadline=NEVER)
        first, second = ("team-a", "deleted"), ("team-a", "waiting")
        pool.start(first, "b", works.of(first), _failure)
        waiting = pool.start(second, "b", works.of(second), _failure)
        await _settled()
        assert works.running == {first}
        await pool.cancel(first)
        await _settled()
        assert pool.job(first) is None
        assert waiting.started and works.running == {second}
        await pool.close()
        assert pool.job(second) is None

    asyncio.run(run())
