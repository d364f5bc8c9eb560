"""Deterministic names of composed objects and of their AWS counterparts.

A backup must be restorable into objects of the same names, so every name is a
pure function of the composite's namespace and name. A name longer than its
kind allows keeps a readable head and ends in a stable hash of the whole.

The names of external resources in AWS share one account across every team,
and provider-aws adopts a role, policy or bucket it finds under the name it is
given (crossplane-runtime observes by external name before it creates).
``<namespace>-<name>`` alone is ambiguous (``team-a``/``prod`` and
``team``/``a-prod``), so each AWS name carries a hash of ``<namespace>/<name>``,
where ``/`` cannot be part of either, as the Instance's external name does.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

KUBERNETES_NAME_MAX = 63
S3_BUCKET_MAX = 63
IAM_ROLE_MAX = 64
IAM_POLICY_MAX = 128
_HASH_LENGTH = 8
_NOT_BUCKET_CHAR = re.compile(r"[^a-z0-9-]+")
_BACKUP_SUFFIX = "-backup"


def shortened(name: str, limit: int) -> str:
    """Return ``name``, or a stable shortening of it when it is longer than ``limit``."""
    if len(name) <= limit:
        return name
    head = name[: limit - _HASH_LENGTH - 1].rstrip("-.")
    return f"{head}-{_digest(name)}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_LENGTH]


def _hashed(head: str, namespace: str, composite: str, suffix: str, limit: int) -> str:
    """``<head>-<hash of namespace/composite><suffix>``, the head cut to fit ``limit``."""
    room = limit - _HASH_LENGTH - 1 - len(suffix)
    return f"{head[:room].rstrip('-.')}-{_digest(f'{namespace}/{composite}')}{suffix}"


def _bucket_safe(text: str) -> str:
    """S3 allows lowercase letters, digits and hyphens (dots break virtual-host TLS)."""
    return _NOT_BUCKET_CHAR.sub("-", text.lower()).strip("-")


@dataclass(frozen=True)
class AwsNames:
    """The names one composite's backup resources have in AWS."""

    # The IAM role the backup writer assumes.
    role: str
    # The IAM policy attached to it.
    policy: str
    # The dedicated bucket (when the composite names none of its own).
    bucket: str

    @classmethod
    def of(cls, bucket_prefix: str, namespace: str, composite: str) -> AwsNames:
        """The names a composite's new AWS resources get: unambiguous per (namespace, name).

        ``<namespace>-<name>-<hash>-backup`` for the role and the policy (IAM
        allows 64 and 128 characters), ``<prefix>-<namespace>-<name>-<hash>`` for
        the bucket (3 to 63 characters of ``[a-z0-9-]``, a letter or digit at
        each end). The hash keeps each unique however the head is cut.
        """
        head = f"{namespace}-{composite}"
        return cls(
            role=_hashed(head, namespace, composite, _BACKUP_SUFFIX, IAM_ROLE_MAX),
            policy=_hashed(head, namespace, composite, _BACKUP_SUFFIX, IAM_POLICY_MAX),
            bucket=_hashed(
                _bucket_safe(f"{bucket_prefix}-{head}"), namespace, composite, "", S3_BUCKET_MAX
            ),
        )

    @classmethod
    def before_hashes(cls, bucket_prefix: str, namespace: str, composite: str) -> AwsNames:
        """The names this function gave before they carried a hash (ambiguous; kept, never new)."""
        in_aws = f"{namespace}-{composite}{_BACKUP_SUFFIX}"
        return cls(
            role=shortened(in_aws, IAM_ROLE_MAX),
            policy=shortened(in_aws, IAM_POLICY_MAX),
            bucket=shortened(
                _bucket_safe(f"{bucket_prefix}-{namespace}-{composite}"), S3_BUCKET_MAX
            ),
        )

    @classmethod
    def kept(
        cls, bucket_prefix: str, namespace: str, composite: str, observed: ObservedAwsNames
    ) -> AwsNames:
        """The names to render: each one already observed keeps the name it has.

        An upgrade must replace nothing, so a resource observed under the name
        this function gave it before hashes keeps that name. Any other observed
        name (an annotation edited by hand) is not adopted: the current name is
        rendered, and Crossplane puts it back.
        """
        current = cls.of(bucket_prefix, namespace, composite)
        before = cls.before_hashes(bucket_prefix, namespace, composite)
        return cls(
            role=before.role if observed.role == before.role else current.role,
            policy=before.policy if observed.policy == before.policy else current.policy,
            bucket=before.bucket if observed.bucket == before.bucket else current.bucket,
        )


@dataclass(frozen=True)
class ObservedAwsNames:
    """The external names of a composite's AWS resources as observed; None where not observed."""

    role: str | None = None
    policy: str | None = None
    bucket: str | None = None


@dataclass(frozen=True)
class Names:
    """Every name one composite's objects get; ``Names.of`` works them out."""

    namespace: str
    composite: str
    # The Instance, and the Flux objects and BackupSchedule beside it.
    instance: str
    # The Instance's connection secret.
    kubeconfig_secret: str
    # The Bucket and its configuration objects.
    bucket_object: str
    # The Role, Policy and RolePolicyAttachment objects.
    iam_object: str
    # The key prefix of this composite's backups: ``<namespace>/<name>/``.
    backup_prefix: str

    @classmethod
    def of(cls, namespace: str, composite: str) -> Names:
        """The names of the objects of composite ``composite`` in ``namespace``.

        Each is worked out once, here: the objects of one composite refer to
        each other by name many times over.
        """
        return cls(
            namespace=namespace,
            composite=composite,
            instance=_child(composite),
            kubeconfig_secret=_child(composite, "-kubeconfig"),
            bucket_object=_child(composite, "-backups"),
            iam_object=_child(composite, "-backup"),
            backup_prefix=f"{namespace}/{composite}/",
        )

    def stage(self, stage: str) -> str:
        """The Kustomization of one stage of the sync: ``<composite>-<stage>``."""
        return _child(self.composite, f"-{stage}")

    def usage(self, of: str, by: str) -> str:
        """The Usage that keeps ``of`` until ``by`` is gone."""
        return _child(self.composite, f"-{of}-used-by-{by}")


def _child(composite: str, suffix: str = "") -> str:
    return shortened(f"{composite}{suffix}", KUBERNETES_NAME_MAX)
