"""Backup and restore faults: refused with a clear message, nothing half done, no secret shown."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from provider.backup.controllers.backups import MAX_ATTEMPTS
from provider.backup.format import archive
from provider.backup.restore.restorer import RestoreError, Restorer
from provider.backup.storage.s3 import StorageSpec, Store
from provider.kube import Cluster
from sandbox.s3 import SeaweedFS, use_credentials
from sandbox.spaces import condition
from tests.backup.test_roundtrip import (
    BUCKET,
    NAMESPACE,
    Planes,
    backup_object,
    ensure_bucket,
    fresh_name,
    instance_with_kubeconfig,
    operator_allows,
)
from tests.deploy.test_kustomize import KUBECTL

CONTENT_CANARY = "content-canary-91b2"


def test_an_unreachable_s3_fails_the_backup_after_retries_and_leaves_no_object(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    instance = fresh_name("ctp")
    name = fresh_name("unreachable")
    instance_with_kubeconfig(planes.local, planes.source.server, instance)
    planes.local.create(
        "backups", backup_object(name, instance, seaweed.endpoint, f"{NAMESPACE}/{instance}/")
    )
    with seaweed.gateway_stopped():
        for attempt in range(1, MAX_ATTEMPTS + 1):
            asyncio.run(run_backup_allowing_retry(planes, name, seaweed.endpoint))
            status = (planes.local.get("backups", NAMESPACE, name) or {})["status"]
            assert status["retries"] == attempt
            assert status["phase"] == ("Failed" if attempt == MAX_ATTEMPTS else "Pending")
    failed = condition(planes.local.get("backups", NAMESPACE, name), "Failed")
    assert failed["status"] == "True"
    assert "cannot reach" in failed["message"] or "Could not connect" in failed["message"]
    store = Store.connect(StorageSpec(BUCKET, "us-east-1", endpoint=seaweed.endpoint))
    assert not store.exists(f"{NAMESPACE}/{instance}/{name}.tar.gz")
    assert seaweed.pending_uploads(BUCKET) == []


async def run_backup_allowing_retry(planes: Planes, name: str, endpoint: str) -> None:
    from provider.backup.controllers.backups import BackupReconciler

    cluster = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
    try:
        await BackupReconciler(cluster, endpoints=operator_allows(endpoint)).reconcile(
            NAMESPACE, name
        )
    finally:
        await cluster.close()


def test_wrong_credentials_are_refused_and_the_secret_is_never_shown(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = "wrong-secret-canary-5e1d"
    use_credentials(monkeypatch, seaweed.access_key, wrong)
    instance = fresh_name("ctp")
    name = fresh_name("wrongkey")
    instance_with_kubeconfig(planes.local, planes.source.server, instance)
    planes.local.create(
        "backups", backup_object(name, instance, seaweed.endpoint, f"{NAMESPACE}/{instance}/")
    )
    asyncio.run(run_backup_allowing_retry(planes, name, seaweed.endpoint))
    backup = planes.local.get("backups", NAMESPACE, name) or {}
    retrying = condition(backup, "Failed")
    assert "SignatureDoesNotMatch" in retrying["message"] or "AccessDenied" in retrying["message"]
    shown = yaml.safe_dump(backup) + yaml.safe_dump(planes.local.events(NAMESPACE, name))
    assert wrong not in shown


def test_a_backup_of_an_instance_without_a_kubeconfig_says_so(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    seaweed.configure(monkeypatch)
    name = fresh_name("nokubeconfig")
    planes.local.namespace(NAMESPACE)
    planes.local.create("backups", backup_object(name, "no-such-instance", seaweed.endpoint))
    asyncio.run(run_backup_allowing_retry(planes, name, seaweed.endpoint))
    message = condition(planes.local.get("backups", NAMESPACE, name), "Failed")["message"]
    assert message == f"Instance {NAMESPACE}/no-such-instance not found"


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb") as zipped,
        tarfile.open(fileobj=zipped, mode="w") as tar,
    ):
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return raw.getvalue()


def _file(path: str, data: bytes) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(path)
    info.size = len(data)
    return info, data


def _valid_archive() -> bytes:
    sink = io.BytesIO()
    writer = archive.ArchiveWriter(sink)
    writer.add(
        archive.ResourceType("namespaces", "", "v1", "Namespace", namespaced=False),
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": "must-not-appear", "labels": {"note": CONTENT_CANARY}},
        },
    )
    from datetime import UTC, datetime

    writer.finish(instance="x", exported_at=datetime.now(UTC), options={})
    return sink.getvalue()


def _tampered() -> bytes:
    """A valid archive whose namespace file was changed after export.yaml was written."""
    with gzip.open(io.BytesIO(_valid_archive())) as zipped, tarfile.open(fileobj=zipped) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()]  # type: ignore[union-attr]
    changed = []
    for info, data in members:
        body = data
        if info.name.endswith("must-not-appear.yaml") and data is not None:
            body = data + b"# changed after export\n"
            info.size = len(body)
        changed.append((info, body))
    return _tar(changed)


def _traversal() -> bytes:
    return _tar([_file("../../etc/evil.yaml", b"apiVersion: v1\n")])


@dataclass(frozen=True)
class BadArchive:
    reason: str
    make: Callable[[], bytes]
    message: str
    record_sha: bool = True


BAD_ARCHIVES = [
    BadArchive("A corrupted archive is refused.", lambda: b"\x1f\x8b not really gzip", "refused"),
    BadArchive(
        "A file changed after export is a checksum mismatch.", _tampered, "checksum mismatch"
    ),
    BadArchive("A path that leaves the archive is refused.", _traversal, "refused"),
    BadArchive(
        "An archive that is not the one the Backup recorded is refused.",
        _valid_archive,
        "does not match its recorded sha256",
        record_sha=False,
    ),
]


@pytest.mark.parametrize("case", BAD_ARCHIVES, ids=lambda case: case.reason)
def test_a_bad_archive_is_refused_before_anything_is_applied(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch, case: BadArchive
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    name = fresh_name("bad")
    data = case.make()
    key = f"{NAMESPACE}/bad/{name}.tar.gz"
    with Store.connect(StorageSpec(BUCKET, "us-east-1", endpoint=seaweed.endpoint)).writer(
        key
    ) as sink:
        sink.write(data)
    planes.local.namespace(NAMESPACE)
    planes.local.create(
        "backups", backup_object(name, "anything", seaweed.endpoint, f"{NAMESPACE}/bad/")
    )
    sha = hashlib.sha256(data).hexdigest() if case.record_sha else "0" * 64
    planes.local.custom.patch_namespaced_custom_object_status(
        "controlplane.spaces.upbound.io",
        "v1alpha1",
        NAMESPACE,
        "backups",
        name,
        {
            "status": {
                "phase": "Completed",
                "sha256": sha,
                "size": len(data),
                "location": {"bucket": BUCKET, "key": key},
            }
        },
    )

    async def restore() -> Any:
        local = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
        try:
            return await Restorer(local, endpoints=operator_allows(seaweed.endpoint)).restore(
                NAMESPACE, name, yaml.safe_load(planes.target.server.kubeconfig)
            )
        finally:
            await local.close()

    with pytest.raises(RestoreError) as refused:
        asyncio.run(restore())
    assert case.message in str(refused.value)
    assert CONTENT_CANARY not in str(refused.value), "no file contents in messages"
    names = {ns.metadata.name for ns in planes.target.core.list_namespace().items}
    assert "must-not-appear" not in names, "nothing is applied from a refused archive"


DEEP_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "deeps.test.crossplane.io"},
    "spec": {
        "group": "test.crossplane.io",
        "scope": "Cluster",
        "names": {"plural": "deeps", "singular": "deep", "kind": "Deep", "listKind": "DeepList"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
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


def test_a_backup_that_meets_an_unexpected_error_fails_after_its_attempts(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A very deep object (a RecursionError) ends in Failed, not in retries for ever."""
    from functools import partial

    from sandbox.spaces import wait_for

    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    source = planes.source
    try:
        source.extensions.create_custom_resource_definition(DEEP_CRD)
    except Exception as error:  # noqa: BLE001 (made by an earlier run of this module)
        assert "AlreadyExists" in str(error)
    wait_for("the CRD", partial(source.established, DEEP_CRD["metadata"]["name"]))
    # Written as text by kubectl: Python's own JSON encoder stops short of this depth.
    depth = 3000
    deep = (
        '{"apiVersion": "test.crossplane.io/v1", "kind": "Deep", "metadata": {"name": "deep"}, '
        + '"spec": '
        + '{"d": ' * depth
        + "{}"
        + "}" * depth
        + "}"
    )
    created = subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(source.server.kubeconfig_path), "apply", "-f", "-"],
        input=deep,
        capture_output=True,
        text=True,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    instance = fresh_name("deep")
    name = fresh_name("deep-backup")
    instance_with_kubeconfig(planes.local, planes.source.server, instance)
    planes.local.create(
        "backups", backup_object(name, instance, seaweed.endpoint, f"{NAMESPACE}/{instance}/")
    )
    try:
        for _ in range(MAX_ATTEMPTS):
            asyncio.run(run_backup_allowing_retry(planes, name, seaweed.endpoint))
    finally:
        subprocess.run(
            [
                str(KUBECTL),
                "--kubeconfig",
                str(source.server.kubeconfig_path),
                "delete",
                "deeps",
                "deep",
            ],
            capture_output=True,
            check=False,
        )

    backup = planes.local.get("backups", NAMESPACE, name)
    assert backup is not None
    assert backup["status"]["phase"] == "Failed"
    assert condition(backup, "Failed")["message"] == "unexpected error (RecursionError)"
