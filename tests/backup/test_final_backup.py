"""A BackupSchedule being deleted takes its final Backup and keeps its Backups' archives.

Against real parts: a kube-apiserver with the garbage collector of a real
kube-controller-manager (which deletes a schedule's owned Backups once the
schedule is gone), the ``controlplane-backup-controller`` process, and
SeaweedFS. The hosted control plane is another kube-apiserver.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.backup.controllers.schedules import INSTANCE_LABEL
from provider.backup.storage.s3 import StorageSpec, Store
from sandbox.apiserver import APIServerFactory, Etcd
from sandbox.controller_manager import ControllerManager
from sandbox.s3 import SeaweedFS
from sandbox.spaces import PROVIDER_CRDS, Kube, ProviderProcess, condition, wait_for
from tests.backup.test_roundtrip import (
    BACKUP_CRDS,
    XRD_CRD,
    ensure_bucket,
    ensure_default_space,
    write_connection_secret,
)

BUCKET = "final-backups"
FINALIZER = "controlplane.spaces.upbound.io/final-backup"
FINAL_OF = "controlplane.spaces.upbound.io/final-backup-of"
# A test's own finalizer: keeps a released schedule readable, as another controller's would.
HELD = "test.example.org/hold"
# A cluster-scoped composite kind, as a legacy XRD makes.
CLUSTER_CRD = copy.deepcopy(XRD_CRD)
CLUSTER_CRD["metadata"] = {"name": "xnetworks.platform.example.org"}
CLUSTER_CRD["spec"]["scope"] = "Cluster"
CLUSTER_CRD["spec"]["names"] = {
    "plural": "xnetworks",
    "singular": "xnetwork",
    "kind": "XNetwork",
    "listKind": "XNetworkList",
}
# Every Backup and the schedule settle within this on 2 shared cores.
DEADLINE = 90.0

_names = itertools.count()


@dataclass
class World:
    local: Kube
    source: Kube
    s3: SeaweedFS
    workdir: Path

    def store(self) -> Store:
        return Store.connect(StorageSpec(BUCKET, "us-east-1", endpoint=self.s3.endpoint))


@pytest.fixture(scope="module")
def world(
    kube_etcd: Etcd, seaweed: SeaweedFS, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("final-backup")
    with APIServerFactory(kube_etcd) as factory, pytest.MonkeyPatch.context() as monkeypatch:
        seaweed.configure(monkeypatch)
        ensure_bucket(seaweed, BUCKET)
        local = Kube(factory(name="final-local"))
        local.apply_crds(PROVIDER_CRDS, BACKUP_CRDS)
        for crd in (XRD_CRD, CLUSTER_CRD):
            local.extensions.create_custom_resource_definition(crd)
            wait_for("composite CRD", partial(local.established, crd["metadata"]["name"]))
        source = Kube(factory(name="final-source"))
        source.namespace("app")
        source.core.create_namespaced_config_map(
            "app", {"metadata": {"name": "settings"}, "data": {"k": "v"}}
        )
        manager = ControllerManager(local.server, workdir)
        manager.start()
        try:
            yield World(local, source, seaweed, workdir)
        finally:
            manager.stop()


def start_controller(world: World, log: Path, final_backup_timeout: str) -> ProviderProcess:
    """The Backup controller's own process, allowed the test's plain-http S3."""
    return ProviderProcess(
        world.local.server.kubeconfig_path,
        log,
        "--allowed-s3-endpoint",
        world.s3.endpoint,
        f"--final-backup-timeout={final_backup_timeout}",
        command="controlplane-backup-controller",
    ).start()


@pytest.fixture
def controller(world: World, tmp_path: Path) -> Iterator[ProviderProcess]:
    """The Backup controller; a deleted schedule waits up to a minute."""
    process = start_controller(world, tmp_path / "controller.log", "1m")
    try:
        yield process
    finally:
        assert process.stop() == 0


def team(world: World, kubeconfig: str | None = None) -> str:
    """A namespace with an Instance whose kubeconfig reaches the source plane."""
    namespace = f"final-{next(_names)}"
    world.local.namespace(namespace)
    ensure_default_space(world.local, world.source.server)
    instance = world.local.create(
        "instances",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Instance",
            "metadata": {"name": "myctp", "namespace": namespace},
            "spec": {
                "forProvider": {"crossplane": {"autoUpgrade": {"channel": "Stable"}}},
                "writeConnectionSecretToRef": {"name": "myctp-kubeconfig"},
            },
        },
    )
    write_connection_secret(world.local, instance, kubeconfig or world.source.server.kubeconfig)
    return namespace


def composite(world: World, namespace: str, *, cluster_scoped: bool) -> dict[str, Any]:
    """A composite to own the schedule, as Crossplane's would."""
    if cluster_scoped:
        obj = {
            "apiVersion": "platform.example.org/v1",
            "kind": "XNetwork",
            "metadata": {"name": f"{namespace}-xr"},
        }
        return world.local.create("xnetworks", obj, "platform.example.org", "v1")
    obj = {
        "apiVersion": "platform.example.org/v1",
        "kind": "Network",
        "metadata": {"name": "myctp", "namespace": namespace},
    }
    return world.local.create("networks", obj, "platform.example.org", "v1")


def schedule(
    world: World,
    namespace: str,
    *,
    owner: dict[str, Any] | None = None,
    finalizers: tuple[str, ...] = (),
    **spec: Any,
) -> dict[str, Any]:
    """A BackupSchedule that never fires by itself here; once the controller holds it."""
    metadata: dict[str, Any] = {"name": "myctp", "namespace": namespace}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": owner["apiVersion"],
                "kind": owner["kind"],
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
                "controller": True,
            }
        ]
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    world.local.create(
        "backupschedules",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "BackupSchedule",
            "metadata": metadata,
            "spec": {
                "instanceRef": {"name": "myctp"},
                "schedule": "0 0 1 1 *",
                "ttl": "24h",
                "storage": {
                    "bucket": BUCKET,
                    "prefix": f"{namespace}/myctp/",
                    "region": "us-east-1",
                    "endpoint": world.s3.endpoint,
                },
                **spec,
            },
        },
    )
    return wait_for(
        "the controller holds the schedule",
        lambda: _held(world.local.get("backupschedules", namespace, "myctp")),
        DEADLINE,
    )


def _held(found: dict[str, Any] | None) -> dict[str, Any] | None:
    return found if found and FINALIZER in found["metadata"].get("finalizers", []) else None


def owned_backup(world: World, found_schedule: dict[str, Any], name: str) -> dict[str, Any]:
    """An earlier Backup of the schedule, as it makes them (owned, labelled), Completed."""
    namespace = found_schedule["metadata"]["namespace"]
    world.local.create(
        "backups",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Backup",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"controlplane.spaces.upbound.io/schedule": "myctp"},
                "ownerReferences": [
                    {
                        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
                        "kind": "BackupSchedule",
                        "name": "myctp",
                        "uid": found_schedule["metadata"]["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": copy.deepcopy(
                {k: found_schedule["spec"][k] for k in ("instanceRef", "storage", "ttl")}
            ),
        },
    )
    return completed(world, namespace, name)


def completed(world: World, namespace: str, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = world.local.get("backups", namespace, name)
        return found if condition(found, "Completed").get("status") == "True" else None

    return wait_for(f"Backup {name} Completed", probe, DEADLINE)


def finals(world: World, namespace: str) -> list[dict[str, Any]]:
    return [
        b
        for b in world.local.list_of(
            "backups", namespace, "controlplane.spaces.upbound.io", "v1alpha1"
        )
        if FINAL_OF in (b["metadata"].get("labels") or {})
    ]


def delete_schedule(world: World, namespace: str, propagation: str = "Background") -> None:
    world.local.custom.delete_namespaced_custom_object(
        "controlplane.spaces.upbound.io",
        "v1alpha1",
        namespace,
        "backupschedules",
        "myctp",
        propagation_policy=propagation,
    )


def gone(world: World, plural: str, namespace: str, name: str) -> None:
    wait_for(
        f"{plural} {name} gone", lambda: world.local.get(plural, namespace, name) is None, DEADLINE
    )


def reasons(world: World, namespace: str, name: str) -> set[str]:
    return {str(e.get("reason")) for e in world.local.events(namespace, name)}


@dataclass(frozen=True)
class DeletionCase:
    reason: str
    propagation: str
    cluster_scoped_composite: bool


DELETION_CASES = [
    DeletionCase(
        "A schedule deleted in the background, owned by a namespaced (v2) composite",
        "Background",
        cluster_scoped_composite=False,
    ),
    DeletionCase(
        "A schedule deleted in the foreground (its Backups go first), owned by a "
        "cluster-scoped (legacy) composite",
        "Foreground",
        cluster_scoped_composite=True,
    ),
]


@pytest.mark.parametrize("case", DELETION_CASES, ids=lambda case: case.reason)
def test_a_deleted_schedule_takes_a_final_backup_that_outlives_it_and_keeps_every_archive(
    case: DeletionCase, world: World, controller: ProviderProcess
) -> None:
    namespace = team(world)
    owner = composite(world, namespace, cluster_scoped=case.cluster_scoped_composite)
    held = schedule(world, namespace, owner=owner)
    earlier = owned_backup(world, held, "myctp-20261201000000")
    earlier_key = earlier["status"]["location"]["key"]

    delete_schedule(world, namespace, case.propagation)
    gone(world, "backupschedules", namespace, "myctp")

    # The final Backup: named for the deletion, not owned, labelled, its archive retained.
    (final,) = finals(world, namespace)
    name = final["metadata"]["name"]
    assert name.startswith("myctp-final-") and len(name) == len("myctp-final-20261203093015")
    assert "ownerReferences" not in final["metadata"]
    assert final["metadata"]["labels"][FINAL_OF] == "myctp"
    assert final["spec"]["deletionPolicy"] == "Orphan"
    assert "finalizers" not in final["metadata"]
    # Found by the control plane it holds, as a scheduled Backup is.
    assert final["metadata"]["labels"][INSTANCE_LABEL] == held["spec"]["instanceRef"]["name"]
    assert final["spec"]["storage"] == held["spec"]["storage"]
    assert "ttl" not in final["spec"], "a final Backup never expires"
    assert final["status"]["phase"] == "Completed", final["status"]
    store = world.store()
    assert store.exists(final["status"]["location"]["key"])
    assert final["status"]["objects"] > 0
    assert "FinalBackupCompleted" in reasons(world, namespace, "myctp")

    # The composite was told, wherever its scope puts its events.
    events_namespace = "default" if case.cluster_scoped_composite else namespace
    composite_events = [
        e
        for e in world.local.events(events_namespace, owner["metadata"]["name"])
        if e["involvedObject"].get("uid") == owner["metadata"]["uid"]
    ]
    assert [e["reason"] for e in composite_events] == ["FinalBackupCompleted"]
    assert name in composite_events[0]["message"]

    # The garbage collector took the schedule's own Backup; its archive stays restorable.
    gone(world, "backups", namespace, earlier["metadata"]["name"])
    assert store.exists(earlier_key)

    # The final Backup deleted on its own keeps its archive too (its role may be gone):
    # Orphan, it holds no finalizer, so nothing waits on S3.
    world.local.delete("backups", namespace, name)
    gone(world, "backups", namespace, name)
    assert store.exists(final["status"]["location"]["key"])


def test_a_backup_deleted_while_its_schedule_lives_still_deletes_its_archive(
    world: World, controller: ProviderProcess
) -> None:
    namespace = team(world)
    held = schedule(world, namespace)
    earlier = owned_backup(world, held, "myctp-20261201000000")
    key = earlier["status"]["location"]["key"]
    assert world.store().exists(key)

    world.local.delete("backups", namespace, earlier["metadata"]["name"])
    gone(world, "backups", namespace, earlier["metadata"]["name"])
    assert not world.store().exists(key)


@dataclass(frozen=True)
class NoFinalCase:
    reason: str
    spec: dict[str, Any]
    want_reason: str


NO_FINAL_CASES = [
    NoFinalCase("finalBackup false takes none", {"finalBackup": False}, "FinalBackupDisabled"),
    NoFinalCase("a suspended schedule takes none", {"suspend": True}, "FinalBackupSkipped"),
]


@pytest.mark.parametrize("case", NO_FINAL_CASES, ids=lambda case: case.reason)
def test_a_schedule_that_takes_no_final_backup_lets_go_at_once(
    case: NoFinalCase, world: World, controller: ProviderProcess
) -> None:
    namespace = team(world)
    schedule(world, namespace, **case.spec)
    delete_schedule(world, namespace)
    gone(world, "backupschedules", namespace, "myctp")
    assert finals(world, namespace) == []
    assert case.want_reason in reasons(world, namespace, "myctp")


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """A loopback port that takes connections and never answers (a hung control plane).

    Closing it resets them, so the Backup's attempt ends and the controller can stop.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    try:
        yield int(listener.getsockname()[1])
    finally:
        listener.close()


def kubeconfig_to(world: World, port: int) -> str:
    kubeconfig = yaml.safe_load(world.source.server.kubeconfig)
    for entry in kubeconfig["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{port}"
    return str(yaml.safe_dump(kubeconfig))


@dataclass(frozen=True)
class NotSavedCase:
    reason: str
    hung: bool
    timeout: str
    want_reason: str
    want_in_message: str


NOT_SAVED_CASES = [
    NotSavedCase(
        "a final Backup that fails its attempts (the Instance has no kubeconfig) is reported",
        hung=False,
        timeout="1m",
        want_reason="FinalBackupFailed",
        want_in_message="failed: Instance",
    ),
    NotSavedCase(
        "a final Backup that never finishes (the control plane does not answer) is given up "
        "after the bounded wait",
        hung=True,
        timeout="3s",
        want_reason="FinalBackupTimedOut",
        want_in_message="did not finish within 3s",
    ),
]


@pytest.mark.parametrize("case", NOT_SAVED_CASES, ids=lambda case: case.reason)
def test_a_final_backup_that_does_not_complete_releases_the_schedule_saying_so(
    case: NotSavedCase, world: World, tmp_path: Path
) -> None:
    hung = contextlib.ExitStack()
    port = hung.enter_context(silent_server())
    process = start_controller(world, tmp_path / "controller.log", case.timeout)
    try:
        namespace = team(world, kubeconfig_to(world, port) if case.hung else None)
        if not case.hung:
            world.local.core.delete_namespaced_secret("myctp-kubeconfig", namespace)
        owner = composite(world, namespace, cluster_scoped=False)
        schedule(world, namespace, owner=owner, finalizers=(HELD,))
        delete_schedule(world, namespace)

        def released() -> dict[str, Any] | None:
            found = world.local.get("backupschedules", namespace, "myctp")
            return found if found and FINALIZER not in found["metadata"]["finalizers"] else None

        found = wait_for("the schedule lets go", released, DEADLINE)
        final = condition(found, "FinalBackup")
        assert (final["status"], final["reason"]) == ("False", case.want_reason)
        assert final["message"].startswith("the data was not saved: final Backup myctp-final-")
        assert case.want_in_message in final["message"]
        assert found["status"]["finalBackup"] == finals(world, namespace)[0]["metadata"]["name"]
        warnings = [
            e
            for e in world.local.events(namespace, "myctp")
            if e["reason"] == case.want_reason and e["type"] == "Warning"
        ]
        # One about the schedule, one about the composite that owns it.
        assert {e["involvedObject"]["kind"] for e in warnings} == {"BackupSchedule", "Network"}
        world.local.patch("backupschedules", namespace, "myctp", {"metadata": {"finalizers": []}})
        gone(world, "backupschedules", namespace, "myctp")
    finally:
        hung.close()
        assert process.stop() == 0


def test_a_schedule_in_a_namespace_being_deleted_lets_go_without_waiting_out_the_timeout(
    world: World, tmp_path: Path
) -> None:
    # A long wait: the namespace must go because the schedule gives up at once, not late.
    process = start_controller(world, tmp_path / "controller.log", "30m")
    try:
        namespace = team(world)
        schedule(world, namespace)
        world.local.core.delete_namespace(namespace)

        def namespace_gone() -> bool:
            return all(
                item.metadata.name != namespace for item in world.local.core.list_namespace().items
            )

        wait_for("the namespace gone", namespace_gone, DEADLINE)
        assert "reconcile raised" not in process.log()
    finally:
        assert process.stop() == 0
