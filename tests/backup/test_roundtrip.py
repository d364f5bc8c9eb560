"""Back up a real control plane to real S3, then restore it into a fresh one."""

from __future__ import annotations

import asyncio
import base64
import copy
import io
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import yaml

from provider.backup.controllers.backups import BackupReconciler
from provider.backup.format import archive
from provider.backup.restore.restorer import RestoreError, Restorer
from provider.backup.storage.s3 import StorageSpec, Store
from provider.backup.storage.tenancy import EndpointPolicy
from provider.kube import Cluster, ServiceAccountRef
from provider.model import CONNECTION_SECRET_TYPE
from sandbox.apiserver import APIServer, APIServerFactory, Etcd
from sandbox.s3 import SeaweedFS
from sandbox.spaces import PROVIDER_CRDS, Kube, wait_for
from tests.provider.conftest import PROVIDER_NAMESPACE, SPACE_SECRET, cluster_provider_config

BACKUP_CRDS = PROVIDER_CRDS.parent.parent.parent / "deploy" / "backup-controller" / "crds"
NAMESPACE = "team-a"
BUCKET = "roundtrip"

# A provider-like CRD (owned by a package) and an XRD-owned CRD, as Crossplane makes them.
PROVIDER_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {
        "name": "buckets.s3.example.org",
        "ownerReferences": [
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "ProviderRevision",
                "name": "provider-example-abc",
                "uid": "00000000-0000-0000-0000-000000000001",
            }
        ],
    },
    "spec": {
        "group": "s3.example.org",
        "scope": "Namespaced",
        "names": {
            "plural": "buckets",
            "singular": "bucket",
            "kind": "Bucket",
            "listKind": "BucketList",
            "categories": ["crossplane", "managed", "example"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
XRD_CRD = copy.deepcopy(PROVIDER_CRD)
XRD_CRD["metadata"] = {
    "name": "networks.platform.example.org",
    "ownerReferences": [
        {
            "apiVersion": "apiextensions.crossplane.io/v2",
            "kind": "CompositeResourceDefinition",
            "name": "networks.platform.example.org",
            "uid": "00000000-0000-0000-0000-000000000002",
        }
    ],
}
XRD_CRD["spec"]["group"] = "platform.example.org"
XRD_CRD["spec"]["names"] = {
    "plural": "networks",
    "singular": "network",
    "kind": "Network",
    "listKind": "NetworkList",
    "categories": ["composite"],
}


@dataclass
class Planes:
    local: Kube
    source: Kube
    target: Kube


def seed(source: Kube) -> int:
    """A few hundred objects of several kinds; the count the backup must hold."""
    for crd in (PROVIDER_CRD, XRD_CRD):
        source.extensions.create_custom_resource_definition(crd)
    for crd in (PROVIDER_CRD, XRD_CRD):
        wait_for("CRD Established", partial(source.established, crd["metadata"]["name"]))
    count = 1  # the default namespace: not a system one, so it is backed up too
    for index in range(4):
        source.namespace(f"app-{index}")
        count += 1
        for item in range(25):
            source.core.create_namespaced_config_map(
                f"app-{index}", {"metadata": {"name": f"config-{item}"}, "data": {"k": f"v{item}"}}
            )
            source.put_secret(f"app-{index}", f"secret-{item}", {"password": f"p{item}".encode()})
            count += 2
    for item in range(60):
        paused = {"crossplane.io/paused": "true"} if item % 10 == 0 else {}
        source.create(
            "buckets",
            {
                "apiVersion": "s3.example.org/v1",
                "kind": "Bucket",
                "metadata": {"name": f"bucket-{item}", "namespace": "app-0", "annotations": paused},
                "spec": {"forProvider": {"region": "eu-west-1", "index": item}},
            },
            "s3.example.org",
            "v1",
        )
        count += 1
    for item in range(20):
        source.create(
            "networks",
            {
                "apiVersion": "platform.example.org/v1",
                "kind": "Network",
                "metadata": {"name": f"net-{item}", "namespace": "app-1"},
                "spec": {"cidr": f"10.{item}.0.0/16"},
            },
            "platform.example.org",
            "v1",
        )
        count += 1
    return count


@pytest.fixture(scope="module")
def planes(kube_etcd: Etcd) -> Iterator[Planes]:
    with APIServerFactory(kube_etcd) as factory:
        local = Kube(factory(name="backup-local"))
        local.apply_crds(PROVIDER_CRDS, BACKUP_CRDS)
        yield Planes(local, Kube(factory(name="source")), Kube(factory(name="target")))


_names = itertools.count()


def fresh_name(prefix: str) -> str:
    """A name no other backup test in this session uses."""
    return f"{prefix}-{next(_names)}"


def ensure_bucket(s3: SeaweedFS, name: str) -> None:
    """Create the bucket unless an earlier test did."""
    try:
        s3.create_bucket(name)
    except RuntimeError as error:
        if "already exists" not in str(error):
            raise


def instance_with_kubeconfig(
    local: Kube, server: APIServer, name: str, namespace: str = NAMESPACE
) -> None:
    """An Instance, its connection secret as the provider writes it, and a Space on its host."""
    local.namespace(namespace)
    ensure_default_space(local, server)
    instance = local.create(
        "instances",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Instance",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "forProvider": {"crossplane": {"autoUpgrade": {"channel": "Stable"}}},
                "writeConnectionSecretToRef": {"name": f"{name}-kubeconfig"},
            },
        },
    )
    write_connection_secret(local, instance, server.kubeconfig)


def write_connection_secret(local: Kube, instance: dict[str, Any], kubeconfig: str) -> None:
    """The Instance's connection secret as the provider writes it: its type, controlled by it."""
    metadata = instance["metadata"]
    local.core.create_namespaced_secret(
        metadata["namespace"],
        {
            "metadata": {
                "name": instance["spec"]["writeConnectionSecretToRef"]["name"],
                "namespace": metadata["namespace"],
                "ownerReferences": [
                    {
                        "apiVersion": instance["apiVersion"],
                        "kind": instance["kind"],
                        "name": metadata["name"],
                        "uid": metadata["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "type": CONNECTION_SECRET_TYPE,
            "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
        },
    )


def ensure_default_space(local: Kube, space: APIServer) -> None:
    """The ClusterProviderConfig ``default`` with a Space on ``space``, unless there is one.

    Instances use it when they name none; the Space's host is the control plane host
    the backup controller allows when the operator lists none.
    """
    if local.get("clusterproviderconfigs", None, "default") is not None:
        return
    local.namespace(PROVIDER_NAMESPACE)
    local.put_secret(PROVIDER_NAMESPACE, SPACE_SECRET, {"kubeconfig": space.kubeconfig.encode()})
    local.create("clusterproviderconfigs", cluster_provider_config())


def backup_object(
    name: str, instance: str, endpoint: str, prefix: str = "team-a/myctp/"
) -> dict[str, Any]:
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "Backup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "instanceRef": {"name": instance},
            "storage": {
                "bucket": BUCKET,
                "prefix": prefix,
                "region": "us-east-1",
                "endpoint": endpoint,
            },
            "ttl": "168h",
        },
    }


def operator_allows(endpoint: str) -> EndpointPolicy:
    """The operator's --allowed-s3-endpoint for the test's plain-http loopback S3."""
    return EndpointPolicy.of([endpoint])


async def run_backup(local: Kube, name: str, endpoint: str) -> None:
    cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
    try:
        result = await BackupReconciler(cluster, endpoints=operator_allows(endpoint)).reconcile(
            NAMESPACE, name
        )
        assert not result.requeue  # done at once; a ttl only asks to come back at expiry
    finally:
        await cluster.close()


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """An object as a restore must bring it back: no server-managed metadata."""
    stripped = archive.strip(obj)
    stripped.pop("status", None)
    metadata = stripped["metadata"]
    metadata.pop("ownerReferences", None)
    annotations = metadata.get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not annotations:
        metadata.pop("annotations", None)
    return stripped


def test_a_control_plane_backed_up_to_s3_comes_back_equal_in_a_fresh_one(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    s3 = seaweed
    s3.configure(monkeypatch)
    ensure_bucket(s3, BUCKET)
    expected = seed(planes.source)
    instance_with_kubeconfig(planes.local, planes.source.server, "myctp")
    planes.local.create("backups", backup_object("myctp-1", "myctp", s3.endpoint))
    asyncio.run(run_backup(planes.local, "myctp-1", s3.endpoint))

    backup = planes.local.get("backups", NAMESPACE, "myctp-1")
    assert backup is not None
    status = backup["status"]
    assert status["phase"] == "Completed", status
    assert status["objects"] == expected
    assert status["location"] == {"bucket": BUCKET, "key": "team-a/myctp/myctp-1.tar.gz"}
    body = io.BytesIO()
    Store.connect(StorageSpec(BUCKET, "us-east-1", endpoint=s3.endpoint)).download(
        status["location"]["key"], body
    )
    assert status["size"] == len(body.getvalue())
    body.seek(0)
    manifest = archive.verify(body)
    assert manifest.objects == expected
    assert {
        "buckets.s3.example.org",
        "networks.platform.example.org",
        "configmaps",
        "secrets",
        "namespaces",
    } <= set(manifest.types)

    # The fresh control plane gets its CRDs from Crossplane's package manager
    # and XRDs; here the test plays that part, after the restore has started.
    async def restore() -> int:
        local = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
        try:
            task = asyncio.create_task(
                Restorer(
                    local, crd_timeout=60, endpoints=operator_allows(seaweed.endpoint)
                ).restore(NAMESPACE, "myctp-1", yaml.safe_load(planes.target.server.kubeconfig))
            )
            await asyncio.sleep(0)
            await asyncio.to_thread(install_crds, planes.target)
            return (await task).objects
        finally:
            await local.close()

    assert asyncio.run(restore()) == expected
    first = snapshot(planes.target)
    # A restore interrupted by a restart is simply run again: it ends the same.
    assert asyncio.run(restore_again(planes, s3.endpoint)) == expected
    assert snapshot(planes.target) == first

    for namespace in (f"app-{i}" for i in range(4)):
        for plural, group, version in (("configmaps", "", "v1"), ("secrets", "", "v1")):
            source = [
                comparable(o)
                for o in list_objects(planes.source, plural, group, version, namespace)
                if keep(o)
            ]
            restored = [
                comparable(o)
                for o in list_objects(planes.target, plural, group, version, namespace)
                if keep(o)
            ]
            assert sorted(restored, key=name_of) == sorted(source, key=name_of), (
                f"{plural} in {namespace}"
            )
    for plural, group, namespace in (
        ("buckets", "s3.example.org", "app-0"),
        ("networks", "platform.example.org", "app-1"),
    ):
        source = sorted(
            (comparable(o) for o in list_objects(planes.source, plural, group, "v1", namespace)),
            key=name_of,
        )
        restored = sorted(
            (comparable(o) for o in list_objects(planes.target, plural, group, "v1", namespace)),
            key=name_of,
        )
        assert restored == source, plural
    paused = {
        o["metadata"]["name"]
        for o in list_objects(planes.target, "buckets", "s3.example.org", "v1", "app-0")
        if (o["metadata"].get("annotations") or {}).get("crossplane.io/paused") == "true"
    }
    assert paused == {f"bucket-{i}" for i in range(0, 60, 10)}, "only what was paused in the backup"


async def restore_again(planes: Planes, endpoint: str) -> int:
    local = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
    # Configured for irsa Backups as the provider is by default: an AssumeRole
    # Backup mints no token (the account does not even exist here).
    web_identity = ServiceAccountRef("controlplane-system", "controlplane-backup")
    try:
        outcome = await Restorer(
            local, crd_timeout=60, endpoints=operator_allows(endpoint), web_identity=web_identity
        ).restore(NAMESPACE, "myctp-1", yaml.safe_load(planes.target.server.kubeconfig))
        return outcome.objects
    finally:
        await local.close()


def snapshot(target: Kube) -> list[dict[str, Any]]:
    """What a restore wrote into ``target``, comparable across runs."""
    objects = [
        comparable(o)
        for namespace in (f"app-{i}" for i in range(4))
        for plural in ("configmaps", "secrets")
        for o in list_objects(target, plural, "", "v1", namespace)
    ]
    objects += [
        comparable(o) for o in list_objects(target, "buckets", "s3.example.org", "v1", "app-0")
    ]
    return sorted(objects, key=lambda o: yaml.safe_dump(o, sort_keys=True))


def install_crds(target: Kube) -> None:
    """Play Crossplane's package manager: the CRDs owned by their package and XRD.

    A restore applies objects only of CRDs owned so (no garbage collector runs
    here to follow the owners' UIDs).
    """
    for crd in (PROVIDER_CRD, XRD_CRD):
        target.extensions.create_custom_resource_definition(copy.deepcopy(crd))


def list_objects(
    kube: Kube, plural: str, group: str, version: str, namespace: str
) -> list[dict[str, Any]]:
    if not group:
        lister = {
            "configmaps": kube.core.list_namespaced_config_map,
            "secrets": kube.core.list_namespaced_secret,
        }[plural]
        answer = kube.api.sanitize_for_serialization(lister(namespace))
        return [dict(item) for item in answer["items"]]
    return kube.list_of(plural, namespace, group, version)


def keep(obj: dict[str, Any]) -> bool:
    return bool(obj["metadata"]["name"] != "kube-root-ca.crt")


def name_of(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def test_a_restore_from_a_missing_backup_is_refused_and_applies_nothing(planes: Planes) -> None:
    async def restore() -> None:
        local = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
        try:
            await Restorer(local).restore(
                NAMESPACE, "no-such-backup", yaml.safe_load(planes.target.server.kubeconfig)
            )
        finally:
            await local.close()

    with pytest.raises(RestoreError, match="Backup team-a/no-such-backup not found"):
        asyncio.run(restore())
