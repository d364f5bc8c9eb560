"""Crossplane versions as an Upbound Space writes them, and their order.

A Space runs Upbound's builds of Crossplane (UXP) and names them
``<major>.<minor>.<patch>-up.<build>``: ``1.14.3-up.1``, ``2.1.4-up.2`` (the
auto-upgrade how-to of github.com/upbound/docs,
``self-hosted-spaces-docs/howtos/auto-upgrade.md``, and the v1.17.0 Spaces
release notes, "full version string, e.g. 1.20.5-up.1"). The order is
numeric, field by field: ``2.0.2-up.3 < 2.1.4-up.2 < 2.1.4-up.10``. A bare
``2.1.4`` (Upbound's build 0 of it) sorts before ``2.1.4-up.1``, and a
suffix of another form compares like a semver pre-release, identifier by
identifier, numbers numerically and before words.

Pure: nothing here reads or writes anything.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?")

# One identifier of a suffix: numbers sort before words, numbers numerically.
_Identifier = tuple[int, int, str]


@dataclass(frozen=True, order=True)
class Version:
    """A parsed version; ordered as a Space orders them."""

    major: int
    minor: int
    patch: int
    suffix: tuple[_Identifier, ...] = ()

    @property
    def minor_line(self) -> tuple[int, int]:
        """``(major, minor)``: the line a Patch channel stays on."""
        return (self.major, self.minor)


def parse(text: str) -> Version | None:
    """The version ``text`` names, or None when it is not one (``v2.1.4``, ``latest``)."""
    found = _VERSION.fullmatch(text)
    if found is None:
        return None
    major, minor, patch, suffix = found.groups()
    return Version(int(major), int(minor), int(patch), _identifiers(suffix or ""))


def _identifiers(suffix: str) -> tuple[_Identifier, ...]:
    return tuple(
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in suffix.split(".") if part
    )


def newer_or_same(observed: str, wanted: str) -> bool:
    """Whether ``observed`` is ``wanted`` or a later version.

    Two strings that are not both versions compare only as equal or not:
    nothing is known of their order.
    """
    if observed == wanted:
        return True
    seen, asked = parse(observed), parse(wanted)
    if seen is None or asked is None:
        return False
    return seen >= asked
