"""Deterministic names of composed objects and of their AWS counterparts.

A backup must be restorable into objects of the same names, so every name is a
pure function of the composite's namespace and name. A name longer than its
kind allows keeps a readable head and ends in a stable hash of the whole.
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


def shortened(name: str, limit: int) -> str:
    """Return ``name``, or a stable shortening of it when it is longer than ``limit``."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_LENGTH]
    head = name[: limit - _HASH_LENGTH - 1].rstrip("-.")
    return f"{head}-{digest}"


def bucket_name(prefix: str, namespace: str, composite: str) -> str:
    """A globally unique-looking S3 bucket name for a composite's dedicated bucket.

    S3 allows lowercase letters, digits and hyphens (dots break virtual-host
    TLS), 3 to 63 characters, starting and ending with a letter or digit.
    """
    raw = _NOT_BUCKET_CHAR.sub("-", f"{prefix}-{namespace}-{composite}".lower()).strip("-")
    return shortened(raw, S3_BUCKET_MAX)


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
    # The IAM role's name in AWS: unique across the account's namespaces.
    iam_role: str
    # The IAM policy's name in AWS.
    iam_policy: str
    # The key prefix of this composite's backups: ``<namespace>/<name>/``.
    backup_prefix: str

    @classmethod
    def of(cls, namespace: str, composite: str) -> Names:
        """The names of the objects of composite ``composite`` in ``namespace``.

        Each is worked out once, here: the objects of one composite refer to
        each other by name many times over.
        """
        in_aws = f"{namespace}-{composite}-backup"
        return cls(
            namespace=namespace,
            composite=composite,
            instance=_child(composite),
            kubeconfig_secret=_child(composite, "-kubeconfig"),
            bucket_object=_child(composite, "-backups"),
            iam_object=_child(composite, "-backup"),
            iam_role=shortened(in_aws, IAM_ROLE_MAX),
            iam_policy=shortened(in_aws, IAM_POLICY_MAX),
            backup_prefix=f"{namespace}/{composite}/",
        )

    def usage(self, of: str, by: str) -> str:
        """The Usage that keeps ``of`` until ``by`` is gone."""
        return _child(self.composite, f"-{of}-used-by-{by}")


def _child(composite: str, suffix: str = "") -> str:
    return shortened(f"{composite}{suffix}", KUBERNETES_NAME_MAX)
