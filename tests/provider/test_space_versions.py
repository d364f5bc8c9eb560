"""Crossplane versions as a Space writes them, ordered as a Space orders them."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from provider.spaces import versions


@dataclass
class OrderCase:
    reason: str
    older: str
    newer: str


ORDER_CASES = [
    OrderCase("a later minor is newer whatever the build", "2.0.2-up.3", "2.1.4-up.2"),
    OrderCase("builds compare as numbers, not as text", "2.1.4-up.2", "2.1.4-up.10"),
    OrderCase("patches compare as numbers, not as text", "2.1.9-up.1", "2.1.10-up.1"),
    OrderCase("a later major is newer", "1.20.5-up.1", "2.0.2-up.3"),
    OrderCase("an upstream release sorts before Upbound's builds of it", "2.1.4", "2.1.4-up.1"),
    OrderCase("a release candidate sorts before a build", "2.1.4-rc.1", "2.1.4-up.1"),
]


@pytest.mark.parametrize("case", ORDER_CASES, ids=lambda c: c.reason)
def test_versions_are_ordered_field_by_field(case: OrderCase) -> None:
    older, newer = versions.parse(case.older), versions.parse(case.newer)
    assert older is not None and newer is not None
    assert older < newer, case.reason
    assert versions.newer_or_same(case.newer, case.older), case.reason
    assert not versions.newer_or_same(case.older, case.newer), case.reason


@dataclass
class SameCase:
    reason: str
    observed: str
    wanted: str
    newer_or_same: bool


SAME_CASES = [
    SameCase("a version is as new as itself", "2.1.4-up.2", "2.1.4-up.2", newer_or_same=True),
    SameCase("text that is no version equals only itself", "latest", "latest", newer_or_same=True),
    SameCase(
        "nothing is known of the order of text that is no version",
        "latest",
        "2.1.4-up.2",
        newer_or_same=False,
    ),
    SameCase("a leading v is no version", "v2.1.5-up.1", "2.1.4-up.2", newer_or_same=False),
]


@pytest.mark.parametrize("case", SAME_CASES, ids=lambda c: c.reason)
def test_newer_or_same_knows_only_the_order_of_versions(case: SameCase) -> None:
    assert versions.newer_or_same(case.observed, case.wanted) is case.newer_or_same, case.reason


@pytest.mark.parametrize("text", ["", "2.1", "v2.1.4", "2.1.4-", "2.1.4-up..1", "2.1.x-up.1"])
def test_text_that_is_not_a_version_parses_to_none(text: str) -> None:
    assert versions.parse(text) is None
