"""A controller: watch one kind through a cache, queue the keys, reconcile them with workers.

The queue (``runtime.queue``) gives client-go's guarantees: a key is never
reconciled by two workers at once, failures back off per key, and a
successful reconcile comes back after the poll interval (with jitter, so a
fleet of resources does not poll in lockstep). Every sync period, every cached
object of the kind is queued again (controller-runtime's SyncPeriod), so
nothing is left alone for longer whatever became of its requeue.

Events come from ``cache.Informer``s: the controller's own kind and the kinds
``also_watch`` maps to its keys. An informer passed in is shared (the readers
of the same cache run it); one made here from a ``Resource`` is run here.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from provider.cache import Informer, first_of
from provider.kube import Cluster, Resource
from provider.managed import meta
from provider.managed.reconciler import Result
from provider.runtime import metrics
from provider.runtime.queue import RateLimitingQueue

log = logging.getLogger(__name__)

Key = tuple[str, str]
Reconcile = Callable[[str, str], Awaitable[Result]]
Mapper = Callable[[dict[str, Any]], list[Key]]
# Whether an update of the controller's own kind is worth a reconcile (old, new).
Predicate = Callable[[dict[str, Any], dict[str, Any]], bool]

POLL_JITTER = 0.1


def own_key(obj: dict[str, Any]) -> list[Key]:
    """The object's own key."""
    metadata = obj.get("metadata") or {}
    return [(str(metadata.get("namespace", "")), str(metadata.get("name", "")))]


# The create bookkeeping the managed reconciler writes around each create call
# (crossplane-runtime's critical annotations). A failed create writes two of them;
# were they to wake the resource, a create that keeps failing (a bucket part before
# its bucket exists) would retry at the speed of the round trip instead of the
# queue's backoff, and every retry is a watch event on what a composite composes.
CREATE_BOOKKEEPING = frozenset(
    {meta.EXTERNAL_CREATE_PENDING, meta.EXTERNAL_CREATE_SUCCEEDED, meta.EXTERNAL_CREATE_FAILED}
)


def desired_state_changed(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """crossplane-runtime's DesiredStateChanged: not a write of the status alone.

    The managed reconciler writes the status of every resource it reconciles;
    reconciling again because of that write would double the work for nothing.
    Nor does the reconciler's own create bookkeeping wake it (it requeues itself
    after each create), unless such an annotation is removed: that is how an
    operator releases a resource whose create was interrupted.
    """
    before, after = old.get("metadata") or {}, new.get("metadata") or {}
    return (
        before.get("generation") != after.get("generation")
        or before.get("labels") != after.get("labels")
        or _desired(before) != _desired(after)
        or bool(_bookkeeping(before) - _bookkeeping(after))
        or before.get("finalizers") != after.get("finalizers")
        or before.get("deletionTimestamp") != after.get("deletionTimestamp")
    )


def _desired(metadata: dict[str, Any]) -> dict[str, str]:
    """The annotations but the create bookkeeping."""
    annotations: dict[str, str] = metadata.get("annotations") or {}
    return {k: v for k, v in annotations.items() if k not in CREATE_BOOKKEEPING}


def _bookkeeping(metadata: dict[str, Any]) -> frozenset[str]:
    """Which create bookkeeping annotations are set."""
    return CREATE_BOOKKEEPING & (metadata.get("annotations") or {}).keys()


class Controller:
    """Reconciles every object of one kind, and what watched kinds map to."""

    def __init__(
        self,
        name: str,
        cluster: Cluster,
        resource: Resource | Informer,
        reconcile: Reconcile,
        *,
        workers: int = 4,
        also_watch: tuple[tuple[Resource | Informer, Mapper], ...] = (),
        queue: RateLimitingQueue[Key] | None = None,
        sync_period: float | None = None,
        predicate: Predicate | None = None,
        caches: tuple[Informer, ...] = (),
        coalesce: float = 0.0,
    ) -> None:
        """Reconcile ``resource``; ``also_watch`` maps other kinds' events to its keys.

        ``sync_period`` (seconds) queues every object of ``resource`` again that
        often; ``None`` never does. ``predicate(old, new)`` filters updates of
        ``resource`` (every other event is queued). ``caches`` are shared
        informers this controller runs (its reconciler reads them), and waits
        for before it calls itself synced. ``coalesce`` (seconds) holds the keys
        ``also_watch`` events map to for that long, so a burst of them (a usage
        for each of 5,000 new Instances) is one reconcile per key per period
        instead of one per event; its own kind's events are queued at once.
        """
        self.name = name
        self.cluster = cluster
        self.reconcile = reconcile
        self.workers = workers
        # Not `queue or ...`: an empty queue is falsy, and a queue passed in is shared.
        self.queue: RateLimitingQueue[Key] = queue if queue is not None else RateLimitingQueue()
        self.sync_period = sync_period
        self.coalesce = coalesce
        self.synced = asyncio.Event()
        self._owned: list[Informer] = list(caches)
        self.informer = self._informer(resource)
        self.resource = self.informer.resource
        self.informer.add_handler(self._own_handler(predicate))
        self.sources = [self.informer]
        for source, mapper in also_watch:
            informer = self._informer(source)
            informer.add_handler(self._mapped_handler(mapper))
            self.sources.append(informer)
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        metrics.track_workqueue_depth(name, lambda: float(len(self.queue)))

    def _informer(self, source: Resource | Informer) -> Informer:
        if isinstance(source, Informer):
            return source
        informer = Informer(self.cluster, source)
        self._owned.append(informer)
        return informer

    def _own_handler(
        self, predicate: Predicate | None
    ) -> Callable[[str, dict[str, Any], dict[str, Any] | None], None]:
        def handle(event_type: str, obj: dict[str, Any], old: dict[str, Any] | None) -> None:
            if (
                event_type == "MODIFIED"
                and old is not None
                and predicate is not None
                and not predicate(old, obj)
            ):
                return
            self._enqueue(own_key(obj))

        return handle

    def _mapped_handler(
        self, mapper: Mapper
    ) -> Callable[[str, dict[str, Any], dict[str, Any] | None], None]:
        def handle(_: str, obj: dict[str, Any], __: dict[str, Any] | None) -> None:
            for key in mapper(obj):
                # A key already held keeps its earlier time: one reconcile per period.
                self.queue.add_after(key, self.coalesce)

        return handle

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; then drain nothing and return."""
        watchers = [asyncio.create_task(informer.run(stop)) for informer in self._owned]
        workers = [asyncio.create_task(self._work()) for _ in range(self.workers)]
        for informer in [*self.sources, *self._owned]:
            await first_of(informer.synced.wait(), stop.wait())
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

    async def _resync(self, period: float, stop: asyncio.Event) -> None:
        """Queue every cached object, every ``period`` seconds, until ``stop``."""
        while not stop.is_set():
            await first_of(asyncio.sleep(period), stop.wait())
            if not stop.is_set():
                self._enqueue(self.informer.keys())

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
