"""Watch-fed caches: the ordering rules alone, then list and watch against a real API server."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from provider import kube
from provider.cache import CachedClient, Informer, newer
from provider.kube import Cluster, JsonObject, Resource
from provider.managed.reconciler import ConflictError
from provider.spaces.backend import cached_space_secret, spaces_in_use
from sandbox.apiserver import APIServer, APIServerFactory

CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")
NAMESPACES = kube.NAMESPACES
DEADLINE_SECONDS = 30.0
_names = itertools.count()


@dataclass
class VersionCase:
    reason: str
    version: str
    than: str
    expected: bool


VERSION_CASES = [
    VersionCase("A higher etcd revision is newer.", "120", "99", True),
    VersionCase("The same revision is not newer.", "120", "120", False),
    VersionCase("A lower revision is older, however it sorts as text.", "99", "120", False),
    VersionCase("An opaque version that differs counts as newer.", "abc", "120", True),
]


@pytest.mark.parametrize("case", VERSION_CASES, ids=lambda case: case.reason)
def test_resource_versions_are_ordered_as_etcd_revisions(case: VersionCase) -> None:
    assert newer(case.version, case.than) is case.expected


def config_map(name: str, version: str, labels: dict[str, str] | None = None) -> JsonObject:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "team",
            "resourceVersion": version,
            "labels": labels or {},
            "managedFields": [{"manager": "kubectl"}],
        },
        "data": {"version": version},
    }


@dataclass
class RememberCase:
    reason: str
    stored: list[JsonObject]
    selector: str
    expected_version: str | None


REMEMBER_CASES = [
    RememberCase(
        "A write's answer newer than the cached object replaces it.",
        [config_map("a", "10"), config_map("a", "11")],
        "",
        "11",
    ),
    RememberCase(
        "A late answer older than what the watch delivered does not go back in time.",
        [config_map("a", "11"), config_map("a", "10")],
        "",
        "11",
    ),
    RememberCase(
        "An object outside the cache's label selector is not kept.",
        [config_map("a", "10", {"mine": "false"})],
        "mine=true",
        None,
    ),
    RememberCase(
        "An object that leaves the selector is dropped.",
        [config_map("a", "10", {"mine": "true"}), config_map("a", "11", {"mine": "false"})],
        "mine=true",
        None,
    ),
]


@pytest.mark.parametrize("case", REMEMBER_CASES, ids=lambda case: case.reason)
def test_a_cache_keeps_only_the_latest_selected_version(case: RememberCase) -> None:
    # Nothing is read: remember() needs no server, only something with a server name.
    unused: Any = _Unused()
    informer = Informer(unused, CONFIG_MAPS, namespace="team", label_selector=case.selector)
    for obj in case.stored:
        informer.remember(obj)

    found = informer.get("team", "a")

    assert (found or {}).get("data", {}).get("version") == case.expected_version
    assert found is None or "managedFields" not in found["metadata"]


class _Unused:
    server = "https://unused.invalid"


def test_a_read_hands_out_a_copy_the_reader_may_change() -> None:
    unused: Any = _Unused()
    informer = Informer(unused, CONFIG_MAPS)
    informer.remember(config_map("a", "10"))

    first = informer.get("team", "a")
    assert first is not None
    first["data"]["version"] = "changed by a reconcile"

    assert (informer.get("team", "a") or {})["data"]["version"] == "10"


# Against a real API server.


@pytest.fixture
def namespace() -> str:
    return f"cache-{next(_names)}"


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), timeout=120))


async def connect(
    server: APIServer, namespace: str, requests: list[tuple[str, str]] | None = None
) -> Cluster:
    """A client of ``server`` (telling ``requests`` of each request), and a fresh namespace."""
    hook = None if requests is None else lambda verb, plural, _: requests.append((verb, plural))
    cluster = await Cluster.from_kubeconfig(yaml.safe_load(server.kubeconfig), on_request=hook)
    await cluster.create(NAMESPACES, {"metadata": {"name": namespace}})
    return cluster


async def eventually(what: str, probe: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_SECONDS
    while not probe():
        if loop.time() > deadline:
            msg = f"timed out waiting for {what}"
            raise AssertionError(msg)
        await asyncio.sleep(0.05)


async def create(cluster: Cluster, namespace: str, name: str, value: str = "1") -> JsonObject:
    return await cluster.create(
        CONFIG_MAPS,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace},
            "data": {"value": value},
        },
    )


class Running:
    """An informer's run loop as a task, stopped on exit."""

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self.stop = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Informer:
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(self.informer.run(self.stop))
        await self.informer.wait_synced(DEADLINE_SECONDS)
        return self.informer

    async def __aexit__(self, *_: object) -> None:
        self.stop.set()
        assert self.task is not None
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)


def lists(requests: list[tuple[str, str]]) -> int:
    return sum(1 for verb, plural in requests if (verb, plural) == ("GET", "configmaps"))


def test_a_cache_lists_then_follows_additions_changes_and_deletions(
    apiserver: APIServer, namespace: str
) -> None:
    async def scenario() -> None:
        cluster = await connect(apiserver, namespace)
        await create(cluster, namespace, "first")
        await create(cluster, namespace, "second")
        heard: list[tuple[str, str]] = []
        informer = Informer(cluster, CONFIG_MAPS, namespace=namespace)
        informer.add_handler(lambda kind, obj, _: heard.append((kind, obj["metadata"]["name"])))
        async with Running(informer):
            assert informer.keys() == [(namespace, "first"), (namespace, "second")]
            changed = await cluster.get(CONFIG_MAPS, namespace, "first")
            assert changed is not None
            changed["data"] = {"value": "2"}
            await cluster.replace(CONFIG_MAPS, changed)
            await cluster.delete(CONFIG_MAPS, namespace, "second")
            await create(cluster, namespace, "third")
            await eventually(
                "every change in the cache",
                lambda: (
                    informer.keys() == [(namespace, "first"), (namespace, "third")]
                    and (informer.get(namespace, "first") or {})["data"] == {"value": "2"}
                ),
            )
        await cluster.close()
        assert heard == [
            ("ADDED", "first"),
            ("ADDED", "second"),
            ("MODIFIED", "first"),
            ("DELETED", "second"),
            ("ADDED", "third"),
        ]

    run(scenario)


def test_a_cache_resumes_from_its_last_version_without_listing_again(
    apiserver: APIServer, namespace: str
) -> None:
    async def scenario() -> None:
        requests: list[tuple[str, str]] = []
        cluster = await connect(apiserver, namespace, requests)
        await create(cluster, namespace, "kept")
        informer = Informer(cluster, CONFIG_MAPS, namespace=namespace)
        async with Running(informer):
            pass
        # Changed while nobody watched: the watch from the last version replays it.
        await cluster.delete(CONFIG_MAPS, namespace, "kept")
        await create(cluster, namespace, "new")
        async with Running(informer):
            await eventually("the missed changes", lambda: informer.keys() == [(namespace, "new")])
        await cluster.close()
        assert lists(requests) == 1

    run(scenario)


@pytest.fixture
def compacting(apiserver_factory: APIServerFactory) -> APIServer:
    """An API server that has etcd compact its history every second."""
    return apiserver_factory(
        name="compacting",
        # Without the watch cache, a watch reads etcd itself, whose history is compacted.
        extra_args=["--etcd-compaction-interval=1s", "--watch-cache=false"],
    )


async def expired(cluster: Cluster, namespace: str, version: str) -> bool:
    """Whether a watch from ``version`` is answered 410 Gone."""
    try:
        async for _ in cluster.watch(CONFIG_MAPS, version, namespace, timeout_seconds=1):
            pass
    except kube.GoneError:
        return True
    return False


def test_a_cache_whose_version_expired_lists_again_and_reports_what_went(
    compacting: APIServer, namespace: str
) -> None:
    async def scenario() -> None:
        requests: list[tuple[str, str]] = []
        cluster = await connect(compacting, namespace, requests)
        await create(cluster, namespace, "kept")
        await create(cluster, namespace, "removed")
        informer = Informer(cluster, CONFIG_MAPS, namespace=namespace)
        heard: list[tuple[str, str]] = []
        informer.add_handler(lambda kind, obj, _: heard.append((kind, obj["metadata"]["name"])))
        async with Running(informer):
            pass
        await cluster.delete(CONFIG_MAPS, namespace, "removed")
        await create(cluster, namespace, "later")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_SECONDS
        while not await expired(cluster, namespace, informer.version):
            assert loop.time() < deadline, "etcd never compacted the cache's version away"
        async with Running(informer):
            await eventually(
                "the relist",
                lambda: informer.keys() == [(namespace, "kept"), (namespace, "later")],
            )
        await cluster.close()
        assert lists(requests) == 2
        assert sorted(heard[-2:]) == [("ADDED", "later"), ("DELETED", "removed")]

    run(scenario)


def test_a_conflicting_write_refreshes_the_cached_object(
    apiserver: APIServer, namespace: str
) -> None:
    async def scenario() -> None:
        cluster = await connect(apiserver, namespace)
        await create(cluster, namespace, "contested")
        informer = Informer(cluster, CONFIG_MAPS, namespace=namespace)
        async with Running(informer):
            pass
        stale = informer.get(namespace, "contested")
        assert stale is not None
        # Someone else writes while the cache does not watch: it stays behind.
        other = dict(stale, data={"value": "theirs"})
        current = await cluster.replace(CONFIG_MAPS, other)
        cache = CachedClient(cluster, [informer])
        with pytest.raises(ConflictError):
            await cache.replace(CONFIG_MAPS, dict(stale, data={"value": "ours"}))
        refreshed = informer.get(namespace, "contested") or {}
        await cluster.close()
        assert refreshed["metadata"]["resourceVersion"] == current["metadata"]["resourceVersion"]
        assert refreshed["data"] == {"value": "theirs"}

    run(scenario)


def test_a_write_is_read_back_at_once_and_a_deletion_is_not_undone_by_a_late_answer(
    apiserver: APIServer, namespace: str
) -> None:
    async def scenario() -> None:
        cluster = await connect(apiserver, namespace)
        informer = Informer(cluster, CONFIG_MAPS, namespace=namespace)
        cache = CachedClient(cluster, [informer])
        async with Running(informer):
            made = await cache.create(
                CONFIG_MAPS,
                {"metadata": {"name": "mine", "namespace": namespace}, "data": {"value": "1"}},
            )
            # No await between the write and the read: the watch cannot have told it.
            assert informer.get(namespace, "mine") is not None
            await cluster.delete(CONFIG_MAPS, namespace, "mine")
            await eventually("the deletion", lambda: informer.get(namespace, "mine") is None)
            informer.remember(made)
            assert informer.get(namespace, "mine") is None
        await cluster.close()

    run(scenario)


@pytest.fixture
def restartable(apiserver_factory: APIServerFactory) -> Iterator[APIServer]:
    yield apiserver_factory(name="restarted")


def test_a_cache_matches_the_server_again_after_the_server_restarts(
    restartable: APIServer, namespace: str
) -> None:
    async def scenario() -> None:
        cluster = await connect(restartable, namespace)
        await create(cluster, namespace, "before")
        informer = Informer(cluster, CONFIG_MAPS, namespace=namespace)
        async with Running(informer):
            await asyncio.to_thread(restartable.stop)
            await asyncio.to_thread(restartable.start)
            await create(cluster, namespace, "after")
            await eventually(
                "the object made after the restart",
                lambda: informer.get(namespace, "after") is not None,
            )
            listed, _ = await cluster.list(CONFIG_MAPS, namespace)
            assert informer.keys() == sorted((namespace, o["metadata"]["name"]) for o in listed)
        await cluster.close()

    run(scenario)


@dataclass
class SpaceSecretCase:
    reason: str
    secret: JsonObject
    expected: JsonObject | None


def space_secret(name: str, data: dict[str, str]) -> JsonObject:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "resourceVersion": "7",
            "labels": {"a": "b"},
            "managedFields": [{"manager": "spaces"}],
        },
        "type": "Opaque",
        "data": data,
    }


SPACE_SECRET_CASES = [
    SpaceSecretCase(
        "A ControlPlane's connection secret keeps its kubeconfig and nothing else.",
        space_secret("kubeconfig-ctp", {"kubeconfig": "a3ViZQ==", "token": "c2VjcmV0"}),
        {
            "metadata": {"name": "kubeconfig-ctp", "namespace": "default", "resourceVersion": "7"},
            "data": {"kubeconfig": "a3ViZQ=="},
        },
    ),
    SpaceSecretCase(
        "A connection secret not written yet is kept empty, so it is known to be missing.",
        space_secret("kubeconfig-ctp", {}),
        {
            "metadata": {"name": "kubeconfig-ctp", "namespace": "default", "resourceVersion": "7"},
            "data": {},
        },
    ),
    SpaceSecretCase(
        "Any other Secret of the group is not cached at all.",
        space_secret("registry-credentials", {"kubeconfig": "a3ViZQ=="}),
        None,
    ),
]


@pytest.mark.parametrize("case", SPACE_SECRET_CASES, ids=lambda case: case.reason)
def test_of_a_space_secret_only_a_control_planes_kubeconfig_is_cached(
    case: SpaceSecretCase,
) -> None:
    assert cached_space_secret(case.secret) == case.expected


@dataclass
class InUseCase:
    reason: str
    config: JsonObject
    expected: set[tuple[str, str, str]]


def spaces_config(metadata: JsonObject, secret_ref: JsonObject) -> JsonObject:
    return {
        "metadata": metadata,
        "spec": {"spaces": {"namespace": "group", "credentials": {"secretRef": secret_ref}}},
    }


IN_USE_CASES = [
    InUseCase(
        "A cluster config names its secret's namespace.",
        spaces_config({"name": "c"}, {"namespace": "system", "name": "space"}),
        {("system", "space", "group")},
    ),
    InUseCase(
        "A namespaced config's secret is in its own namespace when none is named.",
        spaces_config({"name": "c", "namespace": "team"}, {"name": "space"}),
        {("team", "space", "group")},
    ),
    InUseCase(
        "A config that is not valid names no Space (its watches stop).",
        {"metadata": {"name": "c"}, "spec": {"spaces": {}}},
        set(),
    ),
]


@pytest.mark.parametrize("case", IN_USE_CASES, ids=lambda case: case.reason)
def test_the_spaces_in_use_are_those_the_provider_configs_name(case: InUseCase) -> None:
    assert spaces_in_use([case.config]) == case.expected


async def reader(server: APIServer, admin: Cluster, namespace: str, verbs: list[str]) -> Cluster:
    """A client of a ServiceAccount whose Role grants ``verbs`` on the namespace's ConfigMaps."""
    rbac = "/apis/rbac.authorization.k8s.io/v1/namespaces/" + namespace
    await admin.create(
        kube.SERVICE_ACCOUNTS, {"metadata": {"name": "reader", "namespace": namespace}}
    )
    await admin.request(
        "POST",
        f"{rbac}/roles",
        body={
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}],
        },
    )
    await admin.request(
        "POST",
        f"{rbac}/rolebindings",
        body={
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    token = await admin.service_account_token(
        kube.ServiceAccountRef(namespace, "reader"), audiences=[], expiration_seconds=3600
    )
    document = yaml.safe_load(server.kubeconfig)
    document["users"][0]["user"] = {"token": token}
    return await Cluster.from_kubeconfig(document)


async def set_verbs(admin: Cluster, namespace: str, verbs: list[str]) -> None:
    await admin.merge_patch(
        Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
        namespace,
        "reader",
        {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": verbs}]},
    )


def test_a_cache_whose_watch_the_role_refuses_lists_every_interval_and_sees_changes(
    apiserver: APIServer, namespace: str
) -> None:
    async def scenario() -> None:
        admin = await connect(apiserver, namespace)
        await create(admin, namespace, "first")
        cluster = await reader(apiserver, admin, namespace, ["get", "list"])
        heard: list[tuple[str, str]] = []
        informer = Informer(cluster, CONFIG_MAPS, namespace=namespace, relist_interval=0.3)
        informer.add_handler(lambda kind, obj, _: heard.append((kind, obj["metadata"]["name"])))
        async with Running(informer):
            await create(admin, namespace, "second")
            await admin.delete(CONFIG_MAPS, namespace, "first")
            await eventually(
                "the changes, listed", lambda: informer.keys() == [(namespace, "second")]
            )
            assert isinstance(informer.watch_refused, kube.ForbiddenError)
            assert informer.fresh()
        await cluster.close()
        await admin.close()
        assert heard == [("ADDED", "first"), ("DELETED", "first"), ("ADDED", "second")]

    run(scenario)


def test_a_cache_that_can_no_longer_list_is_not_read_and_the_server_answers_instead(
    apiserver: APIServer, namespace: str
) -> None:
    async def scenario() -> None:
        admin = await connect(apiserver, namespace)
        await create(admin, namespace, "settings", "cached")
        cluster = await reader(apiserver, admin, namespace, ["get", "list"])
        informer = Informer(cluster, CONFIG_MAPS, namespace=namespace, relist_interval=0.3)
        client = CachedClient(cluster, [informer])
        async with Running(informer):
            await set_verbs(admin, namespace, ["get"])
            changed = await admin.get(CONFIG_MAPS, namespace, "settings")
            assert changed is not None
            changed["data"] = {"value": "changed"}
            await admin.replace(CONFIG_MAPS, changed)
            await eventually("the cache no longer fresh", lambda: not informer.fresh())
            # The cache still holds the old value; a read gets the server's.
            assert (informer.get(namespace, "settings") or {})["data"] == {"value": "cached"}
            found = await client.get(CONFIG_MAPS, namespace, "settings")
            assert (found or {})["data"] == {"value": "changed"}
            assert isinstance(informer.last_error, kube.ForbiddenError)
            # And when the server refuses that too, the read fails in its words.
            await set_verbs(admin, namespace, ["create"])
            with pytest.raises(kube.ForbiddenError, match="configmaps"):
                for _ in range(50):
                    await client.get(CONFIG_MAPS, namespace, "settings")
                    await asyncio.sleep(0.1)
        await cluster.close()
        await admin.close()

    run(scenario)
