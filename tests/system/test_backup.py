"""The team's backups: the schedule fires, the archive lands in S3 under the team's role, a
second ControlPlane is restored from it."""

from __future__ import annotations

import hashlib
import io
from typing import Any

import pytest

from provider.backup.format import archive
from provider.backup.storage.s3 import StorageSpec, Store
from sandbox.platform import Platform
from sandbox.s3 import use_credentials
from sandbox.spaces import condition, wait_for

from .helpers import (
    APP_NAMESPACE,
    UP_DEADLINE,
    XR,
    Team,
    configmap_value,
    create,
    hosted_name,
    is_true,
    wait_ready,
)

BACKUP = ("controlplane.spaces.upbound.io", "v1alpha1", "backups")
# The schedule fires every minute. The first firing after the team is Ready may
# fall in the second it turned Ready, and then the next one is awaited.
FIRST_BACKUP_DEADLINE = 210.0


def completed_backups(platform: Platform, namespace: str) -> list[dict[str, Any]]:
    group, version, plural = BACKUP
    found = platform.kube.list_of(plural, namespace, group, version)
    return sorted(
        (b for b in found if is_true(b, "Completed")), key=lambda b: b["metadata"]["name"]
    )


@pytest.fixture(scope="module")
def backup(platform: Platform, team: Team) -> dict[str, Any]:
    """The team's first Completed Backup made after its ControlPlane was Ready.

    The schedule is composed once the role has its ARN, which may be before
    Flux has applied the source: a Backup fired then holds an empty control
    plane, rightly. RFC 3339 times of one resolution compare as strings.
    """
    ready_at = str(condition(team.composite, "Ready")["lastTransitionTime"])
    return wait_for(
        "a Completed Backup of the team's control plane, made after it was Ready",
        lambda: next(
            (
                b
                for b in completed_backups(platform, team.namespace)
                if b["metadata"]["creationTimestamp"] > ready_at
            ),
            None,
        ),
        timeout=FIRST_BACKUP_DEADLINE,
    )


def test_the_schedule_fires_and_the_archive_lands_in_s3_with_the_team_roles_credentials(
    platform: Platform, team: Team, backup: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Made by the team's BackupSchedule, and named for its firing.
    owners = backup["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"]) for o in owners] == [("BackupSchedule", team.name)]
    status = backup["status"]
    location = status["location"]
    assert location["key"].startswith(f"{team.namespace}/{team.name}/")
    # As shipped (irsa trust): the controller has no AWS key of its own; it passed the
    # token EKS projects for it straight into the team's role, whose session wrote this.
    assert backup["spec"]["storage"]["assumeRoleWith"] == "WebIdentity"
    assert platform.backup_controller.env["AWS_ACCESS_KEY_ID"] == ""
    assert "AWS_WEB_IDENTITY_TOKEN_FILE" in platform.backup_controller.files
    # The archive as stored: its digest, and every file's checksum verified.
    seaweed = platform.aws.seaweed
    use_credentials(monkeypatch, seaweed.access_key, seaweed.secret_key)
    store = Store.connect(StorageSpec(bucket=location["bucket"], endpoint=seaweed.endpoint))
    data = io.BytesIO()
    store.download(location["key"], data)
    assert hashlib.sha256(data.getvalue()).hexdigest() == status["sha256"]
    manifest = archive.verify(io.BytesIO(data.getvalue()))
    assert manifest.objects == status["objects"]
    names = {
        (rtype.kind, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        for rtype, obj in archive.objects(io.BytesIO(data.getvalue()), manifest)
    }
    # What Flux synced from git is in it.
    assert ("ConfigMap", APP_NAMESPACE, "settings") in names
    assert ("Namespace", None, APP_NAMESPACE) in names


def test_a_controlplane_restored_from_the_backup_comes_up_with_its_objects(
    platform: Platform, team: Team, backup: dict[str, Any]
) -> None:
    name = "restored"
    create(
        platform.kube,
        XR,
        {
            "apiVersion": "platform.acme.io/v1alpha1",
            "kind": "ControlPlane",
            "metadata": {"name": name, "namespace": team.namespace},
            "spec": {"restore": {"backupName": backup["metadata"]["name"]}},
        },
    )
    composite = wait_ready(platform, XR, team.namespace, name, timeout=UP_DEADLINE)
    assert is_true(composite, "InstanceReady")
    # No git source here: what is in the new control plane came from the archive.
    hosted = hosted_name(platform, team.namespace, name)
    assert configmap_value(platform, hosted, "settings", APP_NAMESPACE) == "first"
