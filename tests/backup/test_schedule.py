"""BackupSchedules against a real API server, under a clock the test drives."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from provider.backup.controllers.backups import SCHEDULE_LABEL, BackupReconciler
from provider.backup.controllers.retention import DeletionPolicy
from provider.backup.controllers.schedules import INSTANCE_LABEL, ScheduleReconciler, backup_of
from provider.kube import Cluster
from provider.runtime import metrics
from sandbox.apiserver import APIServerFactory, Etcd
from sandbox.spaces import Kube, condition
from tests.backup.test_roundtrip import BACKUP_CRDS

_names = itertools.count()


class Clock:
    """The time the schedule runs by; the test moves it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(scope="module")
def local(kube_etcd: Etcd) -> Iterator[Kube]:
    with APIServerFactory(kube_etcd) as factory:
        kube = Kube(factory(name="schedules"))
        kube.apply_crds(BACKUP_CRDS)
        yield kube


def schedule(
    local: Kube,
    cron: str,
    *,
    suspend: bool = False,
    ttl: str = "1h",
    excluded: tuple[str, ...] = (),
) -> tuple[str, str, datetime]:
    namespace = f"sched-{next(_names)}"
    local.namespace(namespace)
    spec: dict[str, Any] = {
        "instanceRef": {"name": "myctp"},
        "schedule": cron,
        "ttl": ttl,
        "suspend": suspend,
        "storage": {"bucket": "b", "prefix": f"{namespace}/myctp/", "region": "us-east-1"},
    }
    if excluded:
        spec["excludedResources"] = list(excluded)
    created = local.create(
        "backupschedules",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "BackupSchedule",
            "metadata": {"name": "myctp", "namespace": namespace},
            "spec": spec,
        },
    )
    stamp = datetime.fromisoformat(created["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    return namespace, "myctp", stamp


def reconcile(local: Kube, clock: Clock, namespace: str, name: str = "myctp") -> float | None:
    async def run() -> float | None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
        try:
            result = await ScheduleReconciler(cluster, clock=clock).reconcile(namespace, name)
            return result.requeue_after
        finally:
            await cluster.close()

    return asyncio.run(run())


def backups(local: Kube, namespace: str) -> list[dict[str, Any]]:
    return sorted(
        local.list_of("backups", namespace, "controlplane.spaces.upbound.io", "v1alpha1"),
        key=lambda b: b["metadata"]["name"],
    )


def next_half_hour(moment: datetime) -> datetime:
    base = moment.replace(second=0, microsecond=0)
    minutes = 30 - base.minute % 30
    return base + timedelta(minutes=minutes)


def test_a_schedule_fires_on_time_once_per_firing(local: Kube) -> None:
    namespace, name, created = schedule(local, "*/30 * * * *")
    first = next_half_hour(created)
    clock = Clock(first - timedelta(minutes=1))
    wait = reconcile(local, clock, namespace)
    assert backups(local, namespace) == []
    assert wait is not None and 0 < wait <= 60
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    assert found["status"]["nextScheduleTime"] == first.strftime("%Y-%m-%dT%H:%M:%SZ")

    clock.now = first + timedelta(seconds=5)
    reconcile(local, clock, namespace)
    reconcile(local, clock, namespace)
    made = backups(local, namespace)
    assert [b["metadata"]["name"] for b in made] == [f"myctp-{first:%Y%m%d%H%M%S}"]
    backup = made[0]
    assert backup["metadata"]["labels"][SCHEDULE_LABEL] == "myctp"
    assert backup["metadata"]["labels"][INSTANCE_LABEL] == "myctp"
    assert backup["metadata"]["ownerReferences"][0]["kind"] == "BackupSchedule"
    assert backup["spec"]["storage"]["prefix"] == f"{namespace}/myctp/"

    clock.now = first + timedelta(minutes=29)
    reconcile(local, clock, namespace)
    assert len(backups(local, namespace)) == 1
    clock.now = first + timedelta(minutes=30)
    reconcile(local, clock, namespace)
    assert len(backups(local, namespace)) == 2
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    assert found["status"]["lastBackup"] == f"myctp-{first + timedelta(minutes=30):%Y%m%d%H%M%S}"


def test_a_restarted_controller_never_runs_the_same_firing_twice(local: Kube) -> None:
    namespace, name, created = schedule(local, "*/30 * * * *")
    due = next_half_hour(created)
    clock = Clock(due + timedelta(seconds=1))
    reconcile(local, clock, namespace)
    # The controller died before its status write landed: the schedule does not
    # know it acted on this firing.
    local.custom.patch_namespaced_custom_object_status(
        "controlplane.spaces.upbound.io",
        "v1alpha1",
        namespace,
        "backupschedules",
        name,
        {"status": {"lastScheduleTime": None, "lastBackup": None}},
    )
    reconcile(local, clock, namespace)
    assert len(backups(local, namespace)) == 1


def test_expired_backups_are_pruned_and_running_ones_kept(local: Kube) -> None:
    namespace, _, created = schedule(local, "*/30 * * * *", ttl="1h")
    first = next_half_hour(created)
    clock = Clock(first)
    reconcile(local, clock, namespace)
    clock.now = first + timedelta(minutes=30)
    reconcile(local, clock, namespace)
    old, young = backups(local, namespace)
    for backup, phase in ((old, "Completed"), (young, "InProgress")):
        status: dict[str, Any] = {"phase": phase}
        if phase == "Completed":
            status["completedAt"] = (first + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        local.custom.patch_namespaced_custom_object_status(
            "controlplane.spaces.upbound.io",
            "v1alpha1",
            namespace,
            "backups",
            backup["metadata"]["name"],
            {"status": status},
        )
    clock.now = first + timedelta(minutes=61)
    reconcile(local, clock, namespace)
    names = [b["metadata"]["name"] for b in backups(local, namespace)]
    assert old["metadata"]["name"] not in names
    assert young["metadata"]["name"] in names


def test_a_suspended_schedule_makes_nothing(local: Kube) -> None:
    namespace, name, created = schedule(local, "*/30 * * * *", suspend=True)
    clock = Clock(next_half_hour(created) + timedelta(minutes=1))
    reconcile(local, clock, namespace)
    assert backups(local, namespace) == []
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    assert "nextScheduleTime" not in found["status"]
    assert condition(found, "Ready")["reason"] == "Suspended"


def test_a_schedule_that_never_fires_is_reported_not_retried(local: Kube) -> None:
    namespace, name, created = schedule(local, "0 0 31 2 *")
    clock = Clock(created + timedelta(days=400))
    assert reconcile(local, clock, namespace) is None
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    ready = condition(found, "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSchedule")
    assert backups(local, namespace) == []


def test_an_every_schedule_fires_at_the_multiples_of_its_interval_and_passes_on_exclusions(
    local: Kube,
) -> None:
    excluded = ("caches.example.org", "configmaps")
    namespace, _, created = schedule(local, "@every 30m", excluded=excluded)
    # @every 30m fires at the multiples of 30 minutes since the epoch: :00 and :30.
    first = next_half_hour(created)
    clock = Clock(first + timedelta(seconds=5))
    reconcile(local, clock, namespace)
    made = backups(local, namespace)
    assert [b["metadata"]["name"] for b in made] == [f"myctp-{first:%Y%m%d%H%M%S}"]
    assert made[0]["spec"]["excludedResources"] == list(excluded)


@dataclass(frozen=True)
class InstanceLabelCase:
    reason: str
    instance: str
    want: str | None


INSTANCE_LABEL_CASES = [
    InstanceLabelCase(
        "A Backup names the Instance it holds, not its schedule, so a control plane's "
        "Backups are found whatever its schedule is called.",
        "team-ctp",
        "team-ctp",
    ),
    InstanceLabelCase(
        "An Instance name of 63 characters is a label value.",
        "c" * 63,
        "c" * 63,
    ),
    InstanceLabelCase(
        "An Instance name longer than a label value may be leaves the label off, rather "
        "than making a Backup the API server refuses.",
        "c" * 64,
        None,
    ),
]


@pytest.mark.parametrize("case", INSTANCE_LABEL_CASES, ids=lambda case: case.reason)
def test_every_backup_a_schedule_makes_is_labelled_with_its_instance(
    case: InstanceLabelCase,
) -> None:
    held = {
        "metadata": {"name": "nightly", "namespace": "team-a"},
        "spec": {"instanceRef": {"name": case.instance}, "storage": {"bucket": "b"}},
    }
    made = backup_of(
        held,
        "nightly-1",
        labels={SCHEDULE_LABEL: "nightly"},
        annotations={},
        policy=DeletionPolicy.DELETE,
        expires=True,
    )
    assert made["metadata"]["labels"].get(INSTANCE_LABEL) == case.want
    assert made["metadata"]["labels"][SCHEDULE_LABEL] == "nightly"


def _finish(local: Kube, namespace: str, backup: str, phase: str, at: datetime) -> None:
    """Write what the Backup controller writes when ``backup`` finished as ``phase``."""
    status: dict[str, Any] = {
        "phase": phase,
        "completedAt": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "conditions": [
            {
                "type": phase,
                "status": "True",
                "reason": "BackupFailed" if phase == "Failed" else "BackupCompleted",
                "message": "assume role arn:aws:iam::123456789012:role/r with web identity "
                "for s3://b failed: AccessDenied (HTTP 403, AssumeRoleWithWebIdentity)"
                if phase == "Failed"
                else "12 objects",
                "lastTransitionTime": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ],
    }
    group, version = "controlplane.spaces.upbound.io", "v1alpha1"
    local.custom.patch_namespaced_custom_object_status(
        group, version, namespace, "backups", backup, {"status": status}
    )


def _metric(name: str, namespace: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(name, {"namespace": namespace, "name": "myctp"})


def test_a_failed_backup_fails_the_schedule_until_a_later_one_completes(local: Kube) -> None:
    namespace, name, created = schedule(local, "*/30 * * * *")
    first = next_half_hour(created)
    clock = Clock(first + timedelta(seconds=5))
    reconcile(local, clock, namespace)
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    unknown = condition(found, "LastBackup")
    assert (unknown["status"], unknown["reason"]) == ("Unknown", "NoBackupYet")
    (made,) = backups(local, namespace)
    failed_name = made["metadata"]["name"]

    _finish(local, namespace, failed_name, "Failed", first + timedelta(seconds=30))
    clock.now = first + timedelta(minutes=1)
    reconcile(local, clock, namespace)
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    last, ready = condition(found, "LastBackup"), condition(found, "Ready")
    assert (last["status"], last["reason"]) == ("False", "BackupFailed")
    assert last["message"].startswith(f"Backup {failed_name} failed: assume role ")
    assert "AccessDenied" in last["message"]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "LastBackupFailed",
        last["message"],
    )
    assert _metric("controlplane_backup_last_backup_failed", namespace) == 1
    assert _metric("controlplane_backup_last_success_timestamp_seconds", namespace) is None
    told = [e for e in local.events(namespace, name) if e["reason"] == "BackupFailed"]
    assert [e["message"] for e in told] == [last["message"]]

    # Looked at again, nothing changed: no status write, no second event.
    version = found["metadata"]["resourceVersion"]
    reconcile(local, clock, namespace)
    again = local.get("backupschedules", namespace, name)
    assert again is not None
    assert again["metadata"]["resourceVersion"] == version
    assert len([e for e in local.events(namespace, name) if e["reason"] == "BackupFailed"]) == 1

    # The next Backup is running: the failure stands until it completes.
    clock.now = first + timedelta(minutes=30, seconds=5)
    reconcile(local, clock, namespace)
    later = next(b for b in backups(local, namespace) if b["metadata"]["name"] != failed_name)
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    assert condition(found, "LastBackup")["status"] == "False"

    completed_at = first + timedelta(minutes=30, seconds=40)
    _finish(local, namespace, later["metadata"]["name"], "Completed", completed_at)
    clock.now = first + timedelta(minutes=31)
    reconcile(local, clock, namespace)
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    last, ready = condition(found, "LastBackup"), condition(found, "Ready")
    assert (last["status"], last["reason"]) == ("True", "BackupCompleted")
    assert last["message"] == (
        f"Backup {later['metadata']['name']} completed at {completed_at:%Y-%m-%dT%H:%M:%SZ}"
    )
    assert (ready["status"], ready["reason"]) == ("True", "Scheduled")
    assert _metric("controlplane_backup_last_backup_failed", namespace) == 0
    assert _metric("controlplane_backup_last_success_timestamp_seconds", namespace) == (
        completed_at.timestamp()
    )


def test_a_schedule_that_is_gone_takes_its_series_along(local: Kube) -> None:
    namespace = "sched-gone"
    metrics.record_backup_schedule(namespace, "myctp", last_success=1.0, last_failed=True)
    metrics.count_backup_failure(namespace, "myctp", "BackupFailed")
    reconcile(local, Clock(datetime.now(UTC)), namespace)
    assert _metric("controlplane_backup_last_backup_failed", namespace) is None
    assert _metric("controlplane_backup_last_success_timestamp_seconds", namespace) is None
    failures = metrics.REGISTRY.get_sample_value(
        "controlplane_backup_failures_total",
        {"namespace": namespace, "name": "myctp", "reason": "BackupFailed"},
    )
    assert failures is None


def test_a_backup_of_a_schedule_that_fails_is_counted_against_it_by_its_reason(
    local: Kube,
) -> None:
    namespace = f"sched-{next(_names)}"
    local.namespace(namespace)
    labels = {"namespace": namespace, "name": "nightly", "reason": "StorageRefused"}
    for name, schedule_label in (("by-schedule", {SCHEDULE_LABEL: "nightly"}), ("by-hand", {})):
        local.create(
            "backups",
            {
                "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
                "kind": "Backup",
                "metadata": {"name": name, "namespace": namespace, "labels": schedule_label},
                "spec": {
                    "instanceRef": {"name": "myctp"},
                    # Another namespace's prefix: refused before anything is read.
                    "storage": {"bucket": "b", "prefix": "team-other/myctp/"},
                },
            },
        )

        async def run(name: str = name) -> None:
            cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
            try:
                await BackupReconciler(cluster).reconcile(namespace, name)
            finally:
                await cluster.close()

        asyncio.run(run())
        found = local.get("backups", namespace, name)
        assert found is not None
        assert found["status"]["phase"] == "Failed"
    counted = metrics.REGISTRY.get_sample_value("controlplane_backup_failures_total", labels)
    # Only the schedule's Backup: one made by hand belongs to no schedule.
    assert counted == 1
