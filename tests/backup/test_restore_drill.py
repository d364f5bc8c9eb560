"""A BackupSchedule's restore drill against real API servers and a real S3 (SeaweedFS).

The drill controller (``DrillReconciler``) runs in the test, against a
kube-apiserver holding the schedule, its Backup and Instances; no provider
runs here, so the test plays the provider's part for the throwaway Instance:
it restores the Backup into a control plane of its own (the provider's
``Restorer``, as an Instance's restore does), writes its connection secret
and records the restore Completed. The drill then holds that control plane to
the archive and deletes the throwaway Instance, passed or failed. Another
test runs the controller as its own process and kills it mid-drill.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.backup.controllers import drills
from provider.backup.controllers.backups import SCHEDULE_LABEL, BackupReconciler
from provider.backup.controllers.restore_drills import DrillReconciler
from provider.backup.restore.restorer import Restorer
from provider.kube import Cluster
from provider.runtime import metrics
from sandbox.apiserver import APIServerFactory, Etcd
from sandbox.s3 import SeaweedFS
from sandbox.spaces import PROVIDER_CRDS, Kube, ProviderProcess, condition, wait_for
from tests.backup.test_roundtrip import (
    BACKUP_CRDS,
    BUCKET,
    NAMESPACE,
    PROVIDER_CRD,
    backup_object,
    ensure_bucket,
    instance_with_kubeconfig,
    operator_allows,
    run_backup,
    write_connection_secret,
)

SCHEDULE = "myctp"
INTERVAL = "24h"
DEADLINE = drills.DEFAULT_DEADLINE
APP = "app"


@dataclass
class Servers:
    local: Kube
    source: Kube
    factory: APIServerFactory
    names: Iterator[int]

    def fresh(self) -> Kube:
        """A new, empty control plane: a throwaway one the test plays the Space for."""
        return Kube(self.factory(name=f"drill-target-{next(self.names)}"))


@pytest.fixture(scope="module")
def servers(kube_etcd: Etcd) -> Iterator[Servers]:
    with APIServerFactory(kube_etcd) as factory:
        local = Kube(factory(name="drill-local"))
        local.apply_crds(PROVIDER_CRDS, BACKUP_CRDS)
        source = Kube(factory(name="drill-source"))
        seed(source)
        yield Servers(local, source, factory, itertools.count())


def seed(source: Kube) -> None:
    """A small control plane: a namespace, ConfigMaps, and managed resources, one paused."""
    source.extensions.create_custom_resource_definition(copy.deepcopy(PROVIDER_CRD))
    wait_for("CRD Established", partial(source.established, PROVIDER_CRD["metadata"]["name"]))
    source.namespace(APP)
    for item in range(3):
        source.core.create_namespaced_config_map(
            APP, {"metadata": {"name": f"config-{item}"}, "data": {"k": f"v{item}"}}
        )
    for item, paused in ((0, True), (1, False)):
        annotations = {"crossplane.io/paused": "true"} if paused else {}
        source.create(
            "buckets",
            {
                "apiVersion": "s3.example.org/v1",
                "kind": "Bucket",
                "metadata": {
                    "name": f"bucket-{item}",
                    "namespace": APP,
                    "annotations": annotations,
                },
                "spec": {"forProvider": {"region": "eu-west-1"}},
            },
            "s3.example.org",
            "v1",
        )


class Clock:
    """The time the drill controller runs by; the test moves it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def schedule_object(name: str, endpoint: str, verify: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "BackupSchedule",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "instanceRef": {"name": name},
            "schedule": "@daily",
            "ttl": "168h",
            "verify": verify,
            "storage": {
                "bucket": BUCKET,
                "prefix": f"team-a/{name}/",
                "region": "us-east-1",
                "endpoint": endpoint,
            },
        },
    }


def completed_backup(servers: Servers, schedule: str, endpoint: str) -> str:
    """A Completed Backup of the source, owned by ``schedule`` as the schedule makes them."""
    name = f"{schedule}-20261204060000"
    backup = backup_object(name, schedule, endpoint, f"team-a/{schedule}/")
    backup["metadata"]["labels"] = {SCHEDULE_LABEL: schedule}
    servers.local.create("backups", backup)
    asyncio.run(run_backup(servers.local, name, endpoint))
    found = servers.local.get("backups", NAMESPACE, name)
    assert found is not None
    assert found["status"]["phase"] == "Completed", found["status"]
    return name


def set_up(servers: Servers, seaweed: SeaweedFS, schedule: str) -> tuple[dict[str, Any], str]:
    ensure_bucket(seaweed, BUCKET)
    instance_with_kubeconfig(servers.local, servers.source.server, schedule)
    made = servers.local.create(
        "backupschedules", schedule_object(schedule, seaweed.endpoint, {"interval": INTERVAL})
    )
    return made, completed_backup(servers, schedule, seaweed.endpoint)


async def drill_step(servers: Servers, clock: Clock, endpoint: str, schedule: str) -> None:
    cluster = await Cluster.from_kubeconfig(yaml.safe_load(servers.local.server.kubeconfig))
    try:
        targets = BackupReconciler(cluster, endpoints=operator_allows(endpoint)).instance_target
        reconciler = DrillReconciler(
            cluster, targets, clock=clock, endpoints=operator_allows(endpoint)
        )
        await reconciler.reconcile(NAMESPACE, schedule)
    finally:
        await cluster.close()


def play_the_provider(
    servers: Servers, throwaway: dict[str, Any], backup: str, endpoint: str
) -> Kube:
    """What the provider and the Space do for the throwaway Instance: a restored control plane."""
    target = servers.fresh()
    # Crossplane's package manager makes the CRDs in a new control plane.
    target.extensions.create_custom_resource_definition(copy.deepcopy(PROVIDER_CRD))

    async def restore() -> None:
        local = await Cluster.from_kubeconfig(yaml.safe_load(servers.local.server.kubeconfig))
        try:
            await Restorer(local, crd_timeout=60, endpoints=operator_allows(endpoint)).restore(
                NAMESPACE, backup, yaml.safe_load(target.server.kubeconfig)
            )
        finally:
            await local.close()

    asyncio.run(restore())
    write_connection_secret(servers.local, throwaway, target.server.kubeconfig)
    servers.local.custom.patch_namespaced_custom_object_status(
        "controlplane.spaces.upbound.io",
        "v1alpha1",
        NAMESPACE,
        "instances",
        throwaway["metadata"]["name"],
        {"status": {"atProvider": {"restore": {"phase": "Completed", "backupName": backup}}}},
    )
    return target


def throwaway_of(servers: Servers, schedule: str) -> dict[str, Any] | None:
    found = servers.local.custom.list_namespaced_custom_object(
        "controlplane.spaces.upbound.io",
        "v1alpha1",
        NAMESPACE,
        "instances",
        label_selector=f"{drills.DRILL_OF}={schedule}",
    )["items"]
    return dict(found[0]) if found else None


def gauge(name: str, schedule: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"namespace": NAMESPACE, "name": schedule})


@pytest.mark.parametrize(
    ("schedule", "drift", "passes", "reason"),
    [
        ("drill-good", False, True, "a control plane restored whole holds every promise"),
        (
            "drill-drifted",
            True,
            False,
            "a ConfigMap gone and a managed resource unpaused after the restore fail it, named",
        ),
    ],
)
def test_a_drill_restores_the_newest_backup_checks_it_and_deletes_the_throwaway_plane(
    servers: Servers,
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
    schedule: str,
    drift: bool,
    passes: bool,
    reason: str,
) -> None:
    seaweed.configure(monkeypatch)
    _, backup = set_up(servers, seaweed, schedule)
    clock = Clock(datetime.now(UTC))

    asyncio.run(drill_step(servers, clock, seaweed.endpoint, schedule))

    throwaway = throwaway_of(servers, schedule)
    assert throwaway is not None, "a due drill creates its throwaway Instance"
    assert throwaway["spec"]["forProvider"]["initialRestorationFrom"] == {
        "backupRef": {"name": backup}
    }
    running = servers.local.get("backupschedules", NAMESPACE, schedule)
    assert condition(running, "Verified")["reason"] == drills.RUNNING
    source_secret = servers.local.secret(NAMESPACE, f"{schedule}-kubeconfig")

    target = play_the_provider(servers, throwaway, backup, seaweed.endpoint)
    if drift:
        target.core.delete_namespaced_config_map("config-1", APP)
        target.patch(
            "buckets",
            APP,
            "bucket-0",
            {"metadata": {"annotations": {"crossplane.io/paused": None}}},
            "s3.example.org",
            "v1",
        )
        # At the deadline a check that still fails ends the drill.
        clock.now += DEADLINE - timedelta(seconds=10)
    asyncio.run(drill_step(servers, clock, seaweed.endpoint, schedule))

    assert throwaway_of(servers, schedule) is None, "the throwaway Instance goes, " + reason
    found = servers.local.get("backupschedules", NAMESPACE, schedule)
    assert found is not None
    verified = condition(found, "Verified")
    if passes:
        assert verified["status"] == "True", verified
        assert found["status"]["lastVerifiedBackup"] == backup
        assert verified["message"] == (
            f"Backup {backup} restored into a throwaway control plane: 7 objects present, "
            "1 CRDs Established, 0 packages Installed and Healthy, 2 managed resources paused "
            "as in the archive"
        )
        assert gauge("controlplane_backup_last_verified_timestamp_seconds", schedule)
        assert gauge("controlplane_backup_last_drill_failed", schedule) == 0
    else:
        assert verified["status"] == "False", verified
        assert "lastVerifiedBackup" not in found["status"]
        assert verified["message"] == (
            f"Backup {backup} restored but failed its check: 1 of 7 objects of the archive are "
            "not in the control plane: ConfigMap app/config-1; 1 managed resources are not "
            "paused as in the archive: Bucket app/bucket-0 is not paused (it was paused in the "
            "archive)"
        )
        assert gauge("controlplane_backup_last_verified_timestamp_seconds", schedule) is None
        assert gauge("controlplane_backup_last_drill_failed", schedule) == 1
    # The drill never touched the source: its connection secret is as it was.
    assert servers.local.secret(NAMESPACE, f"{schedule}-kubeconfig") == source_secret
    assert found["status"]["lastDrillTime"]


def test_a_controller_killed_mid_drill_leaves_no_throwaway_plane_past_its_deadline(
    servers: Servers, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seaweed.configure(monkeypatch)
    schedule = "drill-killed"
    ensure_bucket(seaweed, BUCKET)
    instance_with_kubeconfig(servers.local, servers.source.server, schedule)
    servers.local.create(
        "backupschedules",
        schedule_object(schedule, seaweed.endpoint, {"interval": "1h", "deadline": "20s"}),
    )
    completed_backup(servers, schedule, seaweed.endpoint)

    def controller(log: str) -> ProviderProcess:
        return ProviderProcess(
            servers.local.server.kubeconfig_path,
            tmp_path / log,
            "--allowed-s3-endpoint",
            seaweed.endpoint,
            command="controlplane-backup-controller",
        ).start()

    first = controller("first.log")
    try:
        throwaway = wait_for(
            "the drill's throwaway Instance", partial(throwaway_of, servers, schedule)
        )
    finally:
        # Killed: no chance to clean up. No provider runs here, so the restore never ends.
        first.kill()
    deadline = throwaway["metadata"]["annotations"][drills.DRILL_DEADLINE]
    assert throwaway_of(servers, schedule) is not None, "killed, the controller deleted nothing"

    second = controller("second.log")
    try:
        wait_for(
            "the throwaway Instance deleted by its deadline",
            lambda: throwaway_of(servers, schedule) is None,
            timeout=60,
        )
        found = servers.local.get("backupschedules", NAMESPACE, schedule)
        assert condition(found, "Verified")["reason"] == drills.DEADLINE_EXCEEDED, deadline
    finally:
        assert second.stop() == 0
