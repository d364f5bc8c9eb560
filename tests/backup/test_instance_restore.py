"""An Instance created from a Backup: restored once its control plane is available, Ready after."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import yaml

from provider.backup.restore import Restorer
from provider.instances import InstanceAPI
from provider.kube import Cluster
from provider.managed.reconciler import Reconciler
from provider.spaces.backend import SpacesConnector
from sandbox.s3 import SeaweedFS
from sandbox.spaces import Kube, condition, wait_for
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


def reconcile(local: Kube, namespace: str, name: str, endpoint: str) -> None:
    async def run() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
        restorer = Restorer(cluster, endpoints=operator_allows(endpoint))
        connector = SpacesConnector(cluster, restorer=restorer)
        try:
            await Reconciler(
                InstanceAPI(cluster), connector, deterministic_external_name=True
            ).reconcile(namespace, name)
        finally:
            await connector.close()
            await cluster.close()

    asyncio.run(run())


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

    def state() -> dict[str, Any] | None:
        reconcile(local, NAMESPACE, "restored", seaweed.endpoint)
        return local.get("instances", NAMESPACE, "restored")

    def tried() -> dict[str, Any] | None:
        found = state()
        at_provider = ((found or {}).get("status") or {}).get("atProvider") or {}
        return found if "restore" in at_provider else None

    def restored() -> dict[str, Any] | None:
        found = state()
        return found if condition(found, "Ready").get("status") == "True" else None

    # The Backup does not exist yet: the control plane comes up, but the
    # Instance is not Ready, and says why.
    waiting = wait_for("the restore to be tried", tried)
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

    done = wait_for("Ready after the restore", restored)
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
    reconcile(local, NAMESPACE, "restored", seaweed.endpoint)
    assert hosted.core.read_namespaced_config_map("settings", "restored-app").data == {
        "mode": "changed"
    }
