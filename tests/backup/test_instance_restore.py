"""An Instance created from a Backup: restored once its control plane is available, Ready after."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from provider.backup.format import archive
from provider.backup.format.archive import SourceVersions
from provider.backup.restore.restorer import Restorer
from provider.backup.storage.s3 import StorageSpec, Store
from provider.instances import InstanceAPI
from provider.kube import Cluster
from provider.managed.reconciler import Reconciler
from provider.spaces.backend import SpacesConnector
from sandbox.s3 import SeaweedFS
from sandbox.spaces import Kube, condition
from tests.backup.test_roundtrip import (
    BUCKET,
    NAMESPACE,
    Planes,
    backup_object,
    ensure_bucket,
    instance_with_kubeconfig,
    operator_allows,
    run_backup,
)
from tests.provider.conftest import (
    PROVIDER_NAMESPACE,
    SPACE_SECRET,
    cluster_provider_config,
)

RECONCILE_DEADLINE = 60.0
# The poll of an Instance not yet Ready, as the provider's short wait.
POLL_SECONDS = 0.5


def restoring_instance(name: str, backup: str) -> dict[str, Any]:
    """An Instance to be restored from Backup ``backup`` once its control plane is up."""
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "forProvider": {
                "crossplane": {"autoUpgrade": {"channel": "Stable"}},
                "initialRestorationFrom": {"backupRef": {"name": backup}},
            },
            "writeConnectionSecretToRef": {"name": f"{name}-kubeconfig"},
        },
    }


def reconcile(
    local: Kube,
    name: str,
    endpoint: str,
    done: Callable[[dict[str, Any] | None], bool] = lambda _: True,
    timeout: float = RECONCILE_DEADLINE,
) -> dict[str, Any] | None:
    """Reconcile Instance ``name`` as the provider does until ``done`` holds of it.

    One connector throughout, as in the provider: its restores run in its pool
    between reconciles, and the next reconcile comes when the pool (or the
    Space) wakes the Instance, or at the poll.
    """

    async def run() -> dict[str, Any] | None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
        woken = asyncio.Event()
        connector = SpacesConnector(
            cluster,
            restorer=Restorer(cluster, endpoints=operator_allows(endpoint)),
            on_control_plane=lambda _key: woken.set(),
        )
        reconciler = Reconciler(InstanceAPI(cluster), connector, deterministic_external_name=True)
        deadline = asyncio.get_running_loop().time() + timeout
        try:
            while True:
                woken.clear()
                await reconciler.reconcile(NAMESPACE, name)
                found = local.get("instances", NAMESPACE, name)
                if done(found):
                    return found
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    msg = f"Instance {name} not as wanted after {timeout:.0f}s: {found!r}"
                    raise AssertionError(msg)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), min(left, POLL_SECONDS))
        finally:
            await connector.close()
            await cluster.close()

    return asyncio.run(run())


def test_an_instance_is_ready_only_once_its_backup_is_restored(
    planes: Planes,
    space: tuple[Kube, Kube],
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    space_cluster, hosted = space
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    local = planes.local
    local.namespace(PROVIDER_NAMESPACE)
    local.put_secret(
        PROVIDER_NAMESPACE, SPACE_SECRET, {"kubeconfig": space_cluster.server.kubeconfig.encode()}
    )
    local.create("clusterproviderconfigs", cluster_provider_config())
    planes.source.namespace("restored-app")
    planes.source.core.create_namespaced_config_map(
        "restored-app", {"metadata": {"name": "settings"}, "data": {"mode": "restored"}}
    )
    local.namespace(NAMESPACE)
    local.create("instances", restoring_instance("restored", "later"))

    def tried(found: dict[str, Any] | None) -> bool:
        at_provider = ((found or {}).get("status") or {}).get("atProvider") or {}
        return (at_provider.get("restore") or {}).get("phase") == "Failed"

    def restored(found: dict[str, Any] | None) -> bool:
        return condition(found, "Ready").get("status") == "True"

    # The Backup does not exist yet: the control plane comes up, but the
    # Instance is not Ready, and says why.
    waiting = reconcile(local, "restored", seaweed.endpoint, tried)
    assert waiting is not None
    ready = condition(waiting, "Ready")
    assert ready["status"] == "False"
    assert "restore from Backup later failed: Backup team-a/later not found" in ready["message"]
    assert waiting["status"]["atProvider"]["restore"]["phase"] == "Failed"
    restored_condition = condition(waiting, "Restored")
    assert (restored_condition["status"], restored_condition["reason"]) == (
        "False",
        "RestoreFailed",
    )
    assert restored_condition["message"] == (
        "restore from Backup later failed before applying anything: Backup team-a/later not "
        "found; it is retried"
    )

    instance_with_kubeconfig(local, planes.source.server, "origin")
    local.create("backups", backup_object("later", "origin", seaweed.endpoint, "team-a/origin/"))
    asyncio.run(run_backup(local, "later", seaweed.endpoint))

    done = reconcile(local, "restored", seaweed.endpoint, restored)
    assert done is not None
    restore = done["status"]["atProvider"]["restore"]
    assert restore["backupName"] == "later"
    assert restore["phase"] == "Completed"
    assert restore["applied"] == restore["total"] > 0
    assert "message" not in restore, "a retry that succeeds drops the failure's message"
    restored_condition = condition(done, "Restored")
    assert (restored_condition["status"], restored_condition["reason"]) == (
        "True",
        "RestoreCompleted",
    )
    assert restored_condition["message"] == (
        f"restored {restore['total']} objects from Backup later"
    )
    settings = hosted.core.read_namespaced_config_map("settings", "restored-app")
    assert settings.data == {"mode": "restored"}

    # Restored once: a later reconcile does not restore again.
    hosted.core.patch_namespaced_config_map(
        "settings", "restored-app", {"data": {"mode": "changed"}}
    )
    reconcile(local, "restored", seaweed.endpoint)
    assert hosted.core.read_namespaced_config_map("settings", "restored-app").data == {
        "mode": "changed"
    }


def backup_from_crossplane(
    planes: Planes, seaweed: SeaweedFS, name: str, crossplane_version: str
) -> None:
    """A Completed Backup of the source control plane, whose Space says it runs that version."""
    local = planes.local
    source = f"{name}-source"
    instance_with_kubeconfig(local, planes.source.server, source)
    local.custom.patch_namespaced_custom_object_status(
        "controlplane.spaces.upbound.io",
        "v1alpha1",
        NAMESPACE,
        "instances",
        source,
        {"status": {"atProvider": {"crossplaneVersion": crossplane_version}}},
    )
    local.create("backups", backup_object(name, source, seaweed.endpoint, f"team-a/{source}/"))
    asyncio.run(run_backup(local, name, seaweed.endpoint))


def recorded_source(local: Kube, backup: str, endpoint: str) -> SourceVersions:
    """What the Backup's archive, as stored, records of its source."""
    found = local.get("backups", NAMESPACE, backup)
    assert found is not None
    location = found["status"]["location"]
    data = io.BytesIO()
    Store.connect(StorageSpec(bucket=location["bucket"], endpoint=endpoint)).download(
        location["key"], data
    )
    return archive.verify(io.BytesIO(data.getvalue())).source


def namespace_exists(kube: Kube, name: str) -> bool:
    return bool(kube.core.list_namespace(field_selector=f"metadata.name={name}").items)


def events_of(local: Kube, name: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events about Instance ``name``."""
    found = local.core.list_namespaced_event(NAMESPACE)
    return [
        (event.type, event.reason, event.message)
        for event in found.items
        if event.involved_object.name == name
    ]


def restore_ended(found: dict[str, Any] | None) -> bool:
    at_provider = ((found or {}).get("status") or {}).get("atProvider") or {}
    return (at_provider.get("restore") or {}).get("phase") in {"Failed", "Completed"}


def test_an_archive_from_a_newer_crossplane_is_refused_naming_both_versions_applying_nothing(
    planes: Planes,
    space: tuple[Kube, Kube],
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, hosted = space
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    planes.source.namespace("from-the-future")
    backup_from_crossplane(planes, seaweed, "future", "9.1.0-up.1")
    local = planes.local
    # The archive records what the Space said the source ran, and its API server's version.
    source = recorded_source(local, "future", seaweed.endpoint)
    assert source.crossplane == "9.1.0-up.1"
    assert source.kubernetes.startswith("v1.")

    local.create("instances", restoring_instance("too-old", "future"))
    location = local.get("backups", NAMESPACE, "future")["status"]["location"]  # type: ignore[index]
    store = Store.connect(StorageSpec(bucket=location["bucket"], endpoint=seaweed.endpoint))
    ended: list[dict[str, Any]] = []

    def refused_and_not_fetched_again(found: dict[str, Any] | None) -> bool:
        if found is None or not restore_ended(found):
            return False
        ended.append(found)
        if len(ended) == 1:
            # A retry for the same version would now fail to fetch the archive.
            store.delete(location["key"])
        return len(ended) == 4

    refused = reconcile(local, "too-old", seaweed.endpoint, refused_and_not_fetched_again)

    assert refused is not None
    running = refused["status"]["atProvider"]["crossplaneVersion"]
    assert refused["status"]["atProvider"]["restore"]["phase"] == "Failed"
    restored = condition(refused, "Restored")
    assert (restored["status"], restored["reason"]) == ("False", "RestoreFailed")
    assert restored["message"].startswith(
        "restore from Backup future failed before applying anything: the archive was taken "
        f"from Crossplane 9.1.0-up.1, and the control plane runs Crossplane {running}, an "
        "older minor"
    )
    assert condition(refused, "Ready")["status"] == "False"
    # Nothing of the archive reached the control plane.
    assert not namespace_exists(hosted, "from-the-future")
    assert [
        (kind, reason)
        for kind, reason, message in events_of(local, "too-old")
        if running in message
    ] == [("Warning", "RestoreCrossplaneTooOld")]


def test_an_archive_from_an_older_crossplane_minor_is_restored_and_the_event_says_so(
    planes: Planes,
    space: tuple[Kube, Kube],
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, hosted = space
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    planes.source.namespace("from-the-past")
    backup_from_crossplane(planes, seaweed, "past", "1.20.5-up.1")
    local = planes.local
    local.create("instances", restoring_instance("newer", "past"))

    done = reconcile(local, "newer", seaweed.endpoint, restore_ended)

    assert done is not None
    assert done["status"]["atProvider"]["restore"]["phase"] == "Completed"
    running = done["status"]["atProvider"]["crossplaneVersion"]
    assert namespace_exists(hosted, "from-the-past")
    noted = [event for event in events_of(local, "newer") if "Crossplane" in event[1]]
    assert noted == [
        (
            "Normal",
            "RestoreCrossplaneVersion",
            "Backup past: the archive was taken from Crossplane 1.20.5-up.1; the control plane "
            f"runs Crossplane {running}, a newer minor, which serves what the older one did",
        )
    ]
