"""The version check before a restore: which Crossplane versions an archive may land on."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from provider.backup.restore.compat import Verdict, check


@dataclass
class CompatCase:
    reason: str
    archived: str
    target: str
    allowed: bool
    verdict: Verdict


COMPAT_CASES = [
    CompatCase("the same version is the same minor", "2.1.4-up.2", "2.1.4-up.2", True, "SameMinor"),
    CompatCase(
        "an older patch of the same minor is the same minor: patches keep the APIs",
        "2.1.4-up.2",
        "2.1.0-up.1",
        True,
        "SameMinor",
    ),
    CompatCase(
        "an older Upbound build of the same patch is the same minor",
        "2.1.4-up.10",
        "2.1.4-up.2",
        True,
        "SameMinor",
    ),
    CompatCase("an older minor is refused", "2.1.4-up.2", "2.0.2-up.3", False, "OlderMinor"),
    CompatCase(
        "an older major is refused whatever its minor",
        "2.0.2-up.3",
        "1.20.5-up.1",
        False,
        "OlderMinor",
    ),
    CompatCase(
        "minors compare as numbers, not text: 2.10 is newer than 2.9",
        "2.9.0-up.1",
        "2.10.0-up.1",
        True,
        "NewerMinor",
    ),
    CompatCase(
        "minors compare as numbers, not text: 2.9 is older than 2.10",
        "2.10.0-up.1",
        "2.9.0-up.1",
        False,
        "OlderMinor",
    ),
    CompatCase("a newer minor is allowed", "2.0.2-up.3", "2.1.4-up.2", True, "NewerMinor"),
    CompatCase("a newer major is allowed", "1.20.5-up.1", "2.0.2-up.3", True, "NewerMinor"),
    CompatCase(
        "a Helm chart's app version with a leading v compares like a Space's",
        "v2.1.0",
        "2.0.2-up.3",
        False,
        "OlderMinor",
    ),
    CompatCase(
        "an archive without a recorded version (all made before it was recorded) restores",
        "",
        "2.0.2-up.3",
        True,
        "Unrecorded",
    ),
    CompatCase(
        "a control plane that reports no version is not checked", "2.1.4-up.2", "", True, "Unknown"
    ),
    CompatCase(
        "a version that is not one cannot be compared, so it is not checked",
        "latest",
        "2.0.2-up.3",
        True,
        "Unparsable",
    ),
]


@pytest.mark.parametrize("case", COMPAT_CASES, ids=lambda c: c.reason)
def test_a_restore_is_refused_only_into_an_older_crossplane_minor(case: CompatCase) -> None:
    found = check(case.archived, case.target)

    assert (found.allowed, found.verdict) == (case.allowed, case.verdict)


@pytest.mark.parametrize(
    "case", [c for c in COMPAT_CASES if c.verdict != "SameMinor"], ids=lambda c: c.reason
)
def test_whatever_is_not_the_same_minor_is_said_naming_the_versions_known(
    case: CompatCase,
) -> None:
    found = check(case.archived, case.target)

    for version in (case.archived, case.target):
        assert version in found.message


def test_the_same_minor_says_nothing() -> None:
    assert check("2.1.4-up.2", "2.1.5-up.1").message == ""


def test_a_refusal_says_which_minor_the_control_plane_needs() -> None:
    found = check("2.1.4-up.2", "2.0.2-up.3")

    assert found.message == (
        "the archive was taken from Crossplane 2.1.4-up.2, and the control plane runs "
        "Crossplane 2.0.2-up.3, an older minor (2.0 < 2.1) whose CRDs may not know the "
        "archive's objects; upgrade the control plane to Crossplane 2.1 or later first"
    )
