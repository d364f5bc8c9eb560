"""A Backup's deletionPolicy and ttl, against a real API server and SeaweedFS.

The Backup controller's reconciler runs under a clock the test drives: a
Backup expires when the clock passes its ttl, with no waiting in real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from provider.backup.controllers.backups import ARCHIVE_FINALIZER, BackupReconciler
from provider.backup.storage.s3 import StorageSpec, Store
from provider.kube import Cluster
from provider.managed.reconciler import Result
from sandbox.s3 import SeaweedFS
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

INSTANCE = "retained"
STARTED = datetime(2026, 12, 4, 6, 0, tzinfo=UTC)


class Clock:
    """The time the controller runs by; the test moves it."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Team:
    planes: Planes
    s3: SeaweedFS
    clock: Clock

    def store(self) -> Store:
        return Store.connect(StorageSpec(BUCKET, "us-east-1", endpoint=self.s3.endpoint))

    def create(self, name: str, spec: dict[str, Any], prefix: str = "team-a/retained/") -> None:
        body = backup_object(name, INSTANCE, self.s3.endpoint, prefix=prefix)
        body["spec"].pop("ttl")
        body["spec"].update(spec)
        self.planes.local.create("backups", body)

    def reconcile(self, name: str) -> Result:
        async def run() -> Result:
            cluster = await Cluster.from_kubeconfig(
                yaml.safe_load(self.planes.local.server.kubeconfig)
            )
            try:
                return await BackupReconciler(
                    cluster, clock=self.clock, endpoints=operator_allows(self.s3.endpoint)
                ).reconcile(NAMESPACE, name)
            finally:
                await cluster.close()

        return asyncio.run(run())

    def get(self, name: str) -> dict[str, Any] | None:
        return self.planes.local.get("backups", NAMESPACE, name)

    def delete(self, name: str) -> None:
        self.planes.local.custom.delete_namespaced_custom_object(
            "controlplane.spaces.upbound.io", "v1alpha1", NAMESPACE, "backups", name
        )

    def reasons(self, name: str) -> list[str]:
        return [event["reason"] for event in self.planes.local.events(NAMESPACE, name)]


@pytest.fixture
def team(planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch) -> Iterator[Team]:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    if planes.local.get("instances", NAMESPACE, INSTANCE) is None:
        instance_with_kubeconfig(planes.local, planes.source.server, INSTANCE)
    yield Team(planes, seaweed, Clock(STARTED))


@dataclass(frozen=True)
class DeletionCase:
    reason: str
    spec: dict[str, Any]
    archive_kept: bool
    finalizer: bool


DELETION_CASES = [
    DeletionCase(
        "A Backup made by hand, with no policy, is Orphan: its archive stays in S3.",
        {},
        archive_kept=True,
        finalizer=False,
    ),
    DeletionCase(
        "A Backup made by hand with deletionPolicy Orphan keeps its archive.",
        {"deletionPolicy": "Orphan"},
        archive_kept=True,
        finalizer=False,
    ),
    DeletionCase(
        "A Backup with deletionPolicy Delete holds a finalizer and takes its archive along.",
        {"deletionPolicy": "Delete"},
        archive_kept=False,
        finalizer=True,
    ),
]


@pytest.mark.parametrize("case", DELETION_CASES, ids=lambda case: case.reason)
def test_deleting_a_backup_keeps_or_deletes_its_archive_as_its_policy_says(
    case: DeletionCase, team: Team
) -> None:
    name = fresh_name("policy")
    team.create(name, case.spec)
    assert team.reconcile(name) == Result()
    done = team.get(name)
    assert done is not None
    assert done["status"]["phase"] == "Completed", done["status"]
    key = done["status"]["location"]["key"]
    assert team.store().exists(key)
    assert (ARCHIVE_FINALIZER in (done["metadata"].get("finalizers") or [])) is case.finalizer

    team.delete(name)
    if case.finalizer:
        assert team.get(name) is not None  # held until the archive is gone
        assert team.reconcile(name) == Result()
    assert team.get(name) is None
    assert team.store().exists(key) is case.archive_kept


@dataclass(frozen=True)
class ExpiryCase:
    reason: str
    spec: dict[str, Any]
    phase: str
    prefix: str = "team-a/retained/"


EXPIRY_CASES = [
    ExpiryCase(
        "An Orphan Backup with a ttl goes with its archive once the ttl has passed.",
        {"ttl": "1m"},
        "Completed",
    ),
    ExpiryCase(
        "A Delete Backup with a ttl goes with its archive once the ttl has passed.",
        {"ttl": "1m", "deletionPolicy": "Delete"},
        "Completed",
    ),
    ExpiryCase(
        "A Backup that failed (no archive) goes once the ttl has passed since it failed.",
        {"ttl": "1m"},
        "Failed",
        prefix="team-b/retained/",
    ),
]


@pytest.mark.parametrize("case", EXPIRY_CASES, ids=lambda case: case.reason)
def test_a_backup_is_looked_at_again_at_its_expiry_and_then_deleted_with_its_archive(
    case: ExpiryCase, team: Team
) -> None:
    name = fresh_name("ttl")
    team.create(name, case.spec, prefix=case.prefix)

    # Finished: the controller asks to come back exactly when the ttl has passed.
    assert team.reconcile(name) == Result(requeue_after=60.0)
    done = team.get(name)
    assert done is not None
    assert done["status"]["phase"] == case.phase, done["status"]
    key = (done["status"].get("location") or {}).get("key")
    if key:
        assert team.store().exists(key)

    # Early, it waits for what is left, and keeps everything.
    team.clock.now = STARTED + timedelta(seconds=45)
    assert team.reconcile(name) == Result(requeue_after=15.0)
    assert team.get(name) is not None

    team.clock.now = STARTED + timedelta(minutes=1)
    assert team.reconcile(name) == Result()
    if case.spec.get("deletionPolicy") == "Delete":
        assert team.reconcile(name) == Result()  # the finalizer's turn, as the watch would call
    assert team.get(name) is None
    assert "BackupExpired" in team.reasons(name)
    if key:
        assert not team.store().exists(key)


@dataclass(frozen=True)
class RefusedCase:
    reason: str
    spec: dict[str, Any]
    field: str


REFUSED_CASES = [
    RefusedCase(
        "A policy other than Orphan or Delete (such as Retain) is refused.",
        {"deletionPolicy": "Retain"},
        "spec.deletionPolicy",
    ),
    RefusedCase("A ttl that is not a Go duration is refused.", {"ttl": "7d"}, "spec.ttl"),
]


@pytest.mark.parametrize("case", REFUSED_CASES, ids=lambda case: case.reason)
def test_the_api_server_refuses_a_bad_policy_or_ttl_naming_the_field(
    case: RefusedCase, team: Team
) -> None:
    name = fresh_name("refused")
    with pytest.raises(ApiException) as refused:
        team.create(name, case.spec)
    assert refused.value.status == 422
    assert case.field in str(refused.value.body)
    assert team.get(name) is None


def test_a_backups_policy_cannot_change_once_made(team: Team) -> None:
    """Like Spaces', the spec is immutable: keeping a Delete Backup's archive is the Retain mark."""
    name = fresh_name("immutable")
    team.create(name, {"deletionPolicy": "Delete"})
    with pytest.raises(ApiException) as refused:
        team.planes.local.patch("backups", NAMESPACE, name, {"spec": {"deletionPolicy": "Orphan"}})
    assert refused.value.status == 422
    assert "spec is immutable" in str(refused.value.body)
