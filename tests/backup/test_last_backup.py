"""What a BackupSchedule says of its newest finished Backup: the LastBackup condition."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from function import observed
from provider import kube
from provider.backup.controllers import backups, last_backup
from provider.backup.controllers.last_backup import LastBackup
from provider.backup.source import connection_secret, export
from provider.runtime import metrics

NAME = "myctp-20261202060000"


def backup(phase: str, *conditions: dict[str, Any], completed_at: str = "") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": list(conditions)}
    if completed_at:
        status["completedAt"] = completed_at
    return {"metadata": {"name": NAME}, "status": status}


def failed(reason: str, message: str = "") -> dict[str, Any]:
    found = {"type": "Failed", "status": "True", "reason": reason}
    if message:
        found["message"] = message
    return found


@dataclass(frozen=True)
class LastBackupCase:
    reason: str
    backup: dict[str, Any] | None
    want: LastBackup


LAST_BACKUP_CASES = [
    LastBackupCase(
        "Before any Backup has finished, nothing is known.",
        None,
        LastBackup("Unknown", "NoBackupYet", "no Backup of this schedule has finished yet"),
    ),
    LastBackupCase(
        "A Completed Backup is named, with when it completed.",
        backup("Completed", completed_at="2026-12-02T06:00:41Z"),
        LastBackup(
            "True", "BackupCompleted", f"Backup {NAME} completed at 2026-12-02T06:00:41Z", NAME
        ),
    ),
    LastBackupCase(
        "A Failed Backup is named with its own reason and message.",
        backup(
            "Failed",
            failed("BackupFailed", "put s3://b/k failed: AccessDenied (HTTP 403, PutObject)"),
        ),
        LastBackup(
            "False",
            "BackupFailed",
            f"Backup {NAME} failed: put s3://b/k failed: AccessDenied (HTTP 403, PutObject)",
            NAME,
        ),
    ),
    LastBackupCase(
        "A refusal keeps the rule it was refused by as its reason.",
        backup("Failed", failed("StorageRefused", "spec.storage.roleArn: ... is off")),
        LastBackup(
            "False",
            "StorageRefused",
            f"Backup {NAME} failed: spec.storage.roleArn: ... is off",
            NAME,
        ),
    ),
    LastBackupCase(
        "A Failed Backup without a message is told by its reason.",
        backup("Failed", failed("DeadlineExceeded")),
        LastBackup("False", "DeadlineExceeded", f"Backup {NAME} failed: DeadlineExceeded", NAME),
    ),
    LastBackupCase(
        "A Failed Backup whose reason is not a condition reason gets the generic one.",
        backup("Failed", failed("not a reason!", "boom")),
        LastBackup("False", "BackupFailed", f"Backup {NAME} failed: boom", NAME),
    ),
    LastBackupCase(
        "A Failed Backup with no Failed condition at all still fails the schedule.",
        backup("Failed"),
        LastBackup("False", "BackupFailed", f"Backup {NAME} failed: BackupFailed", NAME),
    ),
]


@pytest.mark.parametrize("case", LAST_BACKUP_CASES, ids=lambda case: case.reason)
def test_the_schedule_says_how_its_newest_finished_backup_went(case: LastBackupCase) -> None:
    assert last_backup.of(case.backup) == case.want


def test_a_long_message_is_cut_to_one_bounded_line() -> None:
    found = last_backup.of(backup("Failed", failed("BackupFailed", "a\nb " + "x" * 4000)))
    assert len(found.message) == last_backup.MESSAGE_LIMIT
    assert found.message.startswith(f"Backup {NAME} failed: a b xx")
    assert found.message.endswith("…")


def test_every_reason_a_backup_fails_with_is_a_metrics_reason() -> None:
    # The Backup controller's Failed reasons, each from where it is written.
    written = {
        last_backup.BACKUP_FAILED,
        backups.STORAGE_REFUSED,
        backups.INVALID_SPEC,
        backups.DEADLINE_EXCEEDED,
        connection_secret.KUBECONFIG_NOT_ALLOWED,
        connection_secret.CONTROL_PLANE_HOST_NOT_ALLOWED,
        export.TOO_MANY_OBJECTS,
        export.TOO_MANY_TYPES,
        kube.TOO_MANY_PAGES,
        kube.RESPONSE_TOO_LARGE,
    }
    assert written == metrics.BACKUP_FAILURE_REASONS


def test_the_function_reads_the_condition_the_schedule_writes() -> None:
    # The function and the provider never import each other: this holds them together.
    assert observed.LAST_BACKUP == last_backup.LAST_BACKUP
    assert (last_backup.LAST_BACKUP, "False") in observed.FAILURE_CONDITIONS
