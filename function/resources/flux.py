"""The Flux sync: a GitRepository and a Kustomization applying into the instance."""

from __future__ import annotations

from typing import Any

from function.model import Source
from function.resources import instance
from function.resources.target import Target

GIT_REPOSITORY_API_VERSION = "source.toolkit.fluxcd.io/v1"
GIT_REPOSITORY_KIND = "GitRepository"
KUSTOMIZATION_API_VERSION = "kustomize.toolkit.fluxcd.io/v1"
KUSTOMIZATION_KIND = "Kustomization"


def git_repository(target: Target, source: Source) -> dict[str, Any]:
    """The GitRepository Flux fetches the team's source from."""
    spec: dict[str, Any] = {
        "url": source.url,
        "ref": source.ref.model_dump(exclude_none=True),
        "interval": source.interval,
        "timeout": source.timeout,
        "suspend": source.suspend,
    }
    if source.secret_ref:
        spec["secretRef"] = {"name": source.secret_ref.name}
    return target.object(
        GIT_REPOSITORY_API_VERSION, GIT_REPOSITORY_KIND, target.names.instance, spec
    )


def kustomization(target: Target, source: Source) -> dict[str, Any]:
    """The Kustomization that applies the source into the instance through its kubeconfig.

    ``deletionPolicy: Orphan``: dropping the sync never deletes what it applied,
    and never hangs on a control plane that is already gone.
    """
    return target.object(
        KUSTOMIZATION_API_VERSION,
        KUSTOMIZATION_KIND,
        target.names.instance,
        {
            "sourceRef": {"kind": GIT_REPOSITORY_KIND, "name": target.names.instance},
            "path": source.path,
            "interval": source.interval,
            "timeout": source.timeout,
            "prune": source.prune,
            "wait": True,
            "suspend": source.suspend,
            "deletionPolicy": "Orphan",
            "kubeConfig": {
                "secretRef": {
                    "name": target.names.kubeconfig_secret,
                    "key": instance.KUBECONFIG_KEY,
                }
            },
        },
    )
