"""The Flux sync: a GitRepository and one Kustomization per stage, applying into the instance."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.model import HealthCheckExpr, Source
from function.resources import instance
from function.resources.target import Target

GIT_REPOSITORY_API_VERSION = "source.toolkit.fluxcd.io/v1"
GIT_REPOSITORY_KIND = "GitRepository"
KUSTOMIZATION_API_VERSION = "kustomize.toolkit.fluxcd.io/v1"
KUSTOMIZATION_KIND = "Kustomization"
SOPS = "sops"


def _conditions_true(*types: str) -> str:
    """CEL: each condition type is present and True.

    ``exists`` rather than Flux's ``filter(...).all(...)`` form, which is also
    true while the condition is not there yet; ``has`` because an expression
    over a missing field holds the check until its timeout.
    """
    checks = " && ".join(
        f"status.conditions.exists(c, c.type == '{kind}' && c.status == 'True')" for kind in types
    )
    return f"has(status.conditions) && {checks}"


_PACKAGE_CURRENT = _conditions_true("Installed", "Healthy")
_XRD_CURRENT = _conditions_true("Established")

# ``wait: true`` means what it says for Crossplane's own kinds: a package is
# current once installed and healthy, an XRD once its CRD is established.
# Flux matches an expression by apiVersion and kind exactly, so composites and
# managed resources (whose kinds no one knows in advance) cannot have defaults:
# the platform names them in the input, a team in its stages.
CROSSPLANE_HEALTH_CHECKS = (
    *(
        HealthCheckExpr(api_version=api_version, kind=kind, current=_PACKAGE_CURRENT)
        for api_version, kind in (
            ("pkg.crossplane.io/v1", "Provider"),
            ("pkg.crossplane.io/v1", "Function"),
            ("pkg.crossplane.io/v1beta1", "Function"),
            ("pkg.crossplane.io/v1", "Configuration"),
        )
    ),
    *(
        HealthCheckExpr(
            api_version=api_version, kind="CompositeResourceDefinition", current=_XRD_CURRENT
        )
        for api_version in ("apiextensions.crossplane.io/v1", "apiextensions.crossplane.io/v2")
    ),
)


@dataclass(frozen=True)
class Stage:
    """One Kustomization of the sync."""

    # The Kustomization's name, and the names of the Kustomizations it waits for.
    name: str
    path: str
    timeout: str
    depends_on: tuple[str, ...] = ()
    # The stage's own health checks, after the platform's.
    health_check_exprs: tuple[HealthCheckExpr, ...] = ()


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


def kustomization(
    target: Target, source: Source, stage: Stage, variables: Mapping[str, str]
) -> dict[str, Any]:
    """A Kustomization applying one stage of the source into the instance through its kubeconfig.

    ``deletionPolicy: Orphan``: dropping the sync never deletes what it applied,
    and never hangs on a control plane that is already gone. ``variables`` are
    every variable substituted, the platform's and the team's.
    """
    checks = (
        *CROSSPLANE_HEALTH_CHECKS,
        *target.settings.source.health_check_exprs,
        *stage.health_check_exprs,
    )
    post_build: dict[str, Any] = {"substitute": dict(variables)}
    if source.substitute_from:
        post_build["substituteFrom"] = [
            ref.model_dump(by_alias=True) for ref in source.substitute_from
        ]
    spec: dict[str, Any] = {
        "sourceRef": {"kind": GIT_REPOSITORY_KIND, "name": target.names.instance},
        "path": stage.path,
        "interval": source.interval,
        "timeout": stage.timeout,
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
        "healthCheckExprs": [
            check.model_dump(by_alias=True, exclude_none=True) for check in checks
        ],
        "postBuild": post_build,
        "force": source.force,
    }
    if stage.depends_on:
        spec["dependsOn"] = [{"name": name} for name in stage.depends_on]
    if source.decryption is not None:
        spec["decryption"] = {
            "provider": SOPS,
            "secretRef": {"name": source.decryption.secret_ref.name},
        }
    return target.object(KUSTOMIZATION_API_VERSION, KUSTOMIZATION_KIND, stage.name, spec)
