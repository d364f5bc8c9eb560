"""The provider-aws kinds the stand-in plays, in both API flavours, and how they refer.

Exactly the kinds our composition function composes: five S3 and three IAM
kinds, each as a namespaced `.aws.m.upbound.io` kind (Crossplane v2) and as a
cluster-scoped `.aws.upbound.io` kind (legacy), at the versions the function
writes (their storage versions).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from provider.kube import Resource


class Extract(Enum):
    """What a reference takes from the object it names (crossplane-runtime's extractors)."""

    EXTERNAL_NAME = "external name"
    ARN = "status.atProvider.arn"


@dataclass(frozen=True)
class Reference:
    """A `<field>Ref` / `<field>Selector` pair of `spec.forProvider` naming another kind."""

    field: str
    kind: str
    extract: Extract

    @property
    def ref(self) -> str:
        """The name of the reference field."""
        return f"{self.field}Ref"

    @property
    def selector(self) -> str:
        """The name of the selector field."""
        return f"{self.field}Selector"


@dataclass(frozen=True)
class Kind:
    """One provider-aws kind."""

    name: str
    service: str
    plural: str
    cluster_version: str
    references: tuple[Reference, ...] = ()
    # Whether the user names the external resource (metadata.name by default), or
    # the provider does on create (upjet's identifier-from-provider).
    named_by_user: bool = False

    def resource(self, *, namespaced: bool) -> Resource:
        """The API resource of this kind in one flavour."""
        if namespaced:
            return Resource(f"{self.service}.aws.m.upbound.io", "v1beta1", self.plural, self.name)
        return Resource(
            f"{self.service}.aws.upbound.io",
            self.cluster_version,
            self.plural,
            self.name,
            namespaced=False,
        )


_BUCKET = Reference("bucket", "Bucket", Extract.EXTERNAL_NAME)

BUCKET = Kind("Bucket", "s3", "buckets", "v1beta2", named_by_user=True)
BUCKET_VERSIONING = Kind("BucketVersioning", "s3", "bucketversionings", "v1beta2", (_BUCKET,))
BUCKET_ENCRYPTION = Kind(
    "BucketServerSideEncryptionConfiguration",
    "s3",
    "bucketserversideencryptionconfigurations",
    "v1beta2",
    (_BUCKET,),
)
BUCKET_PUBLIC_ACCESS_BLOCK = Kind(
    "BucketPublicAccessBlock", "s3", "bucketpublicaccessblocks", "v1beta1", (_BUCKET,)
)
BUCKET_LIFECYCLE = Kind(
    "BucketLifecycleConfiguration", "s3", "bucketlifecycleconfigurations", "v1beta1", (_BUCKET,)
)
ROLE = Kind("Role", "iam", "roles", "v1beta1", named_by_user=True)
POLICY = Kind("Policy", "iam", "policies", "v1beta1", named_by_user=True)
ROLE_POLICY_ATTACHMENT = Kind(
    "RolePolicyAttachment",
    "iam",
    "rolepolicyattachments",
    "v1beta1",
    (
        Reference("role", "Role", Extract.EXTERNAL_NAME),
        Reference("policyArn", "Policy", Extract.ARN),
    ),
)

KINDS: tuple[Kind, ...] = (
    BUCKET,
    BUCKET_VERSIONING,
    BUCKET_ENCRYPTION,
    BUCKET_PUBLIC_ACCESS_BLOCK,
    BUCKET_LIFECYCLE,
    ROLE,
    POLICY,
    ROLE_POLICY_ATTACHMENT,
)
BY_NAME = {kind.name: kind for kind in KINDS}
