"""Which kinds a stage installs, so a later stage's objects of those kinds are planned, not refused.

A kind the control plane does not serve yet is served once Flux has applied
what defines it: a CustomResourceDefinition (in an earlier stage, or in the
same one, which Flux applies first and waits for), a Crossplane XRD (its
composite and claim kinds; an earlier stage only, since Flux waits only for
CRDs within a stage), or a Crossplane package that a push installs or
upgrades (an earlier stage: which kinds a package brings is known only once
it is unpacked). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from plan.changes import Built, ObjectId

CRD = ("apiextensions.k8s.io", "CustomResourceDefinition")
XRD = ("apiextensions.crossplane.io", "CompositeResourceDefinition")
PACKAGE_GROUP = "pkg.crossplane.io"
PACKAGE_KINDS = frozenset({"Provider", "Configuration", "Function"})
NAMESPACE = ("", "Namespace")


@dataclass(frozen=True)
class Installs:
    """What one stage's push defines: kinds by group, packages, and namespaces."""

    stage: str
    crds: frozenset[tuple[str, str]] = frozenset()
    xrds: frozenset[tuple[str, str]] = frozenset()
    packages: tuple[str, ...] = ()
    namespaces: frozenset[str] = frozenset()


def installs(stage: str, created_or_changed: Iterable[Built]) -> Installs:
    """What ``stage`` defines through the objects a push creates or changes in it."""
    crds, xrds, packages, namespaces = set(), set(), [], set()
    for item in created_or_changed:
        obj, key = item.object, item.id
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        if (key.group, key.kind) == CRD:
            crds.add((str(spec.get("group")), str(names.get("kind"))))
        elif (key.group, key.kind) == XRD:
            xrds.add((str(spec.get("group")), str(names.get("kind"))))
            claim = (spec.get("claimNames") or {}).get("kind")
            if claim:
                xrds.add((str(spec.get("group")), str(claim)))
        elif key.group == PACKAGE_GROUP and key.kind in PACKAGE_KINDS:
            packages.append(str(key))
        elif (key.group, key.kind) == NAMESPACE:
            namespaces.add(key.name)
    return Installs(stage, frozenset(crds), frozenset(xrds), tuple(packages), frozenset(namespaces))


def installed_by(key: ObjectId, same: Installs, earlier: Sequence[Installs]) -> str:
    """Why an object of a kind not served yet will be: a note, or empty when nothing defines it."""
    wanted = (key.group, key.kind)
    if wanted in same.crds:
        return "its kind is defined by a CustomResourceDefinition of this stage, applied first"
    for stage in earlier:
        if wanted in stage.crds:
            return f"its kind is defined by a CustomResourceDefinition of stage {stage.stage}"
        if wanted in stage.xrds:
            return f"its kind is defined by an XRD of stage {stage.stage}"
    for stage in earlier:
        if stage.packages:
            return (
                f"its kind is not served yet; stage {stage.stage} installs "
                f"{', '.join(stage.packages)} first"
            )
    return ""


def namespace_created(namespace: str, same: Installs, earlier: Sequence[Installs]) -> bool:
    """Whether this push creates ``namespace`` in this stage or an earlier one."""
    return any(namespace in stage.namespaces for stage in (same, *earlier))
