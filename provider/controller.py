"""A controller: list and watch one kind, queue the keys, reconcile them with workers.

The queue (``runtime.queue``) gives client-go's guarantees: a key is never
reconciled by two workers at once, failures back off per key, and a
successful reconcile comes back after the poll interval (with jitter, so a
fleet of resources does not poll in lockstep). Every sync period, every object
of the kind last seen is queued again (controller-runtime's SyncPeriod), so
nothing is left alone for longer whatever became of its requeue.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from provider import kube
from provider.kube import Cluster, Resource
from provider.managed.reconciler import Result
from provider.runtime import metrics
from provider.runtime.queue import RateLimitingQueue

log = logging.getLogger(__name__)

Key = tuple[str, str]
Reconcile = Callable[[str, str], Awaitable[Result]]
Mapper = Callable[[dict[str, Any]], list[Key]]

WATCH_RETRY_SECONDS = (1.0, 30.0)
POLL_JITTER = 0.1


def own_key(obj: dict[str, Any]) -> list[Key]:
    """The object's own key."""
    metadata = obj.get("metadata") or {}
    return [(str(metadata.get("namespace", "")), str(metadata.get("name", "")))]


class Controller:
    """Reconciles every object of one kind, and what watched kinds map to."""

    def __init__(
        self,
        name: str,
        cluster: Cluster,
        resource: Resource,
        reconcile: Reconcile,
        *,
        workers: int = 4,
        also_watch: tuple[tuple[Resource, Mapper], ...] = (),
        queue: RateLimitingQueue[Key] | None = None,
        sync_period: float | None = None,
    ) -> None:
        """Reconcile ``resource``; ``also_watch`` maps other kinds' events to its keys.

        ``sync_period`` (seconds) queues every object of ``resource`` again that
        often; ``None`` never does.
        """
        self.name = name
        self.cluster = cluster
        self.resource = resource
        self.reconcile = reconcile
        self.workers = workers
        self.sources: tuple[tuple[Resource, Mapper], ...] = ((resource, own_key), *also_watch)
        self.queue: RateLimitingQueue[Key] = queue or RateLimitingQueue()
        self.sync_period = sync_period
        self.synced = asyncio.Event()
        # The keys of ``resource`` the list and watch last saw, for the resync.
        self._seen: set[Key] = set()
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        metrics.track_workqueue_depth(name, lambda: float(len(self.queue)))

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; then drain nothing and return."""
        listed = [asyncio.Event() for _ in self.sources]
        watchers = [
            asyncio.create_task(self._watch(resource, mapper, stop, done))
            for (resource, mapper), done in zip(self.sources, listed, strict=True)
        ]
        workers = [asyncio.create_task(self._work()) for _ in range(self.workers)]
        for done in listed:
            await _first(done.wait(), stop.wait())
        if not stop.is_set():
            self.synced.set()
        if self.sync_period is not None:
            watchers.append(asyncio.create_task(self._resync(self.sync_period, stop)))
        await stop.wait()
        self.queue.shut_down()
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, *workers, return_exceptions=True)
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def _watch(
        self, resource: Resource, mapper: Mapper, stop: asyncio.Event, listed: asyncio.Event
    ) -> None:
        """List, then watch from the list's version; list again when the watch falls behind."""
        delay = WATCH_RETRY_SECONDS[0]
        version = ""
        while not stop.is_set():
            try:
                if not version:
                    items, version = await self.cluster.list(resource)
                    if resource == self.resource:
                        self._seen = {key for item in items for key in own_key(item)}
                    for item in items:
                        self._enqueue(mapper(item))
                    listed.set()
                async for event in self.cluster.watch(resource, version):
                    version = str(event.object.get("metadata", {}).get("resourceVersion", version))
                    if event.type == "BOOKMARK":
                        continue
                    if resource == self.resource:
                        self._remember(event.type, event.object)
                    self._enqueue(mapper(event.object))
                delay = WATCH_RETRY_SECONDS[0]
            except kube.GoneError:
                version = ""
            except kube.KubeError as error:
                log.warning(
                    "watch failed",
                    extra={"fields": {"controller": self.name, "error": str(error)}},
                )
                version = ""
                await _first(asyncio.sleep(delay), stop.wait())
                delay = min(delay * 2, WATCH_RETRY_SECONDS[1])

    def _remember(self, event_type: str, obj: dict[str, Any]) -> None:
        for key in own_key(obj):
            if event_type == "DELETED":
                self._seen.discard(key)
            else:
                self._seen.add(key)

    async def _resync(self, period: float, stop: asyncio.Event) -> None:
        """Queue every object last seen, every ``period`` seconds, until ``stop``."""
        while not stop.is_set():
            await _first(asyncio.sleep(period), stop.wait())
            if not stop.is_set():
                self._enqueue(sorted(self._seen))

    def _enqueue(self, keys: list[Key]) -> None:
        for key in keys:
            self.queue.add(key)

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            key = await loop.run_in_executor(self._executor, self.queue.get, None)
            if key is None:
                return
            start = time.perf_counter()
            try:
                result = await self.reconcile(*key)
            except Exception:
                # The reconciler reports what it can; anything else is a bug,
                # logged without the object (which could hold a secret).
                log.exception(
                    "reconcile raised", extra={"fields": {"controller": self.name, "request": key}}
                )
                result = Result(requeue=True)
            finally:
                self.queue.done(key)
            metrics.record_reconcile(self.name, _outcome(result), time.perf_counter() - start)
            if result.requeue:
                self.queue.add_rate_limited(key)
                continue
            self.queue.forget(key)
            if result.requeue_after is not None:
                jitter = 1 + random.uniform(-POLL_JITTER, POLL_JITTER)  # noqa: S311 (not crypto)
                self.queue.add_after(key, result.requeue_after * jitter)


def _outcome(result: Result) -> metrics.Result:
    return "error" if result.requeue else "success"


async def _first(*waits: Awaitable[Any]) -> None:
    """Wait until the first of ``waits`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
