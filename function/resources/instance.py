"""The Instance: the managed resource that is the hosted control plane."""

from __future__ import annotations

from typing import Any

from function.resources.target import Target

API_VERSION = "controlplane.spaces.upbound.io/v1alpha1"
KIND = "Instance"
KUBECONFIG_KEY = "kubeconfig"


def instance(target: Target, restore_from: str | None) -> dict[str, Any]:
    """The desired Instance; ``restore_from`` names a Backup only at creation."""
    spec = target.spec
    crossplane: dict[str, Any] = {"autoUpgrade": {"channel": spec.channel.value}}
    if spec.crossplane_version:
        crossplane["version"] = spec.crossplane_version
    for_provider: dict[str, Any] = {"crossplane": crossplane}
    if spec.class_:
        for_provider["class"] = spec.class_
    if restore_from:
        for_provider["initialRestorationFrom"] = {"backupRef": {"name": restore_from}}
    return target.object(
        API_VERSION,
        KIND,
        target.names.instance,
        {
            "forProvider": for_provider,
            "providerConfigRef": dict(target.settings.instance.provider_config_ref.model_dump()),
            "writeConnectionSecretToRef": {"name": target.names.kubeconfig_secret},
        },
    )
