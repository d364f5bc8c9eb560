"""``storage.assumeRoleWith`` on a real API server: the CRDs' enum and default, carried along.

The function renders it into the BackupSchedule from the trust mode; the
schedule's Backups must carry it to the writer unchanged, and objects made
before the field existed keep chaining with AssumeRole.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from provider.backup.backups import storage_spec
from sandbox.apiserver import APIServerFactory, Etcd
from sandbox.spaces import Kube
from tests.backup.test_roundtrip import BACKUP_CRDS
from tests.backup.test_schedule import Clock, backups, next_half_hour, reconcile

_names = itertools.count()
ROLE = "arn:aws:iam::123456789012:role/team-a-myctp-backup"


@pytest.fixture(scope="module")
def local(kube_etcd: Etcd) -> Iterator[Kube]:
    with APIServerFactory(kube_etcd) as factory:
        kube = Kube(factory(name="assume-role-with"))
        kube.apply_crds(BACKUP_CRDS)
        yield kube


def schedule(local: Kube, storage: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    namespace = f"assume-{next(_names)}"
    local.namespace(namespace)
    created = local.create(
        "backupschedules",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "BackupSchedule",
            "metadata": {"name": "myctp", "namespace": namespace},
            "spec": {
                "instanceRef": {"name": "myctp"},
                "schedule": "*/30 * * * *",
                "ttl": "1h",
                "storage": {
                    "bucket": "b",
                    "prefix": f"{namespace}/myctp/",
                    "roleArn": ROLE,
                    **storage,
                },
            },
        },
    )
    return namespace, created


@dataclass(frozen=True)
class Carried:
    reason: str
    storage: dict[str, Any]
    want: str


CARRIED = [
    Carried(
        "a schedule made before the field chains with AssumeRole, and so do its Backups",
        {},
        "AssumeRole",
    ),
    Carried(
        "WebIdentity, as the function renders it for irsa trust, reaches the writer",
        {"assumeRoleWith": "WebIdentity"},
        "WebIdentity",
    ),
]


@pytest.mark.parametrize("case", CARRIED, ids=lambda case: case.reason)
def test_the_schedules_backups_carry_assume_role_with_to_the_writer(
    case: Carried, local: Kube
) -> None:
    namespace, created = schedule(local, case.storage)
    assert created["spec"]["storage"]["assumeRoleWith"] == case.want
    stamp = datetime.fromisoformat(created["metadata"]["creationTimestamp"].replace("Z", "+00:00"))
    clock = Clock(next_half_hour(stamp) + timedelta(seconds=5))
    reconcile(local, clock, namespace)

    (backup,) = backups(local, namespace)
    storage = backup["spec"]["storage"]
    assert storage["assumeRoleWith"] == case.want
    assert storage_spec(storage, namespace).assume_role_with == case.want


def test_a_way_in_the_writer_does_not_know_is_refused_by_the_api_server(local: Kube) -> None:
    with pytest.raises(ApiException) as refused:
        schedule(local, {"assumeRoleWith": "Magic"})
    assert refused.value.status == 422
    assert "spec.storage.assumeRoleWith" in str(refused.value.body)
