"""Where one composite's objects go and which API flavour they take."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from function.model import ControlPlaneSpec, Input, ProviderConfigRef
from function.names import Names

# provider-upjet-aws kinds, by API flavour. The v2 composite composes the
# namespaced `.m.` kinds; the legacy one the cluster-scoped kinds at their
# storage versions, so no conversion webhook stands between us and the API.
_NAMESPACED_AWS = {
    "Bucket": "s3.aws.m.upbound.io/v1beta1",
    "BucketVersioning": "s3.aws.m.upbound.io/v1beta1",
    "BucketServerSideEncryptionConfiguration": "s3.aws.m.upbound.io/v1beta1",
    "BucketPublicAccessBlock": "s3.aws.m.upbound.io/v1beta1",
    "BucketLifecycleConfiguration": "s3.aws.m.upbound.io/v1beta1",
    "Role": "iam.aws.m.upbound.io/v1beta1",
    "Policy": "iam.aws.m.upbound.io/v1beta1",
    "RolePolicyAttachment": "iam.aws.m.upbound.io/v1beta1",
}
_CLUSTER_AWS = {
    "Bucket": "s3.aws.upbound.io/v1beta2",
    "BucketVersioning": "s3.aws.upbound.io/v1beta2",
    "BucketServerSideEncryptionConfiguration": "s3.aws.upbound.io/v1beta2",
    "BucketPublicAccessBlock": "s3.aws.upbound.io/v1beta1",
    "BucketLifecycleConfiguration": "s3.aws.upbound.io/v1beta1",
    "Role": "iam.aws.upbound.io/v1beta1",
    "Policy": "iam.aws.upbound.io/v1beta1",
    "RolePolicyAttachment": "iam.aws.upbound.io/v1beta1",
}
EXTERNAL_NAME = "crossplane.io/external-name"
# Every action but Delete: crossplane-runtime's way to orphan a namespaced (v2) managed
# resource, whose kinds have no deletionPolicy.
RETAIN_POLICIES = ["Observe", "Create", "Update", "LateInitialize"]


@dataclass(frozen=True)
class Target:
    """One composite's parsed spec and input, and where its objects live."""

    spec: ControlPlaneSpec
    settings: Input
    names: Names
    legacy: bool

    @property
    def namespace(self) -> str:
        """The namespace of every namespaced object."""
        return self.names.namespace

    def object(
        self,
        api_version: str,
        kind: str,
        name: str,
        spec: dict[str, Any],
        *,
        annotations: dict[str, str] | None = None,
        namespaced: bool = True,
    ) -> dict[str, Any]:
        """A Kubernetes object of ours with deterministic metadata."""
        metadata: dict[str, Any] = {"name": name}
        if namespaced:
            metadata["namespace"] = self.namespace
        if annotations:
            metadata["annotations"] = annotations
        return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}

    def aws_object(
        self,
        kind: str,
        name: str,
        for_provider: dict[str, Any],
        *,
        external_name: str | None = None,
        retain: bool = False,
    ) -> dict[str, Any]:
        """A provider-upjet-aws managed resource in this composite's flavour.

        ``retain`` keeps the external resource when the managed resource is deleted:
        ``managementPolicies`` without Delete for a namespaced kind,
        ``deletionPolicy: Orphan`` for a cluster-scoped one.
        """
        api_versions = _CLUSTER_AWS if self.legacy else _NAMESPACED_AWS
        spec: dict[str, Any] = {
            "forProvider": for_provider,
            "providerConfigRef": self.provider_config_ref(self.settings.aws.provider_config_ref),
        }
        if retain and self.legacy:
            spec["deletionPolicy"] = "Orphan"
        elif retain:
            spec["managementPolicies"] = list(RETAIN_POLICIES)
        return self.object(
            api_versions[kind],
            kind,
            name,
            spec,
            annotations={EXTERNAL_NAME: external_name} if external_name else None,
            namespaced=not self.legacy,
        )

    def provider_config_ref(self, ref: ProviderConfigRef) -> dict[str, str]:
        """A providerConfigRef; a cluster-scoped managed resource names only the config."""
        if self.legacy:
            return {"name": ref.name}
        return {"kind": ref.kind, "name": ref.name}
