"""Failures a team can see: what the composed objects say becomes the composite's conditions.

Each case is a composed object's status, as its controller writes it, and the
composite condition it must give: the first real failure of anything composed,
in that object's words. Synced=False (crossplane-runtime's ReconcileError, as
upjet and our provider write it), upjet's LastAsyncOperation=False and a
BackupSchedule's LastBackup=False count as much as Ready=False, and a failure
of a later part wins over a part that is merely still on its way. The messages
quoted are the providers' own (upjet's "connect failed: cannot get terraform
setup: ..." and "async create failed: failed to create the resource: [...]",
crossplane-runtime's "connect failed"/"create failed" prefixes; AWS's
AccessDenied text) or what our provider and backup controller write.

Every case runs twice: through ``compose`` on plain dicts, and through the gRPC
edge (``fn.run``) on the protobuf request Crossplane sends, whose observed
objects are read through ``structs.StructView``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import compose as c
from function import fn, restore
from function.compose import compose
from function.observed import Condition
from function.render import request
from tests import builders as b

ROLE = "team-a-myctp-a8ef8cc7-backup"
BUCKET = "acme-ctp-backups-team-a-myctp-a8ef8cc7"
BACKUP = "myctp-20261202060000"
# The ways of the backup parts that are ready: the role with its ARN, the rest Ready.
BUCKET_PARTS = (
    ("backup-bucket", "Bucket"),
    ("backup-bucket-versioning", "BucketVersioning"),
    ("backup-bucket-encryption", "BucketServerSideEncryptionConfiguration"),
    ("backup-bucket-public-access-block", "BucketPublicAccessBlock"),
    ("backup-bucket-lifecycle", "BucketLifecycleConfiguration"),
)
IAM_PARTS = (("backup-policy", "Policy"), ("backup-role-policy-attachment", "RolePolicyAttachment"))

UPJET_NO_PROVIDER_CONFIG = (
    "connect failed: cannot get terraform setup: cannot get AWS config: cannot get referenced "
    'Provider: ClusterProviderConfig.aws.m.upbound.io "default" not found'
)
UPJET_ROLE_ACCESS_DENIED = (
    "create failed: async create failed: failed to create the resource: [{0 creating IAM Role "
    f"({ROLE}): operation error IAM: CreateRole, https response error StatusCode: 403, "
    "RequestID: 2c1f0a5e-8b1d-4a4e-9a53-0f6c0b1d9e11, api error AccessDenied: User: "
    "arn:aws:sts::123456789012:assumed-role/provider-aws/upbound-provider-aws is not authorized "
    f"to perform: iam:CreateRole on resource: arn:aws:iam::123456789012:role/{ROLE} because no "
    "identity-based policy allows the iam:CreateRole action  []}]"
)
UPJET_BUCKET_ACCESS_DENIED = (
    "observe failed: cannot run refresh: refresh failed: reading S3 Bucket "
    f"({BUCKET}): operation error S3: HeadBucket, https response error StatusCode: 403, "
    "RequestID: 7KZ2, HostID: aGVsbG8=, api error Forbidden: Forbidden"
)
WRITER_ACCESS_DENIED = (
    f"assume role arn:aws:iam::123456789012:role/{ROLE} with web identity for s3://{BUCKET} "
    "failed: AccessDenied (HTTP 403, AssumeRoleWithWebIdentity)"
)


def one_line(text: str) -> str:
    """``text`` as a composite condition carries it: runs of whitespace made one space."""
    return " ".join(text.split())


def condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    found = {"type": type_, "status": status, "reason": reason}
    if message:
        found["message"] = message
    return found


def composed(kind: str, name: str, *conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    """An observed composed object of ``kind`` called ``name`` with ``conditions``."""
    return {
        "kind": kind,
        "metadata": {"name": name},
        "status": {**status, "conditions": list(conditions)},
    }


READY = condition("Ready", "True", "Available")
SYNCED = condition("Synced", "True", "ReconcileSuccess")
CREATING = condition("Ready", "False", "Creating")


def role(*conditions: dict[str, Any], arn: bool = True) -> dict[str, Any]:
    at_provider = {"atProvider": {"arn": b.ROLE_ARN}} if arn else {}
    return composed("Role", ROLE, *conditions, **at_provider)


def schedule(*conditions: dict[str, Any]) -> dict[str, Any]:
    body = composed("BackupSchedule", "myctp", *conditions)
    body["spec"] = {"storage": {"roleArn": b.ROLE_ARN}}
    return body


def failed_schedule() -> dict[str, Any]:
    """The schedule as its controller writes it while its newest Backup failed."""
    return schedule(
        condition("Ready", "False", "LastBackupFailed", f"Backup {BACKUP} failed"),
        condition(
            "LastBackup", "False", "BackupFailed", f"Backup {BACKUP} failed: {WRITER_ACCESS_DENIED}"
        ),
    )


# What the composite says of it: the schedule's LastBackup, in the Backup's words.
FAILED_SCHEDULE_TOLD = (
    "False",
    "BackupFailed",
    f"BackupSchedule myctp: Backup {BACKUP} failed: {WRITER_ACCESS_DENIED}",
)


def backups_ready(**replaced: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every backup part Ready and Synced (and the Instance), but those ``replaced``."""
    seen: dict[str, dict[str, Any]] = {
        "instance": composed("Instance", "myctp", READY, SYNCED),
        "backup-role": role(READY, SYNCED),
        "backup-schedule": schedule(
            condition("Ready", "True", "Scheduled"),
            condition("LastBackup", "True", "BackupCompleted", f"Backup {BACKUP} completed"),
        ),
    }
    for name, kind in (*BUCKET_PARTS, *IAM_PARTS):
        seen[name] = composed(kind, f"myctp-{name}", READY, SYNCED)
    return seen | {name.replace("_", "-"): body for name, body in replaced.items()}


# Two stages, the second depending on the first.
STAGED = {
    "source": {
        **b.SOURCE,
        "stages": [
            {"name": "packages", "path": "./packages"},
            {"name": "config", "path": "./config", "dependsOn": ["packages"]},
        ],
    }
}


def staged(config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The staged source fetched, its first stage applying, its second as ``config`` says."""
    return {
        "instance": composed("Instance", "myctp", READY, SYNCED),
        "git-repository": composed("GitRepository", "myctp", condition("Ready", "True", "x")),
        "kustomization-packages": composed(
            "Kustomization",
            "myctp-packages",
            condition("Ready", "Unknown", "Progressing", "Reconciliation in progress"),
        ),
        "kustomization-config": composed("Kustomization", "myctp-config", config),
    }


@dataclass(frozen=True)
class FailureCase:
    reason: str
    spec: dict[str, Any]
    seen: dict[str, dict[str, Any]]
    # The condition type, then (status, reason, message) it must have.
    type: str
    want: tuple[str, str, str]
    required: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)


FAILURE_CASES = [
    FailureCase(
        "A missing provider config, which the Instance reports only as Synced=False, reaches "
        "InstanceReady in the provider's words (it was 'not ready yet').",
        {},
        {
            "instance": composed(
                "Instance",
                "myctp",
                condition(
                    "Synced",
                    "False",
                    "ReconcileError",
                    "connect failed: cannot get ClusterProviderConfig default: not found",
                ),
            )
        },
        c.INSTANCE_READY,
        (
            "False",
            "ReconcileError",
            "Instance myctp: connect failed: cannot get ClusterProviderConfig default: not found",
        ),
    ),
    FailureCase(
        "A version the Space refuses is the Instance's Synced=False: InstanceReady says so, "
        "not the Creating its Ready still shows.",
        {"crossplaneVersion": "2.9.0-up.1"},
        {
            "instance": composed(
                "Instance",
                "myctp",
                CREATING,
                condition(
                    "Synced",
                    "False",
                    "ReconcileError",
                    "the Space refused the ControlPlane: spec.crossplane.version: "
                    "2.9.0-up.1 is not a version this Space offers",
                ),
            )
        },
        c.INSTANCE_READY,
        (
            "False",
            "ReconcileError",
            "Instance myctp: the Space refused the ControlPlane: spec.crossplane.version: "
            "2.9.0-up.1 is not a version this Space offers",
        ),
    ),
    FailureCase(
        "A running Instance whose update the Space refuses is Ready but not Synced: "
        "InstanceReady is False, as the contract counts Synced=False as much as Ready=False.",
        {},
        {
            "instance": composed(
                "Instance",
                "myctp",
                READY,
                condition("Synced", "False", "ReconcileError", "update failed: forbidden"),
            )
        },
        c.INSTANCE_READY,
        ("False", "ReconcileError", "Instance myctp: update failed: forbidden"),
    ),
    FailureCase(
        "A Role that AWS refuses never reports its ARN: BackupsReady carries AWS's "
        "AccessDenied, not WaitingForRoleArn.",
        {"backup": b.BACKUP},
        {
            "backup-role": role(
                CREATING,
                condition("Synced", "False", "ReconcileError", UPJET_ROLE_ACCESS_DENIED),
                arn=False,
            )
        },
        c.BACKUPS_READY,
        ("False", "ReconcileError", one_line(f"Role {ROLE}: {UPJET_ROLE_ACCESS_DENIED}")),
    ),
    FailureCase(
        "A bucket whose provider config is missing says so, though the Role is fine.",
        {"backup": b.BACKUP},
        backups_ready(
            backup_bucket=composed(
                "Bucket",
                BUCKET,
                condition("Synced", "False", "ReconcileError", UPJET_NO_PROVIDER_CONFIG),
            )
        ),
        c.BACKUPS_READY,
        ("False", "ReconcileError", f"Bucket {BUCKET}: {UPJET_NO_PROVIDER_CONFIG}"),
    ),
    FailureCase(
        "A failure of a later part wins over an earlier part that is still being created.",
        {"backup": b.BACKUP},
        backups_ready(
            backup_bucket=composed("Bucket", BUCKET, CREATING, SYNCED),
            backup_bucket_encryption=composed(
                "BucketServerSideEncryptionConfiguration",
                BUCKET,
                CREATING,
                condition("Synced", "False", "ReconcileError", UPJET_BUCKET_ACCESS_DENIED),
            ),
        ),
        c.BACKUPS_READY,
        (
            "False",
            "ReconcileError",
            f"BucketServerSideEncryptionConfiguration {BUCKET}: {UPJET_BUCKET_ACCESS_DENIED}",
        ),
    ),
    FailureCase(
        "An asynchronous update that failed (upjet's LastAsyncOperation) counts though the "
        "object is Ready and Synced.",
        {"backup": b.BACKUP},
        backups_ready(
            backup_bucket_lifecycle=composed(
                "BucketLifecycleConfiguration",
                BUCKET,
                READY,
                SYNCED,
                condition(
                    "LastAsyncOperation",
                    "False",
                    "AsyncUpdateFailure",
                    "async update failed: failed to update the resource: [{0 updating S3 Bucket "
                    f"({BUCKET}) Lifecycle Configuration: api error AccessDenied: Access Denied  "
                    "[]}]",
                ),
            )
        ),
        c.BACKUPS_READY,
        (
            "False",
            "AsyncUpdateFailure",
            f"BucketLifecycleConfiguration {BUCKET}: async update failed: failed to update the "
            f"resource: [{{0 updating S3 Bucket ({BUCKET}) Lifecycle Configuration: api error "
            "AccessDenied: Access Denied []}]",  # its two spaces before [] made one
        ),
    ),
    FailureCase(
        "The schedule's newest Backup failed: BackupsReady is False with the Backup's name, "
        "reason and message.",
        {"backup": b.BACKUP},
        backups_ready(backup_schedule=failed_schedule()),
        c.BACKUPS_READY,
        FAILED_SCHEDULE_TOLD,
    ),
    FailureCase(
        "A later Backup completed: the failure before it is over, BackupsReady is True again.",
        {"backup": b.BACKUP},
        backups_ready(),
        c.BACKUPS_READY,
        ("True", "BackupCompleted", f"Backup {BACKUP} completed"),
    ),
    FailureCase(
        "A schedule whose storage the controller refuses says why, in its Ready.",
        {"backup": b.BACKUP},
        backups_ready(
            backup_schedule=schedule(
                condition(
                    "Ready",
                    "False",
                    "StorageRefused",
                    "spec.storage.prefix must begin with team-a/",
                )
            )
        ),
        c.BACKUPS_READY,
        (
            "False",
            "StorageRefused",
            "BackupSchedule myctp: spec.storage.prefix must begin with team-a/",
        ),
    ),
    FailureCase(
        "A paused object (Synced=False, ReconcilePaused) is held on purpose, not failed: the "
        "failure after it is the one told.",
        {"backup": b.BACKUP},
        backups_ready(
            backup_role_policy_attachment=composed(
                "RolePolicyAttachment",
                "myctp-backup",
                READY,
                condition("Synced", "False", "ReconcilePaused"),
            ),
            backup_schedule=failed_schedule(),
        ),
        c.BACKUPS_READY,
        FAILED_SCHEDULE_TOLD,
    ),
    FailureCase(
        "A paused object and nothing failed: the backups are ready.",
        {"backup": b.BACKUP},
        backups_ready(
            backup_policy=composed(
                "Policy", "myctp-backup", READY, condition("Synced", "False", "ReconcilePaused")
            )
        ),
        c.BACKUPS_READY,
        ("True", "BackupCompleted", f"Backup {BACKUP} completed"),
    ),
    FailureCase(
        "A git source Flux cannot fetch says so, rather than waiting for the Instance.",
        {"source": b.SOURCE},
        {
            "git-repository": composed(
                "GitRepository",
                "myctp",
                condition(
                    "Ready",
                    "False",
                    "GitOperationFailed",
                    "failed to checkout and determine revision: unable to clone "
                    "'https://github.com/acmeorg/myctp-source': authentication required",
                ),
            )
        },
        c.SOURCE_SYNCED,
        (
            "False",
            "GitOperationFailed",
            "GitRepository myctp: failed to checkout and determine revision: unable to clone "
            "'https://github.com/acmeorg/myctp-source': authentication required",
        ),
    ),
    FailureCase(
        "A stage that failed its health checks wins over an earlier stage still applying.",
        STAGED,
        staged(
            condition(
                "Ready",
                "False",
                "HealthCheckFailed",
                "health check failed after 9.9s: timeout waiting for: [Provider/p status: "
                "'Failed']",
            )
        ),
        c.SOURCE_SYNCED,
        (
            "False",
            "HealthCheckFailed",
            "Kustomization myctp-config: health check failed after 9.9s: timeout waiting for: "
            "[Provider/p status: 'Failed']",
        ),
    ),
    FailureCase(
        "A stage waiting for the one it depends on is on its way: the first part not ready "
        "is named, as before.",
        STAGED,
        staged(condition("Ready", "False", "DependencyNotReady", "dependency not ready")),
        c.SOURCE_SYNCED,
        ("False", "Progressing", "Kustomization myctp-packages: Reconciliation in progress"),
    ),
    FailureCase(
        "A restore from a control plane whose newest Backup failed says which and why, "
        "rather than waiting silently.",
        {"restore": {"fromControlPlane": "myctp"}},
        {},
        c.INSTANCE_READY,
        (
            "False",
            c.NO_BACKUP_TO_RESTORE,
            "no Completed Backup of control plane myctp in namespace team-a to restore from "
            f"(spec.restore.fromControlPlane): its newest Backup, {BACKUP}, failed "
            f"(BackupFailed): {WRITER_ACCESS_DENIED}; the Instance is created once there is one",
        ),
        required={
            restore.REQUIREMENT: (
                {
                    "metadata": {
                        "name": BACKUP,
                        "namespace": "team-a",
                        "labels": {restore.INSTANCE_LABEL: "myctp"},
                        "creationTimestamp": "2026-12-02T06:00:00Z",
                    },
                    "spec": {"instanceRef": {"name": "myctp"}},
                    "status": {
                        "phase": "Failed",
                        "completedAt": "2026-12-02T06:00:09Z",
                        "conditions": [
                            condition("Failed", "True", "BackupFailed", WRITER_ACCESS_DENIED)
                        ],
                    },
                },
            )
        },
    ),
    FailureCase(
        "A restore from a control plane that has no Backup at all says that, and where they "
        "come from.",
        {"restore": {"fromControlPlane": "gone"}},
        {},
        c.INSTANCE_READY,
        (
            "False",
            c.NO_BACKUP_TO_RESTORE,
            "no Completed Backup of control plane gone in namespace team-a to restore from "
            "(spec.restore.fromControlPlane): there is no Backup of it in that namespace (its "
            "spec.backup schedule makes them, and a final one is taken when it is deleted); "
            "the Instance is created once there is one",
        ),
        required={restore.REQUIREMENT: ()},
    ),
]


def _annotated(seen: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The observed objects as Crossplane sends them: named by their composition resource."""
    objects = []
    for name, body in seen.items():
        metadata = {**body.get("metadata", {}), "annotations": {b.COMPOSITION_RESOURCE_NAME: name}}
        objects.append({**body, "metadata": metadata})
    return objects


def over_grpc(case: FailureCase) -> Condition:
    xr = b.composite(case.spec)
    rsp = fn.run(request(xr, b.example_input(), _annotated(case.seen), case.required))
    status = {
        fnv1.STATUS_CONDITION_TRUE: "True",
        fnv1.STATUS_CONDITION_FALSE: "False",
        fnv1.STATUS_CONDITION_UNKNOWN: "Unknown",
    }
    found = next(cond for cond in rsp.conditions if cond.type == case.type)
    return Condition(found.type, status[found.status], found.reason, found.message)


def in_process(case: FailureCase) -> Condition:
    xr = b.composite(case.spec)
    observed = b.observed(xr, case.seen)
    observed = type(observed)(observed.composite, observed.resources, case.required)
    outcome = compose(observed, b.example_input())
    return next(cond for cond in outcome.conditions if cond.type == case.type)


@pytest.mark.parametrize("read", [in_process, over_grpc], ids=["in process", "over gRPC"])
@pytest.mark.parametrize("case", FAILURE_CASES, ids=lambda case: case.reason)
def test_the_composite_carries_the_first_real_failure_in_the_objects_words(
    case: FailureCase, read: Any
) -> None:
    got = read(case)
    assert (got.status, got.reason, got.message) == case.want, case.reason


def test_a_long_or_multiline_message_is_cut_to_one_bounded_line() -> None:
    message = "line one\n\tline two " + "x" * 5000
    seen = {
        "instance": composed(
            "Instance", "myctp", condition("Synced", "False", "ReconcileError", message)
        )
    }
    outcome = compose(b.observed(b.composite({}), seen), b.example_input())
    got = next(cond for cond in outcome.conditions if cond.type == c.INSTANCE_READY)
    assert len(got.message) == c.MESSAGE_LIMIT
    assert got.message.startswith("Instance myctp: line one line two xxx")
    assert got.message.endswith("…")
    assert "\n" not in got.message
    assert "\t" not in got.message


def test_the_failure_of_a_part_does_not_change_what_crossplane_is_told_is_ready() -> None:
    # Readiness is the contract's: Ready=True. A Ready Instance that is not Synced still
    # lets the Kustomization be composed; only the condition tells the failure.
    seen = {
        "instance": composed(
            "Instance",
            "myctp",
            READY,
            condition("Synced", "False", "ReconcileError", "update failed: forbidden"),
        )
    }
    outcome = compose(b.observed(b.composite({"source": b.SOURCE}), seen), b.example_input())
    assert outcome.resources["instance"].ready
    assert "kustomization" in outcome.resources
