"""Deterministic names of composed objects and of their AWS counterparts.

A backup must be restorable into objects of the same names, so every name is a
pure function of the composite's namespace and name. A name longer than its
kind allows keeps a readable head and ends in a stable hash of the whole.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import cached_property

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
    """Every name one composite's objects get.

    Each name is worked out once: the objects of one composite refer to each
    other by name many times over.
    """

    namespace: str
    composite: str

    def _child(self, suffix: str = "") -> str:
        return shortened(f"{self.composite}{suffix}", KUBERNETES_NAME_MAX)

    @cached_property
    def instance(self) -> str:
        """The Instance, and the Flux objects and BackupSchedule beside it."""
        return self._child()

    @cached_property
    def kubeconfig_secret(self) -> str:
        """The Instance's connection secret."""
        return self._child("-kubeconfig")

    @cached_property
    def bucket_object(self) -> str:
        """The Bucket and its configuration objects."""
        return self._child("-backups")

    @cached_property
    def iam_object(self) -> str:
        """The Role, Policy and RolePolicyAttachment objects."""
        return self._child("-backup")

    @cached_property
    def iam_role(self) -> str:
        """The IAM role's name in AWS: unique across the account's namespaces."""
        return shortened(f"{self.namespace}-{self.composite}-backup", IAM_ROLE_MAX)

    @cached_property
    def iam_policy(self) -> str:
        """The IAM policy's name in AWS."""
        return shortened(f"{self.namespace}-{self.composite}-backup", IAM_POLICY_MAX)

    @cached_property
    def backup_prefix(self) -> str:
        """The key prefix of this composite's backups: ``<namespace>/<name>/``."""
        return f"{self.namespace}/{self.composite}/"

    def usage(self, of: str, by: str) -> str:
        """The Usage that keeps ``of`` until ``by`` is gone."""
        return self._child(f"-{of}-used-by-{by}")
