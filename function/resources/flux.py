"""The Flux sync: a GitRepository and one Kustomization per stage, applying into the instance."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from function.model import HealthCheckExpr, InvalidError, Source
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
# A package fails at once only where Crossplane says it cannot be fetched:
# Installed=False UnpackingPackage is set on nothing but a failed fetch of the
# package (crossplane v2.2.1 internal/controller/pkg/manager/reconciler.go),
# while Healthy=False is what every package reports as long as its revision's
# health is unknown (apis/pkg/v1 PackageHealth), so that waits for the timeout.
_PACKAGE_FAILED = (
    "has(status.conditions) && status.conditions.exists(c, c.type == 'Installed' && "
    "c.status == 'False' && has(c.reason) && c.reason == 'UnpackingPackage')"
)
_XRD_CURRENT = _conditions_true("Established")

# ``wait: true`` means what it says for Crossplane's own kinds: a package is
# current once installed and healthy (failed once it cannot be fetched), an XRD
# once its CRD is established.
# Flux matches an expression by group and kind (any version), and refuses a
# Kustomization with two expressions for one group and kind ("duplicate custom
# health check for GroupKind"): one each. Composites and managed resources
# (whose kinds no one knows in advance) cannot have defaults: the platform
# names them in the input, a team in its stages.
CROSSPLANE_HEALTH_CHECKS = (
    *(
        HealthCheckExpr(
            api_version="pkg.crossplane.io/v1",
            kind=kind,
            current=_PACKAGE_CURRENT,
            failed=_PACKAGE_FAILED,
        )
        for kind in ("Provider", "Function", "Configuration")
    ),
    HealthCheckExpr(
        api_version="apiextensions.crossplane.io/v1",
        kind="CompositeResourceDefinition",
        current=_XRD_CURRENT,
    ),
)


def group_kind(check: HealthCheckExpr) -> str:
    """``Kind.group`` (``*.group`` without a kind), what Flux tells health checks apart by."""
    group = check.api_version.rpartition("/")[0]
    kind = check.kind or "*"
    return f"{kind}.{group}" if group else kind


def check_health_checks(
    platform: tuple[HealthCheckExpr, ...],
    stages: tuple[tuple[str, tuple[HealthCheckExpr, ...]], ...],
) -> None:
    """Refuse a health check of a kind an earlier one checks: Flux fails the whole Kustomization.

    ``platform`` are the input's, ``stages`` each stage's field path and its own.

    Raises:
        InvalidError: naming the field, the kind and the rule.
    """
    taken = {group_kind(check) for check in CROSSPLANE_HEALTH_CHECKS}
    for index, check in enumerate(platform):
        _claim(taken, check, f"input.source.healthCheckExprs[{index}]", "the function's defaults")
        taken.add(group_kind(check))
    for path, checks in stages:
        seen = set(taken)
        for index, check in enumerate(checks):
            _claim(seen, check, f"{path}.healthCheckExprs[{index}]", "the platform's")
            seen.add(group_kind(check))


def _claim(taken: set[str], check: HealthCheckExpr, path: str, whose: str) -> None:
    if group_kind(check) in taken:
        msg = (
            f"{path}: {group_kind(check)} already has a health check ({whose} or an earlier "
            "one); Flux takes one per kind"
        )
        raise InvalidError(msg)


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
