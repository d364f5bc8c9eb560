"""Upgrades in steps: what the provider writes when an Instance asks for more than one minor."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from provider.spaces import upgrades

# What the Space supports, as the operator lists it (--crossplane-release).
RELEASES = ("1.20.5-up.1", "2.0.2-up.3", "2.1.4-up.2", "2.1.5-up.1", "2.2.1-up.1", "2.3.0-up.1")


@dataclass
class StepCase:
    reason: str
    observed: str | None
    wanted: str
    settled: bool
    send: str | None
    target: str = ""
    stuck: bool = False
    releases: tuple[str, ...] = RELEASES


STEP_CASES = [
    StepCase("a first version is sent as it is", None, "2.2.1-up.1", False, "2.2.1-up.1"),
    StepCase(
        "a patch of the same minor is sent at once, settled or not",
        "2.1.4-up.2",
        "2.1.5-up.1",
        False,
        "2.1.5-up.1",
    ),
    StepCase(
        "the next minor is sent once the control plane is settled",
        "2.1.4-up.2",
        "2.2.1-up.1",
        True,
        "2.2.1-up.1",
    ),
    StepCase(
        "the next minor waits while the Space has not answered the last write",
        "2.1.5-up.1",
        "2.2.1-up.1",
        False,
        None,
        target="2.2.1-up.1",
    ),
    StepCase(
        "two minors up goes through the latest release of the minor between",
        "2.0.2-up.3",
        "2.2.1-up.1",
        True,
        "2.1.5-up.1",
        target="2.2.1-up.1",
    ),
    StepCase(
        "three minors up goes to the first minor between only",
        "2.0.2-up.3",
        "2.3.0-up.1",
        True,
        "2.1.5-up.1",
        target="2.3.0-up.1",
    ),
    StepCase(
        "across a major the last minor of the old major comes first, as 1.20 before 2.0",
        "1.20.5-up.1",
        "2.1.4-up.2",
        True,
        "2.0.2-up.3",
        target="2.1.4-up.2",
    ),
    StepCase(
        "no release known of the minor between: nothing is sent, and it says so",
        "2.0.2-up.3",
        "2.2.1-up.1",
        True,
        None,
        target="2.2.1-up.1",
        stuck=True,
        releases=("2.0.2-up.3", "2.2.1-up.1"),
    ),
    StepCase(
        "a downgrade is sent for the Space to refuse in its words",
        "2.2.1-up.1",
        "2.0.2-up.3",
        False,
        "2.0.2-up.3",
    ),
    StepCase("text that is no version is sent as it is", "2.0.2-up.3", "latest", True, "latest"),
]


@pytest.mark.parametrize("case", STEP_CASES, ids=lambda c: c.reason)
def test_an_upgrade_goes_one_minor_at_a_time_each_once_the_control_plane_is_healthy(
    case: StepCase,
) -> None:
    step = upgrades.plan(case.observed, case.wanted, case.releases, settled=case.settled)
    assert (step.send, step.target, step.stuck) == (case.send, case.target, case.stuck), case.reason
    assert bool(step.message) == bool(step.target), case.reason


def test_a_stuck_upgrade_names_the_minor_it_lacks_and_the_setting() -> None:
    step = upgrades.plan("2.0.2-up.3", "2.2.1-up.1", ("2.2.1-up.1",), settled=True)
    assert "no 2.1 release is known" in step.message
    assert "--crossplane-release" in step.message
