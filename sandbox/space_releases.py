"""The Crossplane releases a simulated Space offers, and the rules it holds them to.

What a Space does with versions, from github.com/upbound/docs:

- ``self-hosted-spaces-docs/howtos/auto-upgrade.md``: versions are UXP builds
  (``1.14.3-up.1``); channel ``None`` keeps ``spec.crossplane.version``,
  ``Patch`` moves to the latest supported patch of the same minor, ``Stable``
  to the latest patch of minor N-1 and ``Rapid`` to the latest patch of minor
  N, N being the latest supported minor; "only supported Crossplane versions
  are valid specifications for new control planes"; a control plane on a
  version out of the window is ``Supported=False``,
  ``UnsupportedCrossplaneVersion``, "Crossplane version 1.11.5-up.1 is
  outside of the support window. Oldest supported minor version is 1.12."
- ``docs/reference/release-notes/spaces.md`` (v1.17.0): a control plane
  created without a version gets "the latest stable v2 release"; channels
  never cross a major version; a retired line (UXP 1.18.x) is refused for
  new control planes while existing ones keep running, marked unsupported;
  "Spaces enforces moving minor-by-minor through supported releases (version
  skips are rejected), and requires UXP 1.20 before upgrading a control plane
  to UXP 2.0".

The simulator refuses a version at admission, as a Space's webhook does, with
a ValidatingAdmissionPolicy made here (``admission_policy``): a new or changed
``spec.crossplane.version`` must be supported, never lower than the one it
replaces, and at most one minor line past it, the lines being those the Space
ever offered in order (so 1.20 is the line before 2.0). A channel moves a
control plane minor by minor too (``Releases.target``).

Pure: the simulator applies the policy and writes what these functions say.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

POLICY_NAME = "spaces-simulator-crossplane-versions"
# Supported when the simulator starts: the last three minors of v2 and one of v1.
DEFAULT_RELEASES = ("1.20.5-up.1", "2.0.2-up.3", "2.1.4-up.2", "2.2.1-up.1")
# A Space's form only: UXP builds, ``<major>.<minor>.<patch>-up.<build>``. The
# simulator orders them on its own, not with the provider's code it tests.
_RELEASE = re.compile(r"(\d+)\.(\d+)\.(\d+)-up\.(\d+)")
Version = tuple[int, int, int, int]


def parse(version: str) -> Version | None:
    """``(major, minor, patch, build)`` of a UXP version; None for any other text."""
    found = _RELEASE.fullmatch(version)
    if found is None:
        return None
    major, minor, patch, build = (int(part) for part in found.groups())
    return (major, minor, patch, build)


@dataclass
class Releases:
    """The versions a Space supports now, and every one it ever offered."""

    supported: list[str] = field(default_factory=lambda: list(DEFAULT_RELEASES))
    retired: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for version in self.supported:
            _parsed(version)

    def publish(self, version: str) -> None:
        """Offer ``version`` from now on."""
        _parsed(version)
        if version not in self.supported:
            self.supported.append(version)
        if version in self.retired:
            self.retired.remove(version)

    def retire(self, version: str) -> None:
        """Refuse ``version`` for new control planes; those on it keep running, unsupported."""
        if version in self.supported:
            self.supported.remove(version)
        if version not in self.retired:
            self.retired.append(version)

    def target(self, channel: str, current: str | None) -> str | None:
        """Where ``channel`` takes a control plane on ``current``; None when it stays.

        Never lower than ``current``, never another major; a control plane
        without a version gets the Stable release of the latest major.
        """
        offered = [(_parsed(v), v) for v in self.supported]
        if not offered:
            return None
        now = parse(current) if current else None
        if current and now is None:
            return None
        if now is None:
            major = max(v[0] for v, _ in offered)
            return _pick("Stable", [item for item in offered if item[0][0] == major], None)
        if channel == "None":
            return None
        line = [item for item in offered if item[0][0] == now[0]]
        picked = _pick(channel, line, now)
        if picked is None or _parsed(picked) <= now:
            return None
        lines = self.lines()
        if now[:2] in lines and lines.index(_parsed(picked)[:2]) > lines.index(now[:2]) + 1:
            # Minor by minor, as the Space's own validation asks: the next line's latest.
            following = lines[lines.index(now[:2]) + 1]
            step = max((item for item in line if item[0][:2] == following), default=None)
            return step[1] if step is not None else None
        return picked

    def lines(self) -> list[tuple[int, int]]:
        """Every ``(major, minor)`` line the Space ever offered, in order."""
        return sorted({_parsed(v)[:2] for v in (*self.supported, *self.retired)})

    def is_supported(self, version: str) -> bool:
        """Whether ``version`` is one a Space runs without an unsupported warning."""
        return version in self.supported

    def oldest_minor(self) -> str:
        """The oldest supported minor line, as the Supported message names it."""
        major, minor, _, _ = min(_parsed(v) for v in self.supported)
        return f"{major}.{minor}"


def _pick(channel: str, line: Sequence[tuple[Version, str]], now: Version | None) -> str | None:
    if not line:
        return None
    minors = sorted({v[:2] for v, _ in line})
    if channel == "Patch" and now is not None:
        wanted = now[:2]
    elif channel == "Rapid":
        wanted = minors[-1]
    else:
        wanted = minors[-2] if len(minors) > 1 else minors[-1]
    candidates = [item for item in line if item[0][:2] == wanted]
    return max(candidates)[1] if candidates else None


def _parsed(version: str) -> Version:
    parsed = parse(version)
    if parsed is None:
        msg = f"{version!r} is not a UXP version a Space offers (such as 2.1.4-up.2)"
        raise ValueError(msg)
    return parsed


def _cel_map(ranks: Iterable[tuple[str, int]]) -> str:
    return "{" + ", ".join(f"{json.dumps(v)}: {rank}" for v, rank in ranks) + "}"


def _cel_text_map(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"


def _line_after(lines: Sequence[tuple[int, int]], version: Version) -> str:
    """``major.minor`` of the line after ``version``'s ("" for the last)."""
    index = lines.index(version[:2]) + 1
    return "{}.{}".format(*lines[index]) if index < len(lines) else ""


def admission_policy(releases: Releases) -> dict[str, Any]:
    """The ValidatingAdmissionPolicy that refuses what a Space's webhook refuses."""
    known = sorted({*releases.supported, *releases.retired}, key=_parsed)
    ranks = _cel_map((v, rank) for rank, v in enumerate(known))
    lines = releases.lines()
    line_of = _cel_map((v, lines.index(_parsed(v)[:2])) for v in known)
    following = _cel_text_map((v, _line_after(lines, _parsed(v))) for v in known)
    supported = _cel_map((v, 1) for v in releases.supported)
    listed = ", ".join(sorted(releases.supported, key=_parsed))
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY_NAME},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["spaces.upbound.io"],
                        "apiVersions": ["v1beta1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["controlplanes"],
                    }
                ]
            },
            "variables": [
                {"name": "ranks", "expression": ranks},
                {"name": "supported", "expression": supported},
                {"name": "lines", "expression": line_of},
                {"name": "following", "expression": following},
                {
                    "name": "version",
                    "expression": "has(object.spec.crossplane) && "
                    "has(object.spec.crossplane.version) ? object.spec.crossplane.version : ''",
                },
                {
                    "name": "previous",
                    "expression": "oldObject != null && has(oldObject.spec.crossplane) && "
                    "has(oldObject.spec.crossplane.version) ? "
                    "oldObject.spec.crossplane.version : ''",
                },
            ],
            "validations": [
                {
                    "expression": "variables.version == '' || "
                    "variables.version == variables.previous || "
                    "variables.version in variables.supported",
                    "messageExpression": "'spec.crossplane.version: ' + variables.version + "
                    f"' is not a supported Crossplane version (supported: {listed})'",
                    "reason": "Invalid",
                },
                {
                    "expression": "variables.version == '' || variables.previous == '' || "
                    "!(variables.version in variables.ranks) || "
                    "!(variables.previous in variables.ranks) || "
                    "variables.ranks[variables.version] >= variables.ranks[variables.previous]",
                    "messageExpression": "'spec.crossplane.version: cannot downgrade from ' + "
                    "variables.previous + ' to ' + variables.version",
                    "reason": "Invalid",
                },
                {
                    "expression": "variables.version == '' || variables.previous == '' || "
                    "!(variables.version in variables.lines) || "
                    "!(variables.previous in variables.lines) || "
                    "variables.lines[variables.version] <= variables.lines[variables.previous] + 1",
                    "messageExpression": "'spec.crossplane.version: cannot upgrade from ' + "
                    "variables.previous + ' to ' + variables.version + ': upgrades move "
                    "minor-by-minor through supported releases (version skips are rejected); "
                    "upgrade to ' + variables.following[variables.previous] + ' first'",
                    "reason": "Invalid",
                },
            ],
        },
    }


def admission_binding() -> dict[str, Any]:
    """Binds the policy to every ControlPlane, denying what it refuses."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY_NAME},
        "spec": {"policyName": POLICY_NAME, "validationActions": ["Deny"]},
    }
