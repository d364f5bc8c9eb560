"""Restores run apart from the reconcile loop: few at once, one per namespace, each bounded.

A restore can take as long as its archive is large and its CRDs are slow to be
Established. Run inside an Instance's reconcile it held one of the provider's
workers all that time, and was tried again at every poll: ten restores that
never finish held every worker, so no other team's Instance was reconciled.
The pool runs each restore as a task of its own instead. At most ``limit``
run at once, at most one per namespace (one team's restores never take every
slot), and each ends at its deadline. The reconcile only starts a restore,
reads where it stands and reports it; the pool wakes the Instance when there
is something new to report.

Pure asyncio: no I/O of its own, so it is tested without servers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

# (namespace, name) of the Instance a restore is for.
Key = tuple[str, str]
# Told the Instance whose restore has news (progress, or its end).
Wake = Callable[[Key], None]

log = logging.getLogger(__name__)


class DeadlineExceededError(Exception):
    """A restore ran past its deadline and was stopped."""


@dataclass
class Job:
    """One restore in the pool: queued, running, then finished with an error or none."""

    key: Key
    backup_name: str
    started: bool = False
    finished: bool = False
    # Why it failed: safe to show (a RestoreError's or KubeError's message); None when it did not.
    error: str | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)


class RestorePool:
    """Runs restores as tasks: ``limit`` at once, one per namespace, each within ``deadline``."""

    def __init__(self, *, limit: int, deadline: float, wake: Wake | None = None) -> None:
        """``deadline`` is in seconds, from the moment a restore starts running (not queued)."""
        if limit < 1:
            msg = "a restore pool runs at least one restore at a time"
            raise ValueError(msg)
        self.limit = limit
        self.deadline = deadline
        self.wake = wake or (lambda _key: None)
        self._slots = asyncio.Semaphore(limit)
        # A lock per namespace with restores queued or running, and how many there are.
        self._namespaces: dict[str, tuple[asyncio.Lock, int]] = {}
        self._jobs: dict[Key, Job] = {}

    def job(self, key: Key) -> Job | None:
        """The restore of Instance ``key``, queued, running or finished; None when there is none."""
        return self._jobs.get(key)

    def start(
        self,
        key: Key,
        backup_name: str,
        work: Callable[[], Awaitable[None]],
        failure: Callable[[BaseException], str],
    ) -> Job:
        """Queue ``work``, the restore of Instance ``key``; the job it is now.

        A job already there, running or finished, is returned as it is: a
        finished one stays until ``forget``, so its end is read once.

        ``failure`` says, for an error ``work`` raised (or ``DeadlineExceededError``),
        what the job's ``error`` is.
        """
        known = self._jobs.get(key)
        if known is not None:
            return known
        job = Job(key, backup_name)
        self._jobs[key] = job
        job.task = asyncio.create_task(self._run(job, work, failure), name=f"restore {key}")
        return job

    def forget(self, key: Key) -> None:
        """Drop a finished job, so the next ``start`` runs the restore again."""
        found = self._jobs.get(key)
        if found is not None and found.finished:
            del self._jobs[key]

    async def cancel(self, key: Key) -> None:
        """Stop and drop the restore of Instance ``key``, if there is one."""
        job = self._jobs.pop(key, None)
        if job is not None and job.task is not None:
            job.task.cancel()
            await asyncio.gather(job.task, return_exceptions=True)

    def running(self) -> int:
        """How many restores are running now (not queued)."""
        return sum(1 for job in self._jobs.values() if job.started and not job.finished)

    async def close(self) -> None:
        """Stop every restore; a stopped one resumes from its record when started again."""
        tasks = [job.task for job in self._jobs.values() if job.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._jobs.clear()

    async def _run(
        self,
        job: Job,
        work: Callable[[], Awaitable[None]],
        failure: Callable[[BaseException], str],
    ) -> None:
        namespace = job.key[0]
        lock, users = self._namespaces.get(namespace, (asyncio.Lock(), 0))
        self._namespaces[namespace] = (lock, users + 1)
        try:
            async with lock, self._slots:
                job.started = True
                self.wake(job.key)
                try:
                    async with asyncio.timeout(self.deadline):
                        await work()
                except TimeoutError:
                    job.error = failure(DeadlineExceededError())
                except Exception as error:  # noqa: BLE001 (every end is reported on the Instance)
                    job.error = failure(error)
        finally:
            job.finished = True
            lock, users = self._namespaces[namespace]
            if users == 1:
                del self._namespaces[namespace]
            else:
                self._namespaces[namespace] = (lock, users - 1)
        self.wake(job.key)
