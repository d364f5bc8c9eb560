"""Watch-fed caches of Kubernetes objects: client-go's informer and cached client, in small.

An ``Informer`` lists one kind (of a namespace or all, narrowed by selectors),
then watches it from the list's resourceVersion with bookmarks. A watch that
ends, or whose connection breaks, is resumed from the last version seen; a
``410 Gone`` (the version was compacted away) lists again, and a list tells its
handlers what changed and what disappeared while nobody watched.

A server may refuse the watch itself: an API without watch (an Upbound Cloud
Space's: "the Kubernetes watch feature isn't implemented", upbound/docs
``cloud-spaces-docs/howtos/gitops-on-upbound.md``; kube-apiserver answers 405
``MethodNotAllowed`` for a storage without watch), or a Role that grants
``list`` but not ``watch`` (403). Then, as client-go's reflector lists again
after any watch error it cannot resume from, the informer lists every
``relist_interval`` (the provider's poll interval) and tries the watch again
after each list; a failing list is tried again with a growing backoff. Reads
are never served from a cache that has not been refreshed for two relist
intervals while no watch is open (``fresh``): ``CachedClient`` then asks the
server, so a read that keeps failing fails in the server's words.

Objects are kept as compact JSON after a transform (by default: without
``metadata.managedFields``, which the provider never reads and which is often
the largest part of an object). A read decodes a fresh copy, so a reconcile
may change what it read without touching the cache, and the cache costs about
the size of the objects' JSON rather than of their Python dicts.

``CachedClient`` reads through the informers it is given and from the API
server otherwise; writes always go to the server, and their answers go into
the cache (so the next reconcile does not read what it just replaced). A write
that loses an optimistic-concurrency race refreshes the cached object from the
server before the error goes on. Only ``provider.kube`` talks to the server:
this module uses its ``Cluster``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from provider import kube
from provider.kube import Cluster, JsonObject, Resource
from provider.managed.reconciler import ConflictError

log = logging.getLogger(__name__)

Key = tuple[str, str]
# A transform keeps what the provider reads of an object, or None to keep nothing.
Transform = Callable[[JsonObject], JsonObject | None]
# (event type, the object now, the object before or None); DELETED passes the last one seen.
Handler = Callable[[str, JsonObject, JsonObject | None], None]
# The values an object is indexed under (client-go's IndexFunc).
IndexFunction = Callable[[JsonObject], list[str]]

RETRY_SECONDS = (0.5, 10.0)
PAGE_SIZE = 500
# How often a cache whose watch is refused is listed, unless its owner says.
DEFAULT_RELIST_SECONDS = 60.0
# Deleted keys remembered, so a write's late answer cannot bring a deleted object back.
_TOMBSTONES = 4096


def without_managed_fields(obj: JsonObject) -> JsonObject:
    """The object without ``metadata.managedFields`` (a PUT without them keeps the server's)."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def key_of(obj: Mapping[str, Any]) -> Key:
    """(namespace, name) of an object; the namespace is empty for cluster-scoped ones."""
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))


def version_of(obj: Mapping[str, Any]) -> str:
    """The object's resourceVersion."""
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def newer(version: str, than: str) -> bool:
    """Whether ``version`` is later than ``than``.

    resourceVersions are opaque to clients, but every etcd-backed API server
    serves etcd revisions, which grow; anything else counts as newer.
    """
    if version.isdigit() and than.isdigit():
        return int(version) > int(than)
    return version != than


def _selected(selector: str, values: Mapping[str, str]) -> bool:
    """Whether ``values`` satisfy an equality selector (``a=b,c=d``; ``a==b`` too)."""
    for term in filter(None, selector.split(",")):
        name, _, wanted = term.partition("=")
        if values.get(name.strip()) != wanted.lstrip("=").strip():
            return False
    return True


def _fields(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata") or {}
    return {
        "metadata.name": str(metadata.get("name") or ""),
        "metadata.namespace": str(metadata.get("namespace") or ""),
        "type": str(obj.get("type") or ""),
    }


class Informer:
    """A watch-fed cache of one kind, in one namespace or all, narrowed by selectors.

    ``authoritative`` says whether a miss means the object does not exist. It
    does for a whole kind; for a cache narrowed to the objects the provider
    labelled, an object made before it labelled them may exist unseen, and
    ``CachedClient`` asks the server on a miss.
    """

    def __init__(
        self,
        cluster: Cluster,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
        transform: Transform = without_managed_fields,
        authoritative: bool = True,
        relist_interval: float = DEFAULT_RELIST_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Cache ``resource`` as ``cluster`` serves it; nothing is read before ``run``.

        ``relist_interval`` is how often it lists when the server refuses its watch.
        """
        self.cluster = cluster
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform
        self.authoritative = authoritative
        self.relist_interval = relist_interval
        self.clock = clock
        self.version = ""
        self.synced = asyncio.Event()
        self.last_error: kube.KubeError | None = None
        # Why the server refuses the watch (the informer lists instead), or None.
        self.watch_refused: kube.KubeError | None = None
        # Whether a watch is open now, and when the cache was last known current.
        self._watching = False
        self._fresh_at: float | None = None
        self._store: dict[Key, tuple[str, bytes]] = {}
        self._index_functions: dict[str, IndexFunction] = {}
        # index name -> value -> keys; and key -> its values, to unindex it.
        self._indexes: dict[str, dict[str, set[Key]]] = {}
        self._indexed: dict[str, dict[Key, list[str]]] = {}
        self._tombstones: OrderedDict[Key, str] = OrderedDict()
        self._handlers: list[Handler] = []
        # Set after every list attempt, so a reader can wait for the first one.
        self._attempted = asyncio.Event()

    def __len__(self) -> int:
        """The number of cached objects."""
        return len(self._store)

    def add_handler(self, handler: Handler) -> None:
        """Call ``handler`` on every change seen; add before ``run`` to see the first list."""
        self._handlers.append(handler)

    def add_index(self, name: str, function: IndexFunction) -> None:
        """Index cached objects under ``function(obj)``; add before ``run``."""
        self._index_functions[name] = function
        self._indexes[name] = {}
        self._indexed[name] = {}

    def count(self, index: str, value: str) -> int:
        """How many cached objects ``index`` files under ``value``."""
        return len(self._indexes[index].get(value, ()))

    def covers(self, namespace: str | None) -> bool:
        """Whether objects of ``namespace`` are within this cache's reach."""
        return self.namespace is None or self.namespace == (namespace or "")

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether ``obj`` is one this cache holds (namespace and selectors)."""
        metadata = obj.get("metadata") or {}
        return (
            self.covers(metadata.get("namespace"))
            and _selected(self.label_selector, metadata.get("labels") or {})
            and _selected(self.field_selector, _fields(obj))
        )

    def fresh(self) -> bool:
        """Whether reads may be served from the cache: synced, and a watch open or a recent list.

        Recent: within two relist intervals, so one late list is not yet staleness.
        """
        if not self.synced.is_set() or self._fresh_at is None:
            return False
        return self._watching or self.clock() - self._fresh_at <= 2 * self.relist_interval

    def get(self, namespace: str | None, name: str) -> JsonObject | None:
        """A fresh copy of the cached object, or None."""
        stored = self._store.get((namespace or "", name))
        if stored is None:
            return None
        decoded: JsonObject = json.loads(stored[1])
        return decoded

    def items(self) -> list[JsonObject]:
        """Fresh copies of every cached object."""
        return [json.loads(data) for _, data in self._store.values()]

    def keys(self) -> list[Key]:
        """The keys of every cached object, sorted."""
        return sorted(self._store)

    def remember(self, obj: JsonObject) -> None:
        """Keep an object a write returned, unless the cache saw a later version or its deletion."""
        kept = self.transform(obj) if self.matches(obj) else None
        if kept is None:
            self.forget(obj)
            return
        key, version = key_of(kept), version_of(kept)
        stored = self._store.get(key)
        if stored is not None and not newer(version, stored[0]):
            return
        deleted = self._tombstones.get(key)
        if deleted is not None and not newer(version, deleted):
            return
        self._set(key, version, kept)

    def forget(self, obj: Mapping[str, Any]) -> None:
        """Drop an object the server says is gone (or no longer selected)."""
        self._drop(key_of(obj))

    def _set(self, key: Key, version: str, kept: JsonObject) -> None:
        self._set_encoded(key, version, _encode(kept), self._index_values(kept))

    def _index_values(self, kept: JsonObject) -> dict[str, list[str]]:
        return {name: function(kept) for name, function in self._index_functions.items()}

    def _set_encoded(
        self, key: Key, version: str, data: bytes, values: dict[str, list[str]]
    ) -> None:
        self._store[key] = (version, data)
        for name, indexed in values.items():
            self._unindex(name, key)
            self._indexed[name][key] = indexed
            for value in indexed:
                self._indexes[name].setdefault(value, set()).add(key)

    def _drop(self, key: Key) -> None:
        self._store.pop(key, None)
        for name in self._index_functions:
            self._unindex(name, key)

    def _unindex(self, name: str, key: Key) -> None:
        index = self._indexes[name]
        for value in self._indexed[name].pop(key, ()):
            keys = index.get(value)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del index[value]

    async def refresh(self, namespace: str | None, name: str) -> JsonObject | None:
        """Read one object from the server into the cache; it, or None when gone."""
        found = await self.cluster.get(self.resource, namespace, name)
        if found is None:
            self._drop((namespace or "", name))
            return None
        self.remember(found)
        return found

    async def wait_synced(self, timeout: float) -> None:
        """Wait until the first list is in, at most ``timeout`` seconds.

        Raises:
            KubeError: the list failed (its error), or took longer than ``timeout``.
        """
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._attempted.wait(), timeout)
        if self.synced.is_set():
            return
        if self.last_error is not None:
            raise self.last_error
        msg = f"the cache of {self.resource.plural} on {self.cluster.server} is not filled yet"
        raise kube.UnreachableError(msg)

    async def run(self, stop: asyncio.Event) -> None:
        """List and watch until ``stop`` is set (see the module's notes for what fails how)."""
        delay = RETRY_SECONDS[0]
        while not stop.is_set():
            try:
                if not self.version:
                    await self._list()
                    delay = RETRY_SECONDS[0]
                await self._watch()
                delay = RETRY_SECONDS[0]
            except kube.GoneError:
                log.info("watch expired; listing again", extra={"fields": self._fields()})
                self.version = ""
            except kube.UnreachableError as error:
                # The server or the connection is down: resume from the last version.
                await self._failed(
                    error, delay, stop, "watch failed" if self.version else "list failed"
                )
                delay = min(delay * 2, RETRY_SECONDS[1])
            except kube.KubeError as error:
                if not self.version:
                    # The list failed: again with a growing backoff, at most the interval.
                    await self._failed(error, delay, stop, "list failed")
                    delay = min(delay * 2, max(RETRY_SECONDS[1], self.relist_interval))
                    continue
                # The server refuses the watch: list every interval, try it after each.
                self._refused(error)
                self.version = ""
                await first_of(asyncio.sleep(self.relist_interval), stop.wait())
            except Exception:
                # A bug must not leave the cache silently stale: list again after a pause.
                log.exception("watch raised", extra={"fields": self._fields()})
                self.version = ""
                await first_of(asyncio.sleep(delay), stop.wait())
                delay = min(delay * 2, RETRY_SECONDS[1])

    async def _watch(self) -> None:
        """Follow a watch from ``self.version`` until the server ends it."""

        def opened() -> None:
            self._watching = True
            if self.watch_refused is not None:
                log.info("watch served again", extra={"fields": self._fields()})
                self.watch_refused = None

        try:
            async for event in self.cluster.watch(
                self.resource,
                self.version,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                on_open=opened,
            ):
                self._apply(event.type, event.object)
        finally:
            if self._watching:
                self._watching = False
                self._fresh_at = self.clock()

    def _refused(self, error: kube.KubeError) -> None:
        """Note that the watch is refused; said once at warning, then at debug."""
        fields = {**self._fields(), "error": str(error), "relist": self.relist_interval}
        if self.watch_refused is None:
            log.warning(
                "watch refused; listing at every interval instead", extra={"fields": fields}
            )
        else:
            log.debug("watch still refused", extra={"fields": fields})
        self.watch_refused = error

    async def _failed(
        self, error: kube.KubeError, delay: float, stop: asyncio.Event, what: str
    ) -> None:
        """Note a failure (said at warning when it is new, then at debug) and back off."""
        repeated = self.last_error is not None and str(self.last_error) == str(error)
        self.last_error = error
        self._attempted.set()
        fields = {**self._fields(), "error": str(error)}
        (log.debug if repeated else log.warning)(what, extra={"fields": fields})
        await first_of(asyncio.sleep(delay), stop.wait())

    async def _list(self) -> None:
        """Replace the cache with a fresh list; tell the handlers what changed.

        Each page is encoded as it comes, so a list of thousands holds one page
        of decoded objects at a time.
        """
        fresh: dict[Key, tuple[str, bytes, dict[str, list[str]]]] = {}
        version = ""
        async for page, page_version in self.cluster.list_pages(
            self.resource,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            page_size=PAGE_SIZE,
        ):
            version = page_version
            for item in page:
                kept = self.transform(item)
                if kept is not None:
                    fresh[key_of(kept)] = (
                        version_of(kept),
                        _encode(kept),
                        self._index_values(kept),
                    )
        before = self._store
        self._store = {}
        for name in self._index_functions:
            self._indexes[name] = {}
            self._indexed[name] = {}
        for key, (item_version, data, values) in fresh.items():
            self._set_encoded(key, item_version, data, values)
        self.version = version
        self.last_error = None
        self._fresh_at = self.clock()
        self.synced.set()
        self._attempted.set()
        for key, (_, data) in before.items():
            if key not in fresh:
                gone = json.loads(data)
                self._notify("DELETED", gone, gone)
        for key, (item_version, data, _) in fresh.items():
            old = before.get(key)
            if old is None:
                self._notify("ADDED", json.loads(data), None)
            elif old[0] != item_version:
                self._notify("MODIFIED", json.loads(data), json.loads(old[1]))

    def _apply(self, event_type: str, obj: JsonObject) -> None:
        version = version_of(obj)
        if version:
            self.version = version
        if event_type == "BOOKMARK":
            return
        key = key_of(obj)
        before = self._store.get(key)
        old = json.loads(before[1]) if before is not None else None
        kept = None if event_type == "DELETED" else self.transform(obj)
        if kept is None:
            self._drop(key)
            self._tombstones[key] = version
            self._tombstones.move_to_end(key)
            while len(self._tombstones) > _TOMBSTONES:
                self._tombstones.popitem(last=False)
            if old is not None or event_type == "DELETED":
                self._notify("DELETED", old or obj, old)
            return
        if before is None or newer(version, before[0]):
            self._set(key, version, kept)
        self._notify(event_type, kept, old)

    def _notify(self, event_type: str, obj: JsonObject, old: JsonObject | None) -> None:
        for handler in self._handlers:
            try:
                handler(event_type, obj, old)
            except Exception:
                log.exception("watch handler raised", extra={"fields": self._fields()})

    def _fields(self) -> dict[str, str]:
        return {
            "resource": self.resource.plural,
            "namespace": self.namespace or "",
            "server": self.cluster.server,
        }


def _encode(obj: JsonObject) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


class CachedClient:
    """Reads from watch-fed caches where it has one, writes to the API server.

    Without informers it is the plain ``Cluster``: every read goes to the server.
    """

    def __init__(self, cluster: Cluster, informers: Iterable[Informer] = ()) -> None:
        """Read ``cluster``'s objects from ``informers`` (one per resource at most)."""
        self.cluster = cluster
        self._informers = {informer.resource: informer for informer in informers}

    def informer(self, resource: Resource) -> Informer | None:
        """The cache of ``resource``, if there is one."""
        return self._informers.get(resource)

    async def get(self, resource: Resource, namespace: str | None, name: str) -> JsonObject | None:
        """The object from the cache; from the server where the cache cannot say."""
        informer = self._informers.get(resource)
        if informer is None or not informer.covers(namespace) or not informer.fresh():
            # Not cached, or not kept current (its watch and lists fail): the server says.
            return await self.cluster.get(resource, namespace, name)
        found = informer.get(namespace, name)
        if found is not None or informer.authoritative:
            return found
        return await self.cluster.get(resource, namespace, name)

    def get_cached(self, resource: Resource, namespace: str, name: str) -> JsonObject | None:
        """The object if a synced cache holds it; None otherwise, with no request.

        For a cache that is not authoritative None does not mean the object is
        absent: a caller about to create it does so and reads it on a conflict.
        """
        informer = self._informers.get(resource)
        if informer is None or not informer.covers(namespace) or not informer.fresh():
            return None
        return informer.get(namespace, name)

    def cached(self, resource: Resource) -> list[JsonObject] | None:
        """Every cached object of ``resource``; None when it is not cached (yet)."""
        informer = self._informers.get(resource)
        if informer is None or not informer.synced.is_set():
            return None
        return informer.items()

    async def create(self, resource: Resource, obj: Mapping[str, Any]) -> JsonObject:
        """Create ``obj``; the answer goes into the cache."""
        return self._remember(resource, await self.cluster.create(resource, obj))

    async def replace(self, resource: Resource, obj: Mapping[str, Any]) -> JsonObject:
        """Replace ``obj``; a conflict refreshes the cached object first."""
        return await self._write(resource, obj, self.cluster.replace(resource, obj))

    async def replace_status(self, resource: Resource, obj: Mapping[str, Any]) -> JsonObject:
        """Replace ``obj``'s status; a conflict refreshes the cached object first."""
        return await self._write(resource, obj, self.cluster.replace_status(resource, obj))

    async def merge_patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> JsonObject:
        """Merge-patch an object; the answer goes into the cache."""
        answer = await self.cluster.merge_patch(resource, namespace, name, patch)
        return self._remember(resource, answer)

    async def delete(self, resource: Resource, namespace: str | None, name: str) -> bool:
        """Delete an object; the watch tells the cache when it is gone."""
        return await self.cluster.delete(resource, namespace, name)

    async def _write(
        self, resource: Resource, obj: Mapping[str, Any], write: Awaitable[JsonObject]
    ) -> JsonObject:
        try:
            answer = await write
        except ConflictError:
            informer = self._informers.get(resource)
            if informer is not None:
                metadata = obj.get("metadata") or {}
                with contextlib.suppress(kube.KubeError):
                    await informer.refresh(metadata.get("namespace"), str(metadata.get("name")))
            raise
        return self._remember(resource, answer)

    def _remember(self, resource: Resource, answer: JsonObject) -> JsonObject:
        informer = self._informers.get(resource)
        if informer is not None and informer.synced.is_set():
            informer.remember(json.loads(_encode(answer)))
        return answer


async def first_of(*waits: Awaitable[Any]) -> None:
    """Wait until the first of ``waits`` finishes; cancel the others."""
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
