"""The BackupSchedule served by our Backup controller."""

from __future__ import annotations

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
    target: Target, schedule: str, ttl: str, suspend: bool, storage: Storage
) -> dict[str, Any]:
    """The BackupSchedule of the composite's Instance."""
    return target.object(
        API_VERSION,
        KIND,
        target.names.instance,
        {
            "instanceRef": {"name": target.names.instance},
            "schedule": schedule,
            "ttl": ttl,
            "suspend": suspend,
            "storage": {
                "bucket": storage.bucket,
                "prefix": storage.prefix,
                "region": storage.region,
                "roleArn": storage.role_arn,
                "assumeRoleWith": storage.assume_role_with,
            },
        },
    )
