"""One team cannot reach another's backups (issue 12, items 1, 2, 6, 8, 9), on real servers."""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.backup.controllers.backups import BackupReconciler, storage_spec
from provider.backup.controllers.schedules import ScheduleReconciler
from provider.backup.format.archive import ResourceType
from provider.backup.restore.restorer import RestoreError, Restorer
from provider.backup.storage.s3 import StorageSpec, Store
from provider.kube import Cluster
from sandbox.s3 import Moto, SeaweedFS
from sandbox.spaces import condition
from tests.backup.test_archive_limits import BUCKETS, meta, written
from tests.backup.test_roundtrip import (
    BUCKET,
    NAMESPACE,
    PROVIDER_CRD,
    Planes,
    backup_object,
    ensure_bucket,
    fresh_name,
    instance_with_kubeconfig,
    operator_allows,
)
from tests.servers import Proxy, proxy

VICTIM = "team-b"


def store(seaweed: SeaweedFS) -> Store:
    return Store.connect(StorageSpec(BUCKET, "us-east-1", endpoint=seaweed.endpoint))


def put(seaweed: SeaweedFS, key: str, data: bytes) -> None:
    with store(seaweed).writer(key) as sink:
        sink.write(data)


def read(seaweed: SeaweedFS, key: str) -> bytes:
    chunks: list[bytes] = []

    class Sink:
        def write(self, data: bytes) -> int:
            chunks.append(data)
            return len(data)

    store(seaweed).download(key, Sink())
    return b"".join(chunks)


def set_status(planes: Planes, name: str, status: dict[str, Any]) -> None:
    """Write a Backup's status as only the controller may (teams cannot write status)."""
    planes.local.custom.patch_namespaced_custom_object_status(
        "controlplane.spaces.upbound.io", "v1alpha1", NAMESPACE, "backups", name, {"status": status}
    )


def reconcile_backup(planes: Planes, name: str, endpoint: str) -> None:
    async def run() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
        try:
            await BackupReconciler(cluster, endpoints=operator_allows(endpoint)).reconcile(
                NAMESPACE, name
            )
        finally:
            await cluster.close()

    asyncio.run(run())


@pytest.fixture
def victims_archive(planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> str:
    """Team B's archive, in the bucket team A can name."""
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    planes.local.namespace(NAMESPACE)
    key = f"{VICTIM}/myctp/{fresh_name('b')}.tar.gz"
    put(seaweed, key, b"team b's archive")
    return key


@dataclass
class RefusedStorage:
    reason: str
    storage: dict[str, str]
    message: str


REFUSED_STORAGE = [
    RefusedStorage(
        "another namespace's prefix",
        {"prefix": f"{VICTIM}/myctp/"},
        f"spec.storage.prefix must be {NAMESPACE}/<name>/",
    ),
    RefusedStorage(
        "the whole bucket",
        {"prefix": ""},
        f"spec.storage.prefix must be {NAMESPACE}/<name>/",
    ),
    RefusedStorage(
        "an endpoint the operator did not allow",
        {"endpoint": "https://collector.example"},
        "spec.storage.endpoint is not one of the endpoints the operator allows",
    ),
    RefusedStorage(
        "plain http the operator did not allow",
        {"endpoint": "http://127.0.0.1:1"},
        "spec.storage.endpoint must use https",
    ),
]


@pytest.mark.parametrize("case", REFUSED_STORAGE, ids=lambda c: c.reason)
def test_a_backup_outside_its_namespace_or_allowed_endpoints_fails_at_once_and_writes_nothing(
    planes: Planes, seaweed: SeaweedFS, victims_archive: str, case: RefusedStorage
) -> None:
    name = victims_archive.rsplit("/", 1)[1].removesuffix(".tar.gz")  # team B's Backup name
    instance = fresh_name("a")
    instance_with_kubeconfig(planes.local, planes.source.server, instance)
    body = backup_object(name, instance, seaweed.endpoint, f"{NAMESPACE}/{instance}/")
    body["spec"]["storage"].update(case.storage)
    planes.local.create("backups", body)

    reconcile_backup(planes, name, seaweed.endpoint)

    backup = planes.local.get("backups", NAMESPACE, name)
    assert backup is not None
    assert backup["status"]["phase"] == "Failed", "no retry can make it allowed"
    failed = condition(backup, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "StorageRefused")
    assert case.message in failed["message"]
    assert read(seaweed, victims_archive) == b"team b's archive", "team B's archive untouched"
    assert not store(seaweed).exists(f"{NAMESPACE}/{instance}/{name}.tar.gz")


def test_deleting_a_backup_never_deletes_an_archive_that_is_not_its_own(
    planes: Planes, seaweed: SeaweedFS, victims_archive: str
) -> None:
    """A Backup whose spec or status names team B's archive lets go without touching it."""
    for index, (prefix, key) in enumerate(
        [
            (f"{VICTIM}/myctp/", victims_archive),  # spec names B's prefix
            (f"{NAMESPACE}/mine/", victims_archive),  # status names B's key
        ]
    ):
        name = fresh_name(f"forged-{index}")
        body = backup_object(name, "any", seaweed.endpoint, prefix)
        body["spec"]["deletionPolicy"] = "Delete"  # an Orphan one would not try at all
        body["metadata"]["finalizers"] = ["controlplane.spaces.upbound.io/archive"]
        planes.local.create("backups", body)
        set_status(planes, name, {"phase": "Completed", "location": {"bucket": BUCKET, "key": key}})
        planes.local.delete("backups", NAMESPACE, name)

        reconcile_backup(planes, name, seaweed.endpoint)

        assert planes.local.get("backups", NAMESPACE, name) is None, "the Backup lets go"
        assert read(seaweed, victims_archive) == b"team b's archive"
        reasons = [e["reason"] for e in planes.local.events(NAMESPACE, name)]
        assert "ArchiveNotDeleted" in reasons


def test_a_backup_of_an_instance_whose_kubeconfig_runs_a_command_runs_nothing(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    marker = tmp_path / "ran-as-the-controller"
    instance = fresh_name("exec")
    instance_with_kubeconfig(planes.local, planes.source.server, instance)
    hostile = yaml.safe_load(planes.source.server.kubeconfig)
    hostile["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "touch",
            "args": [str(marker)],
        }
    }
    # The team edits the provider's connection secret in place, owner and type kept.
    planes.local.core.patch_namespaced_secret(
        f"{instance}-kubeconfig",
        NAMESPACE,
        {"data": {"kubeconfig": base64.b64encode(yaml.safe_dump(hostile).encode()).decode()}},
    )
    name = fresh_name("exec-backup")
    planes.local.create(
        "backups", backup_object(name, instance, seaweed.endpoint, f"{NAMESPACE}/{instance}/")
    )

    reconcile_backup(planes, name, seaweed.endpoint)

    failed = condition(planes.local.get("backups", NAMESPACE, name), "Failed")
    assert failed["reason"] == "KubeconfigNotAllowed"
    assert "users[].user.exec is not allowed" in failed["message"]
    assert not marker.exists()


def test_a_schedule_outside_its_namespace_makes_no_backups(planes: Planes) -> None:
    namespace = fresh_name("sched")
    planes.local.namespace(namespace)
    planes.local.create(
        "backupschedules",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "BackupSchedule",
            "metadata": {"name": "myctp", "namespace": namespace},
            "spec": {
                "instanceRef": {"name": "myctp"},
                "schedule": "* * * * *",
                "storage": {"bucket": "b", "prefix": f"{VICTIM}/myctp/"},
            },
        },
    )

    async def run() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
        try:
            await ScheduleReconciler(cluster).reconcile(namespace, "myctp")
        finally:
            await cluster.close()

    asyncio.run(run())

    found = planes.local.get("backupschedules", namespace, "myctp")
    ready = condition(found, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "StorageRefused")
    assert f"spec.storage.prefix must be {namespace}/<name>/" in ready["message"]
    made = planes.local.list_of("backups", namespace, "controlplane.spaces.upbound.io", "v1alpha1")
    assert made == []


# --- restore ----------------------------------------------------------------------


@dataclass
class RestoreCase:
    reason: str
    message: str
    prefix: str = f"{NAMESPACE}/restored/"
    key: str = ""  # default: the archive's own key
    status: dict[str, Any] = field(default_factory=dict)
    stored_extra: bytes = b""


RESTORE_CASES = [
    RestoreCase(
        "a Completed Backup without a size",
        "records status.sha256 and status.size",
        status={"size": None},
    ),
    RestoreCase(
        "a Completed Backup without a sha256",
        "records status.sha256 and status.size",
        status={"sha256": None},
    ),
    RestoreCase(
        "an object larger than the Backup recorded",
        "larger than its recorded size",
        stored_extra=b"\0" * 4096,
    ),
    RestoreCase(
        "a Backup naming another namespace's prefix",
        f"spec.storage.prefix must be {NAMESPACE}/<name>/",
        prefix=f"{VICTIM}/myctp/",
    ),
    RestoreCase(
        "a recorded key outside the Backup's prefix",
        "status.location.key must be an archive directly under spec.storage.prefix",
        key=f"{VICTIM}/myctp/b-1.tar.gz",
    ),
]


def restore(planes: Planes, name: str, endpoint: str) -> int:
    async def run() -> int:
        local = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
        try:
            outcome = await Restorer(
                local, crd_timeout=5, endpoints=operator_allows(endpoint)
            ).restore(NAMESPACE, name, yaml.safe_load(planes.target.server.kubeconfig))
        finally:
            await local.close()
        return outcome.objects

    return asyncio.run(run())


def completed_backup(
    planes: Planes, seaweed: SeaweedFS, data: bytes, case: RestoreCase | None = None
) -> str:
    case = case or RestoreCase("", "")
    name = fresh_name("restored")
    own_key = f"{case.prefix}{name}.tar.gz"
    put(seaweed, own_key, data + case.stored_extra)
    planes.local.create("backups", backup_object(name, "any", seaweed.endpoint, case.prefix))
    status = {
        "phase": "Completed",
        "sha256": hashlib.sha256(data).hexdigest(),
        "size": len(data),
        "location": {"bucket": BUCKET, "key": case.key or own_key},
        **case.status,
    }
    set_status(planes, name, status)
    return name


@pytest.mark.parametrize("case", RESTORE_CASES, ids=lambda c: c.reason)
def test_a_restore_refuses_a_backup_it_cannot_trust_and_applies_nothing(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch, case: RestoreCase
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    planes.local.namespace(NAMESPACE)
    canary = fresh_name("must-not-appear")
    data = written(
        (
            ResourceType("namespaces", "", "v1", "Namespace", namespaced=False),
            meta(canary),
        )
    )
    name = completed_backup(planes, seaweed, data, case)

    with pytest.raises(RestoreError) as refused:
        restore(planes, name, seaweed.endpoint)

    assert case.message in str(refused.value)
    names = {ns.metadata.name for ns in planes.target.core.list_namespace().items}
    assert canary not in names


def test_a_restore_applies_no_object_of_a_crd_that_crossplane_does_not_own(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team's own CRD in its control plane cannot carry objects a backup never held."""
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    planes.local.namespace(NAMESPACE)
    unowned = {**PROVIDER_CRD, "metadata": {"name": PROVIDER_CRD["metadata"]["name"]}}
    try:
        planes.target.extensions.create_custom_resource_definition(unowned)
    except Exception as error:  # noqa: BLE001 (made by an earlier test of this module)
        assert "AlreadyExists" in str(error)
    data = written((BUCKETS, meta("smuggled", "default", spec={})))
    name = completed_backup(planes, seaweed, data)

    with pytest.raises(RestoreError, match="not Crossplane's nor owned by a package or an XRD"):
        restore(planes, name, seaweed.endpoint)


# --- the role is bound to the namespace ---------------------------------------------


@pytest.fixture
def recording_sts(moto_sts: Moto) -> Iterator[Proxy]:
    with proxy(moto_sts.endpoint) as forwarding:
        yield forwarding


def test_the_role_is_assumed_with_the_backups_namespace_as_its_external_id(
    moto_sts: Moto, recording_sts: Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each team role's trust policy requires it (the function renders the condition)."""
    pod = moto_sts.create_identity("bound-pod")
    role_arn = moto_sts.create_role("bound-writer", trusted=pod)
    moto_sts.configure(monkeypatch, pod)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", recording_sts.address)

    Store.connect(
        storage_spec({"bucket": "b", "region": "us-east-1", "roleArn": role_arn}, "team-a")
    )

    (assume,) = [body for body in recording_sts.bodies if b"Action=AssumeRole" in body]
    assert b"ExternalId=team-a" in assume
