"""A restored control plane held to its archive's promises: pure, no servers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from provider.backup.format.archive import ResourceType
from provider.backup.verify import checks
from provider.backup.verify.checks import Observed, Ref

CONFIGMAP = ResourceType("configmaps", "", "v1", "ConfigMap", namespaced=True)
BUCKET = ResourceType(
    "buckets", "s3.aws.upbound.io", "v1beta1", "Bucket", namespaced=False, categories=("managed",)
)
PROVIDER = ResourceType("providers", "pkg.crossplane.io", "v1", "Provider", namespaced=False)
LOCK = ResourceType("locks", "pkg.crossplane.io", "v1beta1", "Lock", namespaced=False)
TYPES = {t.folder: t for t in (CONFIGMAP, BUCKET, PROVIDER, LOCK)}

SETTINGS = Ref("configmaps", "app", "settings")
KEPT = Ref("buckets.s3.aws.upbound.io", "", "kept")
HELD = Ref("buckets.s3.aws.upbound.io", "", "held")
AWS = Ref("providers.pkg.crossplane.io", "", "provider-aws")
CRDS = ("buckets.s3.aws.upbound.io", "providers.pkg.crossplane.io", "locks.pkg.crossplane.io")


def obj(name: str, namespace: str = "", annotations: Mapping[str, str] | None = None) -> Any:
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"metadata": metadata}


ARCHIVE = [
    (CONFIGMAP, obj("settings", "app")),
    (BUCKET, obj("kept")),
    (BUCKET, obj("held", annotations={"crossplane.io/paused": "true"})),
    (PROVIDER, obj("provider-aws")),
    # The package manager writes its Lock again: nothing to hold a restore to.
    (LOCK, obj("lock")),
]
EXPECTED = checks.expect(TYPES, ARCHIVE)


def condition(kind: str, status: str = "True", reason: str = "", message: str = "") -> Any:
    return {"type": kind, "status": status, "reason": reason, "message": message}


HEALTHY = [condition("Installed", reason="ActivePackageRevision"), condition("Healthy")]
ESTABLISHED = [condition("Established")]


def observed(
    *,
    present: Sequence[Ref] = (SETTINGS, KEPT, HELD, AWS),
    paused: Mapping[Ref, bool] | None = None,
    crds: Mapping[str, Sequence[Any]] | None = None,
    packages: Mapping[Ref, Sequence[Any]] | None = None,
) -> Observed:
    return Observed(
        frozenset(present),
        {KEPT: False, HELD: True} if paused is None else paused,
        dict.fromkeys(CRDS, ESTABLISHED) if crds is None else crds,
        {AWS: HEALTHY} if packages is None else packages,
    )


@dataclass
class CheckCase:
    reason: str
    observed: Observed
    problems: list[str] = field(default_factory=list)


CHECK_CASES = [
    CheckCase(
        "a control plane holding everything, settled, passes",
        observed(),
    ),
    CheckCase(
        "an object the archive holds and the control plane lacks is named",
        observed(present=(KEPT, HELD, AWS)),
        ["1 of 4 objects of the archive are not in the control plane: ConfigMap app/settings"],
    ),
    CheckCase(
        "a CRD that is gone is named",
        observed(crds={n: ESTABLISHED for n in CRDS if not n.startswith("buckets")}),
        ["CustomResourceDefinition buckets.s3.aws.upbound.io is not there"],
    ),
    CheckCase(
        "a CRD not Established says why in its own condition's words",
        observed(
            crds={
                **dict.fromkeys(CRDS, ESTABLISHED),
                "buckets.s3.aws.upbound.io": [
                    condition("Established", "False", "NotAccepted", "names conflict")
                ],
            }
        ),
        [
            "CustomResourceDefinition buckets.s3.aws.upbound.io is not Established: "
            "NotAccepted: names conflict"
        ],
    ),
    CheckCase(
        "a package that cannot install fails with its Installed condition's message",
        observed(
            packages={
                AWS: [
                    condition(
                        "Installed",
                        "False",
                        "UnpackPackage",
                        "cannot unpack package: failed to fetch package digest",
                    ),
                    condition("Healthy", "False", "UnknownPackageRevisionHealth"),
                ]
            }
        ),
        [
            "Provider provider-aws is not Installed: UnpackPackage: cannot unpack package: "
            "failed to fetch package digest"
        ],
    ),
    CheckCase(
        "an installed package that is not Healthy fails with Healthy's words",
        observed(
            packages={
                AWS: [
                    condition("Installed"),
                    condition("Healthy", "False", "UnhealthyPackageRevision", "crashloop"),
                ]
            }
        ),
        ["Provider provider-aws is not Healthy: UnhealthyPackageRevision: crashloop"],
    ),
    CheckCase(
        "a package the package manager has not looked at yet says it has no condition",
        observed(packages={AWS: []}),
        ["Provider provider-aws is not Installed (no such condition yet)"],
    ),
    CheckCase(
        "a managed resource paused in the archive but not in the control plane is named",
        observed(paused={KEPT: False, HELD: False}),
        [
            "1 managed resources are not paused as in the archive: Bucket held is not paused "
            "(it was paused in the archive)"
        ],
    ),
    CheckCase(
        "a managed resource left paused that was not paused in the archive is named",
        observed(paused={KEPT: True, HELD: True}),
        [
            "1 managed resources are not paused as in the archive: Bucket kept is paused "
            "(it was not paused in the archive)"
        ],
    ),
    CheckCase(
        "a missing package is said once, as missing, not again as uninstalled",
        observed(present=(SETTINGS, KEPT, HELD), packages={}),
        ["1 of 4 objects of the archive are not in the control plane: Provider provider-aws"],
    ),
]


@pytest.mark.parametrize("case", CHECK_CASES, ids=lambda c: c.reason)
def test_a_restored_control_plane_fails_the_check_with_each_broken_promise_in_words(
    case: CheckCase,
) -> None:
    report = checks.check(EXPECTED, case.observed)

    assert [p.message for p in report.problems] == case.problems
    assert report.passed == (not case.problems)


def test_an_archive_promises_objects_crds_packages_and_pauses_not_what_crossplane_remakes() -> None:
    assert EXPECTED.objects == {SETTINGS, KEPT, HELD, AWS}
    assert EXPECTED.paused == {KEPT: False, HELD: True}
    assert EXPECTED.packages == {AWS}
    assert EXPECTED.crds == set(CRDS)


def test_a_passing_check_says_what_was_checked() -> None:
    assert checks.check(EXPECTED, observed()).summary() == (
        "4 objects present, 3 CRDs Established, 1 packages Installed and Healthy, "
        "2 managed resources paused as in the archive"
    )


def test_thousands_of_missing_objects_name_a_few_and_count_the_rest() -> None:
    many = [(CONFIGMAP, obj(f"c-{i:04}", "app")) for i in range(2000)]
    expected = checks.expect({CONFIGMAP.folder: CONFIGMAP}, many)

    report = checks.check(expected, Observed(frozenset()))

    assert report.summary() == (
        "2000 of 2000 objects of the archive are not in the control plane: ConfigMap app/c-0000, "
        "ConfigMap app/c-0001, ConfigMap app/c-0002, ConfigMap app/c-0003, ConfigMap app/c-0004 "
        "and 1995 more"
    )
