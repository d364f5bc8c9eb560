"""``storage.assumeRoleWith`` on a real API server: the CRDs' enum and default, carried along.

The function renders it into the BackupSchedule from the trust mode; the
schedule's Backups must carry it to the writer unchanged, and objects made
before the field existed keep chaining with AssumeRole.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest
from kubernetes.client.exceptions import ApiException

from provider.backup.controllers.backups import storage_spec
from sandbox.spaces import Kube
from tests.backup.test_schedule import Clock, backups, next_half_hour, reconcile, schedule


@dataclass(frozen=True)
class Carried:
    reason: str
    # What the schedule is given after it is made without one; empty: nothing.
    given: str
    want: str


CARRIED = [
    Carried(
        "a schedule made before the field chains with AssumeRole, and so do its Backups",
        "",
        "AssumeRole",
    ),
    Carried(
        "WebIdentity, as the function renders it for irsa trust, reaches the writer",
        "WebIdentity",
        "WebIdentity",
    ),
]


@pytest.mark.parametrize("case", CARRIED, ids=lambda case: case.reason)
def test_the_schedules_backups_carry_assume_role_with_to_the_writer(
    case: Carried, local: Kube
) -> None:
    namespace, name, created = schedule(local, "*/30 * * * *")
    if case.given:
        given = {"spec": {"storage": {"assumeRoleWith": case.given}}}
        local.patch("backupschedules", namespace, name, given)
    found = local.get("backupschedules", namespace, name)
    assert found is not None
    assert found["spec"]["storage"]["assumeRoleWith"] == case.want

    reconcile(local, Clock(next_half_hour(created) + timedelta(seconds=5)), namespace)

    (backup,) = backups(local, namespace)
    storage = backup["spec"]["storage"]
    assert storage["assumeRoleWith"] == case.want
    assert storage_spec(storage, namespace).assume_role_with == case.want


def test_a_way_in_the_writer_does_not_know_is_refused_by_the_api_server(local: Kube) -> None:
    namespace, name, _ = schedule(local, "*/30 * * * *")
    magic = {"spec": {"storage": {"assumeRoleWith": "Magic"}}}
    with pytest.raises(ApiException) as refused:
        local.patch("backupschedules", namespace, name, magic)
    assert refused.value.status == 422
    assert "spec.storage.assumeRoleWith" in str(refused.value.body)
