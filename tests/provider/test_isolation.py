"""One team cannot reach another's control plane or Secrets (issue 12, items 3 and 4, and the
low items on usages and Observe-only policies), against real API servers."""

from __future__ import annotations

import asyncio
import base64
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from provider.backup.restore.restorer import Restorer
from provider.instances import InstanceAPI
from provider.kube import Cluster
from provider.managed.reconciler import Reconciler
from provider.spaces.backend import OWNER_NAME, OWNER_NAMESPACE, SpacesConnector
from sandbox.apiserver import APIServer, APIServerFactory, Etcd
from sandbox.spaces import Kube, SpacesSimulator, condition, wait_for
from tests.provider.conftest import (
    SPACE_GROUP,
    cluster_provider_config,
    connect_to_space,
    provider_config,
)
from tests.provider.test_instance import instance

_names = itertools.count()


@dataclass
class World:
    local: Kube
    space: Kube
    hosted: APIServer
    reconciler: Reconciler | None = field(default=None)


@pytest.fixture(scope="module")
def world(kube_etcd: Etcd) -> Iterator[World]:
    with APIServerFactory(kube_etcd) as factory:
        local = Kube(factory(name="isolation-local"))
        space = Kube(factory(name="isolation-space"))
        hosted = factory(name="isolation-hosted")
        connect_to_space(local, space)
        with SpacesSimulator(space, hosted):
            yield World(local, space, hosted)


def namespace(world: World, name: str | None = None) -> str:
    chosen = name or f"iso-{next(_names)}"
    world.local.namespace(chosen)
    return chosen


def reconcile(world: World, ns: str, name: str, times: int = 1) -> None:
    """Reconcile in this process, as the provider would, with one reconciler throughout."""

    async def run() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(world.local.server.kubeconfig))
        connector = SpacesConnector(cluster, restorer=Restorer(cluster))
        reconciler = Reconciler(InstanceAPI(cluster), connector, deterministic_external_name=True)
        try:
            for _ in range(times):
                await reconciler.reconcile(ns, name)
        finally:
            await connector.close()
            await cluster.close()

    asyncio.run(run())


def settled(world: World, ns: str, name: str = "myctp") -> dict[str, Any]:
    """Reconcile until the Instance is Ready (the simulator marks its ControlPlane so)."""

    def ready() -> dict[str, Any] | None:
        reconcile(world, ns, name)
        found = world.local.get("instances", ns, name)
        return found if condition(found, "Ready").get("status") == "True" else None

    return wait_for(f"{ns}/{name} Ready", ready)


def control_plane(world: World, name: str) -> dict[str, Any] | None:
    return world.space.get("controlplanes", SPACE_GROUP, name, "spaces.upbound.io", "v1beta1")


def test_instances_whose_old_default_names_collide_get_a_control_plane_each(world: World) -> None:
    """``team-a``/``prod`` and ``team``/``a-prod`` were both ``team-a-prod``."""
    first, second = namespace(world, "team-a"), namespace(world, "team")
    world.local.create("instances", instance(first, "prod"))
    world.local.create("instances", instance(second, "a-prod"))

    names = {
        settled(world, ns, name)["metadata"]["annotations"]["crossplane.io/external-name"]
        for ns, name in ((first, "prod"), (second, "a-prod"))
    }

    assert len(names) == 2, names
    for ns, name in ((first, "prod"), (second, "a-prod")):
        external = settled(world, ns, name)["metadata"]["annotations"][
            "crossplane.io/external-name"
        ]
        assert len(external) <= 63
        owner = control_plane(world, external)
        assert owner is not None
        assert owner["metadata"]["annotations"][OWNER_NAMESPACE] == ns
        assert owner["metadata"]["annotations"][OWNER_NAME] == name


@dataclass
class AdoptionCase:
    reason: str
    # True: a ControlPlane made directly in the Space, owner unknown; False: one the
    # provider made for another Instance.
    unowned: bool = True
    # The Instance's external name is its own old default name, ``<namespace>-<name>``.
    legacy_name: bool = True
    # The Instance existed before the ControlPlane was made.
    instance_first: bool = True
    adopted: bool = False


ADOPTION_CASES = [
    AdoptionCase("a ControlPlane owned by another Instance is refused", unowned=False),
    AdoptionCase("an unowned ControlPlane of another name is refused", legacy_name=False),
    AdoptionCase(
        "an unowned ControlPlane older than the Instance is refused, even under its old name",
        instance_first=False,
    ),
    AdoptionCase(
        "an unowned ControlPlane made after the Instance under its old default name is claimed",
        adopted=True,
    ),
]


def unowned_control_plane(
    world: World, name: str, annotations: dict[str, str] | None = None
) -> datetime:
    """A ControlPlane made directly in the Space; owned only if ``annotations`` say so."""
    created = world.space.create(
        "controlplanes",
        {
            "apiVersion": "spaces.upbound.io/v1beta1",
            "kind": "ControlPlane",
            "metadata": {"name": name, "namespace": SPACE_GROUP, "annotations": annotations or {}},
            "spec": {
                "crossplane": {"autoUpgrade": {"channel": "Stable"}},
                "writeConnectionSecretToRef": {
                    "name": f"kubeconfig-{name}",
                    "namespace": SPACE_GROUP,
                },
            },
        },
        "spaces.upbound.io",
        "v1beta1",
    )
    return datetime.fromisoformat(created["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


@pytest.mark.parametrize("case", ADOPTION_CASES, ids=lambda c: c.reason)
def test_an_instance_never_adopts_a_control_plane_made_for_another(
    world: World, case: AdoptionCase
) -> None:
    ns = namespace(world)
    if case.unowned:
        target = f"{ns}-myctp" if case.legacy_name else f"old-{ns}"
        body = instance(ns, annotations={"crossplane.io/external-name": target})
        if case.instance_first:
            world.local.create("instances", body)
            unowned_control_plane(world, target)
        else:
            made = unowned_control_plane(world, target)
            # Timestamps have whole seconds: the Instance is made in a later one.
            wait_for(
                "a later second", lambda: datetime.now(UTC) > made + timedelta(seconds=1) or None
            )
            world.local.create("instances", body)
    else:
        victim = namespace(world)
        world.local.create("instances", instance(victim))
        target = settled(world, victim)["metadata"]["annotations"]["crossplane.io/external-name"]
        world.local.create(
            "instances", instance(ns, annotations={"crossplane.io/external-name": target})
        )

    if case.adopted:
        found = settled(world, ns)
        assert world.local.secret(ns, "myctp-kubeconfig") is not None
        owner = control_plane(world, target)
        assert owner is not None
        assert owner["metadata"]["annotations"][OWNER_NAMESPACE] == ns
        assert condition(found, "Synced")["status"] == "True"
        return

    def refused() -> dict[str, Any] | None:
        reconcile(world, ns, "myctp")
        found = world.local.get("instances", ns, "myctp")
        return found if condition(found, "Synced").get("status") == "False" else None

    found = wait_for("the adoption refused", refused)
    message = condition(found, "Synced")["message"]
    assert f"ControlPlane {target}" in message
    assert "not adopted" in message or "was not made for this Instance" in message
    assert world.local.secret(ns, "myctp-kubeconfig") is None, "no kubeconfig handed over"


@dataclass
class SecretCase:
    reason: str
    secret_type: str
    controller_uid: str | None
    written: bool
    message: str = ""


SECRET_CASES = [
    SecretCase(
        "a team's own Opaque Secret of that name is never overwritten",
        "Opaque",
        None,
        written=False,
        message="refusing to modify uncontrolled secret",
    ),
    SecretCase(
        "a connection Secret controlled by another object is never overwritten",
        "connection.crossplane.io/v1alpha1",
        "00000000-0000-0000-0000-0000000000ff",
        written=False,
        message="is not controlled by this Instance",
    ),
    SecretCase(
        "an uncontrolled connection Secret is adopted, as crossplane-runtime does",
        "connection.crossplane.io/v1alpha1",
        None,
        written=True,
    ),
]


@pytest.mark.parametrize("case", SECRET_CASES, ids=lambda c: c.reason)
def test_the_connection_secret_is_written_only_when_the_instance_may_control_it(
    world: World, case: SecretCase
) -> None:
    ns = namespace(world)
    metadata: dict[str, Any] = {"name": "myctp-kubeconfig", "namespace": ns}
    if case.controller_uid:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": "other",
                "uid": case.controller_uid,
                "controller": True,
            }
        ]
    world.local.core.create_namespaced_secret(
        ns,
        {
            "metadata": metadata,
            "type": case.secret_type,
            "data": {"password": base64.b64encode(b"the team's own").decode()},
        },
    )
    world.local.create("instances", instance(ns))

    if case.written:
        found = settled(world, ns)
        secret = world.local.secret(ns, "myctp-kubeconfig")
        assert secret is not None and "kubeconfig" in secret["data"]
        controllers = [o for o in secret["metadata"]["ownerReferences"] if o.get("controller")]
        assert [o["uid"] for o in controllers] == [found["metadata"]["uid"]]
        return

    def refused() -> dict[str, Any] | None:
        reconcile(world, ns, "myctp")
        found = world.local.get("instances", ns, "myctp")
        synced = condition(found, "Synced")
        return found if case.message in str(synced.get("message")) else None

    wait_for("the publish refused", refused)
    secret = world.local.secret(ns, "myctp-kubeconfig")
    assert secret is not None
    assert secret["data"] == {"password": base64.b64encode(b"the team's own").decode()}

    # Deleting the Instance leaves the Secret alone: deletion is its owner's business.
    world.local.delete("instances", ns, "myctp")

    def gone() -> bool | None:
        reconcile(world, ns, "myctp")
        return world.local.get("instances", ns, "myctp") is None or None

    wait_for("the Instance gone", gone)
    assert world.local.secret(ns, "myctp-kubeconfig") is not None


def usage(world: World, uid: str, kind: str, ns: str) -> dict[str, Any] | None:
    if kind == "ClusterProviderConfigUsage":
        return world.local.get("clusterproviderconfigusages", None, uid)
    return world.local.get("providerconfigusages", ns, uid)


def test_a_deleted_provider_config_usage_is_made_again_by_the_same_process(world: World) -> None:
    ns = namespace(world)
    world.local.create("instances", instance(ns))
    uid = settled(world, ns)["metadata"]["uid"]
    assert usage(world, uid, "ClusterProviderConfigUsage", ns) is not None

    async def twice() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(world.local.server.kubeconfig))
        connector = SpacesConnector(cluster)
        reconciler = Reconciler(InstanceAPI(cluster), connector, deterministic_external_name=True)
        try:
            await reconciler.reconcile(ns, "myctp")
            await asyncio.to_thread(world.local.delete, "clusterproviderconfigusages", None, uid)
            await reconciler.reconcile(ns, "myctp")
        finally:
            await connector.close()
            await cluster.close()

    asyncio.run(twice())
    assert usage(world, uid, "ClusterProviderConfigUsage", ns) is not None


def test_a_cluster_scoped_usage_names_no_namespaced_owner_and_an_old_one_loses_it(
    world: World,
) -> None:
    """The garbage collector never collects a cluster-scoped object a namespaced one owns.

    It holds such an owner unresolvable, so a foreground deletion of the Instance
    (kubectl --cascade=foreground, Argo CD) would wait for the usage for ever.
    """
    ns = namespace(world)
    world.local.create("instances", instance(ns))
    found = settled(world, ns)
    uid = found["metadata"]["uid"]
    made = usage(world, uid, "ClusterProviderConfigUsage", ns)
    assert made is not None
    assert not made["metadata"].get("ownerReferences"), made["metadata"]
    # What an earlier version wrote: the Instance as the usage's controller.
    owner = {
        "apiVersion": found["apiVersion"],
        "kind": found["kind"],
        "name": found["metadata"]["name"],
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    world.local.patch(
        "clusterproviderconfigusages",
        None,
        uid,
        {"metadata": {"ownerReferences": [owner]}},
    )

    reconcile(world, ns, "myctp")

    mended = usage(world, uid, "ClusterProviderConfigUsage", ns)
    assert mended is not None
    assert not mended["metadata"].get("ownerReferences"), mended["metadata"]


def test_switching_to_a_namespaced_provider_config_drops_the_old_usage(world: World) -> None:
    ns = namespace(world)
    world.local.create("instances", instance(ns))
    uid = settled(world, ns)["metadata"]["uid"]
    secret = world.local.secret("controlplane-system", "space-kubeconfig")
    assert secret is not None
    world.local.core.create_namespaced_secret(
        ns, {"metadata": {"name": "space-kubeconfig"}, "data": secret["data"]}
    )
    world.local.create("providerconfigs", provider_config("own", ns, "space-kubeconfig"))
    world.local.patch(
        "instances",
        ns,
        "myctp",
        {"spec": {"providerConfigRef": {"kind": "ProviderConfig", "name": "own"}}},
    )

    reconcile(world, ns, "myctp")

    assert usage(world, uid, "ProviderConfigUsage", ns) is not None
    assert usage(world, uid, "ClusterProviderConfigUsage", ns) is None, "the old config is free"


def test_an_observe_only_instance_restores_nothing(world: World) -> None:
    """Observe must not write into the control plane when the policies say Observe only."""
    ns = namespace(world)
    name = f"{ns}-observed"
    unowned_control_plane(world, name, {OWNER_NAMESPACE: ns, OWNER_NAME: "myctp"})
    body = instance(ns, policies=["Observe"], annotations={"crossplane.io/external-name": name})
    body["spec"]["forProvider"]["initialRestorationFrom"] = {"backupRef": {"name": "any"}}
    world.local.create("instances", body)

    found = settled(world, ns)

    assert "restore" not in (found["status"].get("atProvider") or {})


def test_a_namespaced_provider_config_whose_kubeconfig_reads_a_file_is_refused(
    world: World,
) -> None:
    """A team writes its ProviderConfig's Secret: a tokenFile would send the provider's token."""
    ns = namespace(world)
    hostile = yaml.safe_load(world.space.server.kubeconfig)
    hostile["users"][0]["user"] = {
        "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"
    }
    world.local.core.create_namespaced_secret(
        ns,
        {
            "metadata": {"name": "space"},
            "data": {"kubeconfig": base64.b64encode(yaml.safe_dump(hostile).encode()).decode()},
        },
    )
    world.local.create("providerconfigs", provider_config("own", ns, "space"))
    world.local.create(
        "instances",
        instance(ns, provider_config={"kind": "ProviderConfig", "name": "own"}),
    )

    reconcile(world, ns, "myctp")

    synced = condition(world.local.get("instances", ns, "myctp"), "Synced")
    assert synced["status"] == "False"
    assert "kubeconfig: users[].user.tokenFile is not allowed" in synced["message"]


# What `up ctx` writes into a context (github.com/upbound/up, internal/upbound/extension_types.go).
UP_CTX_EXTENSION = {
    "name": "spaces.upbound.io/space",
    "extension": {
        "apiVersion": "spaces.upbound.io/v1alpha1",
        "kind": "SpaceExtension",
        "spec": {"disconnected": {"hubContext": "kind-spaces"}},
    },
}


def with_up_ctx_extensions(world: World) -> str:
    """The Space's kubeconfig as `up ctx` would write it, base64 for a Secret's data."""
    document = yaml.safe_load(world.space.server.kubeconfig)
    document["contexts"][0]["context"]["extensions"] = [UP_CTX_EXTENSION]
    document["preferences"] = {"extensions": [UP_CTX_EXTENSION]}
    return base64.b64encode(yaml.safe_dump(document).encode()).decode()


def test_the_operators_space_kubeconfig_may_carry_up_ctx_extensions(world: World) -> None:
    ns = namespace(world)
    world.local.core.create_namespaced_secret(
        "controlplane-system",
        {
            "metadata": {"name": f"up-ctx-{ns}"},
            "data": {"kubeconfig": with_up_ctx_extensions(world)},
        },
    )
    config = cluster_provider_config(f"up-ctx-{ns}", f"up-ctx-{ns}")
    world.local.create("clusterproviderconfigs", config)
    world.local.create(
        "instances",
        instance(ns, provider_config={"kind": "ClusterProviderConfig", "name": f"up-ctx-{ns}"}),
    )

    found = settled(world, ns)

    assert condition(found, "Synced")["status"] == "True"


def test_a_teams_space_kubeconfig_with_extensions_is_accepted_as_inert(world: World) -> None:
    """Extensions are metadata no client acts on; what runs code stays refused (above)."""
    ns = namespace(world)
    world.local.core.create_namespaced_secret(
        ns, {"metadata": {"name": "space"}, "data": {"kubeconfig": with_up_ctx_extensions(world)}}
    )
    world.local.create("providerconfigs", provider_config("own", ns, "space"))
    world.local.create(
        "instances", instance(ns, provider_config={"kind": "ProviderConfig", "name": "own"})
    )

    found = settled(world, ns)

    assert condition(found, "Synced")["status"] == "True"
