"""Whether a restored control plane holds what its archive promised: pure, no I/O.

A restore that ended without an error is not yet proof: a package may never
install, a CRD never be served, an object be dropped by a webhook or garbage
collected, a managed resource be left paused or unpaused. A restore check
(``controlplane-backup verify --restore``, and a BackupSchedule's drill) holds
the control plane to the archive:

- every object of the archive is present (what Crossplane makes again,
  ``source.export.reinstalled``, aside);
- the CRD of every custom type of the archive is Established;
- every package of the archive (a Provider, Configuration or Function) is
  Installed and Healthy;
- every managed resource is paused exactly when it was paused in the archive.

``expect`` reads what an archive promises; ``check`` compares it with what
the control plane shows (``Observed``, gathered by ``verify.observe``)
and says each problem in words an operator can act on, quoting a package's or
a CRD's own condition message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provider.backup.format.archive import ResourceType
from provider.backup.source.export import reinstalled
from provider.managed import meta

PACKAGE_GROUP = "pkg.crossplane.io"
PACKAGE_KINDS = frozenset({"Provider", "Configuration", "Function"})
PACKAGE_CONDITIONS = ("Installed", "Healthy")
ESTABLISHED = "Established"
# Objects named per kind of problem before the rest are counted: a failed check
# of an archive of thousands of objects stays a few lines.
NAMED_PER_PROBLEM = 5


@dataclass(frozen=True, order=True)
class Ref:
    """An object of the archive: its type's folder, namespace ("" if cluster-scoped) and name."""

    folder: str
    namespace: str
    name: str


@dataclass(frozen=True)
class Expected:
    """What an archive promises a control plane it is restored into holds."""

    # Every object's type (by folder) and its objects.
    types: Mapping[str, ResourceType]
    objects: frozenset[Ref]
    # Managed resources, and whether each was paused in the archive.
    paused: Mapping[Ref, bool]
    # The CRD (``<resource>.<group>``) of every custom type.
    crds: frozenset[str]
    # The packages (Provider, Configuration, Function objects).
    packages: frozenset[Ref]


@dataclass(frozen=True)
class Observed:
    """What the control plane shows of what an archive promises (nothing else)."""

    # The objects of the archive found there.
    present: frozenset[Ref]
    # Managed resources found, and whether each is paused.
    paused: Mapping[Ref, bool] = field(default_factory=dict)
    # CRDs found, with their conditions.
    crds: Mapping[str, Sequence[Mapping[str, Any]]] = field(default_factory=dict)
    # Packages found, with their conditions.
    packages: Mapping[Ref, Sequence[Mapping[str, Any]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """One thing the control plane does not hold as the archive promised, in words."""

    # missing, crd, package or paused: what kind of promise was broken.
    kind: str
    message: str


@dataclass(frozen=True)
class Report:
    """What a check found: problems (none when the restore holds) and what was checked."""

    problems: tuple[Problem, ...]
    objects: int
    crds: int
    packages: int
    managed: int

    @property
    def passed(self) -> bool:
        """Whether the control plane holds everything the archive promised."""
        return not self.problems

    def summary(self) -> str:
        """One line: what was checked, or every problem, joined."""
        if self.passed:
            return (
                f"{self.objects} objects present, {self.crds} CRDs Established, "
                f"{self.packages} packages Installed and Healthy, {self.managed} managed "
                "resources paused as in the archive"
            )
        return "; ".join(problem.message for problem in self.problems)


def is_package(rtype: ResourceType) -> bool:
    """Whether objects of ``rtype`` are Crossplane packages."""
    return rtype.group == PACKAGE_GROUP and rtype.kind in PACKAGE_KINDS


def expect(
    types: Mapping[str, ResourceType], objects: Iterable[tuple[ResourceType, Mapping[str, Any]]]
) -> Expected:
    """What an archive with ``types`` and ``objects`` promises (``archive.objects``' pairs)."""
    refs: set[Ref] = set()
    paused: dict[Ref, bool] = {}
    packages: set[Ref] = set()
    for rtype, obj in objects:
        if reinstalled(rtype, obj) is not None:
            continue
        ref = ref_of(rtype, obj)
        refs.add(ref)
        if rtype.managed:
            paused[ref] = meta.is_paused(obj)
        if is_package(rtype):
            packages.add(ref)
    crds = frozenset(rtype.folder for rtype in types.values() if rtype.group)
    return Expected(dict(types), frozenset(refs), paused, crds, frozenset(packages))


def ref_of(rtype: ResourceType, obj: Mapping[str, Any]) -> Ref:
    """The reference of ``obj``, an object of ``rtype``."""
    metadata = obj.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "") if rtype.namespaced else ""
    return Ref(rtype.folder, namespace, str(metadata.get("name") or ""))


def check(expected: Expected, observed: Observed) -> Report:
    """Hold what the control plane shows against what the archive promised."""
    problems = [
        *_missing(expected, observed),
        *_crds(expected, observed),
        *_packages(expected, observed),
        *_paused(expected, observed),
    ]
    return Report(
        tuple(problems),
        objects=len(expected.objects),
        crds=len(expected.crds),
        packages=len(expected.packages),
        managed=len(expected.paused),
    )


def _missing(expected: Expected, observed: Observed) -> list[Problem]:
    missing = sorted(expected.objects - observed.present)
    if not missing:
        return []
    named = ", ".join(_printable(expected, ref) for ref in missing[:NAMED_PER_PROBLEM])
    more = len(missing) - NAMED_PER_PROBLEM
    rest = f" and {more} more" if more > 0 else ""
    return [
        Problem(
            "missing",
            f"{len(missing)} of {len(expected.objects)} objects of the archive are not in the "
            f"control plane: {named}{rest}",
        )
    ]


def _crds(expected: Expected, observed: Observed) -> list[Problem]:
    problems = []
    for name in sorted(expected.crds):
        conditions = observed.crds.get(name)
        if conditions is None:
            problems.append(Problem("crd", f"CustomResourceDefinition {name} is not there"))
            continue
        established = _condition(conditions, ESTABLISHED)
        if established is None or established.get("status") != "True":
            problems.append(
                Problem(
                    "crd",
                    f"CustomResourceDefinition {name} is not Established{_because(established)}",
                )
            )
    return problems


def _packages(expected: Expected, observed: Observed) -> list[Problem]:
    problems = []
    for ref in sorted(expected.packages):
        what = _printable(expected, ref)
        conditions = observed.packages.get(ref)
        if conditions is None:
            # Counted with the missing objects already.
            continue
        for wanted in PACKAGE_CONDITIONS:
            found = _condition(conditions, wanted)
            if found is None or found.get("status") != "True":
                problems.append(Problem("package", f"{what} is not {wanted}{_because(found)}"))
                # Not Installed says why; Healthy cannot be true without it.
                break
    return problems


def _paused(expected: Expected, observed: Observed) -> list[Problem]:
    wrong = sorted(
        ref
        for ref, paused in expected.paused.items()
        if ref in observed.paused and observed.paused[ref] != paused
    )
    if not wrong:
        return []
    described = [
        f"{_printable(expected, ref)} is "
        f"{'paused' if observed.paused[ref] else 'not paused'} "
        f"(it was {'paused' if expected.paused[ref] else 'not paused'} in the archive)"
        for ref in wrong[:NAMED_PER_PROBLEM]
    ]
    more = len(wrong) - NAMED_PER_PROBLEM
    rest = f" and {more} more" if more > 0 else ""
    return [
        Problem(
            "paused",
            f"{len(wrong)} managed resources are not paused as in the archive: "
            f"{', '.join(described)}{rest}",
        )
    ]


def _condition(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in conditions if c.get("type") == kind), None)


def _because(condition: Mapping[str, Any] | None) -> str:
    """The condition's own words: ``: <reason>: <message>``, or that it has none yet."""
    if condition is None:
        return " (no such condition yet)"
    reason, message = str(condition.get("reason") or ""), str(condition.get("message") or "")
    said = ": ".join(part for part in (reason, message) if part)
    return f": {said}" if said else ""


def _printable(expected: Expected, ref: Ref) -> str:
    rtype = expected.types.get(ref.folder)
    kind = rtype.kind if rtype is not None else ref.folder
    where = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
    return f"{kind} {where}"
