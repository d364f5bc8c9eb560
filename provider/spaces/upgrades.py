"""Upgrades in steps: the version to write next when an Instance asks for more than one minor.

A Space moves a control plane minor by minor: "Spaces enforces moving
minor-by-minor through supported releases (version skips are rejected), and
requires UXP 1.20 before upgrading a control plane to UXP 2.0" (Spaces
v1.17.0 release notes, github.com/upbound/docs
``docs/reference/release-notes/spaces.md``). So an Instance on 2.0 asked for
2.2 goes through 2.1: the provider writes the latest release it knows of each
minor line in between, one at a time, and writes the next only once the
Space reports the control plane healthy on the last (its status answers the
spec's current generation, Ready and Healthy are True).

Which releases exist is what the Space supports (the Spaces chart's
``controller.crossplane.supportedVersions``, which ``up space mirror`` reads);
the operator gives them to the provider (``--crossplane-release``). Lines are
ordered as versions are, and the line after 1.20 is 2.0 when those are the
releases given, as the release notes ask.

Pure: the backend reads the ControlPlane and writes what ``plan`` says.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from provider.spaces import versions


@dataclass(frozen=True)
class Step:
    """What to do about the version now.

    ``send``: the version to write now (None: write none). ``target``: where the
    Instance asked to go, set while the control plane is on the way in steps.
    ``message``: where the upgrade stands, for the Instance's status; ``stuck``
    says why it cannot go on (a fault of the provider's settings, not of time).
    """

    send: str | None
    target: str = ""
    message: str = ""
    stuck: bool = False


def plan(observed: str | None, wanted: str, releases: Sequence[str], *, settled: bool) -> Step:
    """The next step from ``observed`` towards ``wanted``.

    ``releases`` are the versions the Space supports; ``settled`` whether the
    Space reports the control plane healthy on what it was last asked. An
    upgrade to another minor waits until it is settled, and goes one minor at a
    time; anything else (a first version, a patch, a downgrade the Space will
    refuse in its words, text that is no version) is sent as it is.
    """
    now, goal = _parsed(observed), versions.parse(wanted)
    if now is None or goal is None or goal <= now or goal.minor_line == now.minor_line:
        return Step(send=wanted)
    known = _known(releases)
    # Every minor of a major was released (Crossplane numbers them one by one);
    # which minor ends a major only the releases say.
    lines = sorted(
        {v.minor_line for v in (now, goal, *known)}
        | {(major, minor) for major, top in _tops(now, goal, known) for minor in range(top)}
    )
    between = lines[lines.index(now.minor_line) + 1 : lines.index(goal.minor_line)]
    step = wanted
    if between:
        candidates = [v for v in known if v.minor_line == between[0]]
        if not candidates:
            line = "{}.{}".format(*between[0])
            return Step(
                send=None,
                target=wanted,
                stuck=True,
                message=(
                    f"cannot upgrade from {observed} to {wanted}: a Space moves one minor at "
                    f"a time and no {line} release is known (the provider's "
                    "--crossplane-release)"
                ),
            )
        step = _text(max(candidates), releases)
    if not settled:
        return Step(
            send=None,
            target=wanted,
            message=(
                f"upgrading to {wanted} one minor at a time: waiting for the control plane "
                f"to be healthy on {observed} before {step}"
            ),
        )
    return Step(
        send=step,
        target=wanted if step != wanted else "",
        message=f"upgrading to {wanted} one minor at a time: {observed} to {step}"
        if step != wanted
        else "",
    )


def _tops(
    now: versions.Version, goal: versions.Version, known: Sequence[versions.Version]
) -> list[tuple[int, int]]:
    """``(major, highest minor)`` of each major from ``now``'s to ``goal``'s that is known."""
    return [
        (major, max(v.minor for v in (now, goal, *known) if v.major == major))
        for major in range(now.major, goal.major + 1)
        if any(v.major == major for v in (now, goal, *known))
    ]


def _parsed(text: str | None) -> versions.Version | None:
    return versions.parse(text) if text else None


def _known(releases: Sequence[str]) -> list[versions.Version]:
    return [v for v in (versions.parse(r) for r in releases) if v is not None]


def _text(version: versions.Version, releases: Sequence[str]) -> str:
    return next(r for r in releases if versions.parse(r) == version)
