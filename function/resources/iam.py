"""The backup writer's IAM role: trusted as the input says, allowed only its prefix."""

from __future__ import annotations

import json
from typing import Any

from function.model import Trust
from function.names import AwsNames
from function.resources.target import Target

_VERSION = "2012-10-17"
OBJECT_ACTIONS = ("s3:PutObject", "s3:GetObject", "s3:DeleteObject", "s3:AbortMultipartUpload")
# Writing into a bucket whose default encryption is a KMS key needs the key too.
KMS_ACTIONS = ("kms:GenerateDataKey", "kms:Decrypt")
# How the backup writer gets into the role (a BackupSchedule's storage.assumeRoleWith).
ASSUME_ROLE = "AssumeRole"
WEB_IDENTITY = "WebIdentity"

# The backup writer passes the Backup's namespace as the ExternalId of every
# sts:AssumeRole call; a team's role trusts only calls that carry its namespace,
# so no Backup in another namespace can get into it.
EXTERNAL_ID_KEY = "sts:ExternalId"


def trust_policy(trust: Trust, namespace: str) -> dict[str, Any]:
    """The role's trust policy for whichever mechanism the input chose, bound to ``namespace``.

    It allows exactly the call ``assume_role_with`` tells the writer to make:
    AssumeRoleWithWebIdentity from the OIDC provider for ``irsa``, AssumeRole
    from the controller's role for ``podIdentity`` and ``roleArn``.
    AssumeRoleWithWebIdentity (IRSA) carries no ExternalId: there the role's
    least-privilege policy on ``<namespace>/<name>/`` and the controller's refusal
    of any other prefix are the binding.
    """
    if trust.irsa is not None:
        issuer = trust.irsa.issuer
        account = trust.irsa.service_account
        statement: dict[str, Any] = {
            "Effect": "Allow",
            "Principal": {"Federated": trust.irsa.oidc_provider_arn},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {
                "StringEquals": {
                    f"{issuer}:aud": "sts.amazonaws.com",
                    f"{issuer}:sub": f"system:serviceaccount:{account.namespace}:{account.name}",
                }
            },
        }
    elif trust.pod_identity is not None:
        # The controller's Pod Identity session carries EKS's session tags
        # (kubernetes-namespace, eks-cluster-arn, ...), all transitive: they ride
        # along into the chained session, which AWS allows only with sts:TagSession.
        statement = {
            "Effect": "Allow",
            "Principal": {"AWS": trust.pod_identity.controller_role_arn},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {"StringEquals": {EXTERNAL_ID_KEY: namespace}},
        }
    else:
        statement = {
            "Effect": "Allow",
            "Principal": {"AWS": trust.role_arn},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {EXTERNAL_ID_KEY: namespace}},
        }
    return {"Version": _VERSION, "Statement": [statement]}


def assume_role_with(trust: Trust) -> str:
    """How the writer gets into a role trusted so: the STS call the trust policy allows."""
    return WEB_IDENTITY if trust.irsa is not None else ASSUME_ROLE


def access_policy(partition: str, bucket: str, prefix: str, kms_key_arn: str) -> dict[str, Any]:
    """Exactly the object actions on ``prefix`` and a listing limited to it."""
    statements: list[dict[str, Any]] = [
        {
            "Sid": "BackupObjects",
            "Effect": "Allow",
            "Action": list(OBJECT_ACTIONS),
            "Resource": f"arn:{partition}:s3:::{bucket}/{prefix}*",
        },
        {
            "Sid": "ListBackups",
            "Effect": "Allow",
            "Action": "s3:ListBucket",
            "Resource": f"arn:{partition}:s3:::{bucket}",
            "Condition": {"StringLike": {"s3:prefix": [f"{prefix}*"]}},
        },
    ]
    if kms_key_arn:
        statements.append(
            {
                "Sid": "BackupEncryptionKey",
                "Effect": "Allow",
                "Action": list(KMS_ACTIONS),
                "Resource": kms_key_arn,
            }
        )
    return {"Version": _VERSION, "Statement": statements}


def _document(policy: dict[str, Any]) -> str:
    # Stable, compact JSON: the provider compares documents as strings.
    return json.dumps(policy, separators=(",", ":"), sort_keys=True)


def role_objects(target: Target, bucket: str, aws: AwsNames) -> dict[str, dict[str, Any]]:
    """The Role, Policy and RolePolicyAttachment, by composition resource name.

    ``aws`` names the role and the policy in AWS.
    """
    settings = target.settings.backup
    if settings is None:  # compose checks this first; a guard for the type checker
        msg = "input.backup is required to compose backups"
        raise ValueError(msg)
    names = target.names
    policy = access_policy(
        target.settings.aws.partition, bucket, names.backup_prefix, settings.kms_key_arn
    )
    return {
        "backup-role": target.aws_object(
            "Role",
            names.iam_object,
            {
                "assumeRolePolicy": _document(trust_policy(settings.trust, names.namespace)),
                "description": f"Writes backups of {names.namespace}/{names.composite}",
            },
            external_name=aws.role,
        ),
        "backup-policy": target.aws_object(
            "Policy",
            names.iam_object,
            {
                "policy": _document(policy),
                "description": f"Backups of {names.namespace}/{names.composite} only",
            },
            external_name=aws.policy,
        ),
        "backup-role-policy-attachment": target.aws_object(
            "RolePolicyAttachment",
            names.iam_object,
            {
                "roleRef": {"name": names.iam_object},
                "policyArnRef": {"name": names.iam_object},
            },
        ),
    }
