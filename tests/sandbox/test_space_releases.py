"""The simulated Space's releases: where each channel takes a control plane."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from sandbox.space_releases import Releases

OFFERED = ["1.20.5-up.1", "2.0.2-up.3", "2.1.4-up.2", "2.1.5-up.1", "2.2.1-up.1"]


@dataclass
class TargetCase:
    reason: str
    channel: str
    current: str | None
    target: str | None


TARGET_CASES = [
    TargetCase("None never moves", "None", "2.0.2-up.3", None),
    TargetCase("Patch moves to the latest patch of its minor", "Patch", "2.1.4-up.2", "2.1.5-up.1"),
    TargetCase(
        "Stable moves to the latest patch of minor N-1", "Stable", "2.0.2-up.3", "2.1.5-up.1"
    ),
    TargetCase("Rapid moves to the latest patch of minor N", "Rapid", "2.1.4-up.2", "2.2.1-up.1"),
    TargetCase(
        "Rapid two minors behind moves one minor, as a Space's upgrades go minor by minor",
        "Rapid",
        "2.0.2-up.3",
        "2.1.5-up.1",
    ),
    TargetCase("Stable never moves down from minor N", "Stable", "2.2.1-up.1", None),
    TargetCase("a channel never crosses a major", "Rapid", "1.20.5-up.1", None),
    TargetCase(
        "no version gets the Stable release of the latest major", "Rapid", None, "2.1.5-up.1"
    ),
    TargetCase("text that is no version is left alone", "Rapid", "latest", None),
]


@pytest.mark.parametrize("case", TARGET_CASES, ids=lambda c: c.reason)
def test_each_channel_moves_a_control_plane_as_the_docs_say(case: TargetCase) -> None:
    releases = Releases(supported=list(OFFERED))
    assert releases.target(case.channel, case.current) == case.target, case.reason


def test_a_retired_release_is_no_longer_supported_and_a_published_one_is() -> None:
    releases = Releases(supported=list(OFFERED))
    releases.retire("1.20.5-up.1")
    releases.publish("2.2.2-up.1")
    assert not releases.is_supported("1.20.5-up.1")
    assert releases.is_supported("2.2.2-up.1")
    assert releases.oldest_minor() == "2.0"
    assert releases.target("Patch", "2.2.1-up.1") == "2.2.2-up.1"


@pytest.mark.parametrize("version", ["2.1.4", "v2.1.4-up.1", "latest"])
def test_a_release_must_be_in_a_spaces_form(version: str) -> None:
    with pytest.raises(ValueError, match="is not a UXP version"):
        Releases().publish(version)
