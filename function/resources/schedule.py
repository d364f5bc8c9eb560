"""The BackupSchedule served by our Backup controller."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.resources.target import Target

API_VERSION = "controlplane.spaces.upbound.io/v1alpha1"
KIND = "BackupSchedule"


@dataclass(frozen=True)
class Storage:
    """Where a composite's backups go and with which role."""

    bucket: str
    region: str
    prefix: str
    role_arn: str
    assume_role_with: str


def backup_schedule(
    target: Target,
    schedule: str,
    ttl: str,
    suspend: bool,
    storage: Storage,
    *,
    final_backup: bool,
    excluded_resources: tuple[str, ...] = (),
    verify: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The BackupSchedule of the composite's Instance.

    ``final_backup``: the schedule takes a last Backup when it is deleted.
    ``excluded_resources``: types its Backups leave out (none: the field is not written).
    ``verify``: its restore drills, ``interval`` and ``deadline`` (none: not written).
    """
    spec: dict[str, Any] = {
        "instanceRef": {"name": target.names.instance},
        "schedule": schedule,
        "ttl": ttl,
        "suspend": suspend,
        "finalBackup": final_backup,
        "storage": {
            "bucket": storage.bucket,
            "prefix": storage.prefix,
            "region": storage.region,
            "roleArn": storage.role_arn,
            "assumeRoleWith": storage.assume_role_with,
        },
    }
    if excluded_resources:
        spec["excludedResources"] = list(excluded_resources)
    if verify:
        spec["verify"] = dict(verify)
    return target.object(API_VERSION, KIND, target.names.instance, spec)
