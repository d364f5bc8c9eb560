"""The provider-aws packages the sandbox serves: real names and versions, the stand-in as runtime.

The Configuration depends on `xpkg.upbound.io/upbound/provider-aws-s3` and
`-iam` (package/configuration/crossplane.yaml), which depend on
`provider-family-aws`, as Upbound publishes them (every service package
depends on the family's config package and carries the family's label:
crossplane-contrib/provider-upjet-aws#680). provider-aws cannot run
here (no AWS, and it takes more than 40 minutes to build), so the sandbox
pushes packages of the same names, at the release whose CRDs tools/crds.lock
pins, to its loopback registry, and Crossplane's package manager resolves
and installs them for real: their CRDs (the pinned upstream ones of the
kinds the compositions compose, `.tools/crds/provider-aws`), their
revisions, their RBAC (the RBAC manager's roles), and each one's
ServiceAccount. The runtime behind them is the AWS stand-in
(`sandbox.awsstandin`), run as those ServiceAccounts.

What differs from Upbound's packages: each holds only the CRDs tools/crds.lock
pins (the kinds the compositions compose), the family holds none (its
ProviderConfig kinds are not pinned: the stand-in reads no ProviderConfig),
and none embeds a runtime image.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import yaml

from sandbox.paths import REPO_ROOT, UPSTREAM_CRDS
from sandbox.registry import Package

PREFIX = "xpkg.upbound.io/upbound/"
FAMILY = "provider-family-aws"
# The members of the family the compositions compose for, by the API group of their kinds.
MEMBERS = {"provider-aws-s3": "s3", "provider-aws-iam": "iam"}
CRDS = UPSTREAM_CRDS / "provider-aws"
_LOCK = REPO_ROOT / "tools" / "crds.lock"
_MODULE = re.compile(r"^module github\.com/upbound/provider-aws/v\d+ (v\S+) ", re.MULTILINE)
_DESCRIPTION = (
    "The sandbox's stand-in for Upbound's package of this name: the pinned "
    "upstream CRDs, reconciled by the AWS stand-in (sandbox/awsstandin)."
)


def version() -> str:
    """The provider-aws release tools/crds.lock pins the CRDs of."""
    found = _MODULE.search(_LOCK.read_text())
    if found is None:
        raise ValueError(f"{_LOCK} pins no github.com/upbound/provider-aws module")
    return found.group(1)


def _meta(name: str, depends_on_family: bool) -> dict[str, object]:
    spec: dict[str, object] = {"crossplane": {"version": ">=v2.0.0"}}
    if depends_on_family:
        spec["dependsOn"] = [
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Provider",
                "package": f"{PREFIX}{FAMILY}",
                "version": f">={version()}",
            }
        ]
    return {
        "apiVersion": "meta.pkg.crossplane.io/v1",
        "kind": "Provider",
        "metadata": {
            "name": name,
            # As Upbound labels every package of the family (crossplane-contrib/
            # provider-upjet-aws#680): the RBAC manager lets a family's members
            # use each other's kinds (the family's ProviderConfigs).
            "labels": {"pkg.crossplane.io/provider-family": FAMILY},
            "annotations": {"meta.crossplane.io/description": _DESCRIPTION},
        },
        "spec": spec,
    }


def packages(workdir: Path) -> list[Package]:
    """The family and its members, their package roots assembled under `workdir`."""
    found = []
    for name, group in ((FAMILY, None), *MEMBERS.items()):
        root = workdir / name
        shutil.rmtree(root, ignore_errors=True)
        (root / "crds").mkdir(parents=True)
        (root / "crossplane.yaml").write_text(
            yaml.safe_dump(_meta(name, group is not None), sort_keys=False)
        )
        if group is not None:
            for crd in sorted(CRDS.glob(f"{group}.*.yaml")):
                shutil.copyfile(crd, root / "crds" / crd.name)
        found.append(Package(root, name, PREFIX, version()))
    return found


def dependency_name(package: Package) -> str:
    """The name Crossplane's package manager gives a package it installs as a dependency."""
    return package.path.replace("/", "-")
