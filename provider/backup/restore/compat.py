"""Whether an archive may be restored into a control plane, by their Crossplane versions.

An archive holds objects of the CRDs its source's Crossplane served. A
control plane on an older Crossplane minor may not know them (a field, a
version, a kind), and a restore would then fail half-way; so a restore into
an older minor is refused before anything is applied, naming both versions.
A newer minor serves what an older one did (Crossplane keeps its APIs across
minors), so it is allowed, and said. Within one minor nothing is said.

When either side is unknown (an archive made before versions were recorded,
a control plane that reports none) or a version is not one
``provider.spaces.versions`` reads, nothing can be compared: the restore goes
on, and says it was not checked. A leading ``v`` (a Helm chart's app
version, ``v1.20.0``) is dropped before parsing.

Pure: nothing here reads or writes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from provider.spaces.versions import Version, parse

Verdict = Literal["SameMinor", "NewerMinor", "OlderMinor", "Unrecorded", "Unknown", "Unparsable"]


@dataclass(frozen=True)
class Compatibility:
    """What a restore of an archive into a control plane may do, and what it says of it."""

    allowed: bool
    verdict: Verdict
    # Empty when there is nothing to say (the same minor).
    message: str


def _version(text: str) -> Version | None:
    return parse(text.removeprefix("v"))


def _minor(version: Version) -> str:
    return f"{version.major}.{version.minor}"


def check(archived: str, target: str) -> Compatibility:
    """Compare the archive's Crossplane version with the control plane's.

    Args:
        archived: what ``export.yaml`` records (empty: not recorded).
        target: what the control plane runs (empty: unknown).
    """
    if not archived:
        known = f" (the control plane runs Crossplane {target})" if target else ""
        return Compatibility(
            allowed=True,
            verdict="Unrecorded",
            message=(
                "the archive does not record the Crossplane version it was taken from: "
                f"versions not checked{known}"
            ),
        )
    if not target:
        return Compatibility(
            allowed=True,
            verdict="Unknown",
            message=(
                f"the control plane's Crossplane version is unknown: the archive's "
                f"Crossplane {archived} not checked against it"
            ),
        )
    source, running = _version(archived), _version(target)
    if source is None or running is None:
        return Compatibility(
            allowed=True,
            verdict="Unparsable",
            message=(
                f"Crossplane {archived} (the archive's) and {target} (the control plane's) "
                "cannot be compared: versions not checked"
            ),
        )
    if running.minor_line < source.minor_line:
        return Compatibility(
            allowed=False,
            verdict="OlderMinor",
            message=(
                f"the archive was taken from Crossplane {archived}, and the control plane runs "
                f"Crossplane {target}, an older minor ({_minor(running)} < {_minor(source)}) "
                f"whose CRDs may not know the archive's objects; upgrade the control plane "
                f"to Crossplane {_minor(source)} or later first"
            ),
        )
    if running.minor_line > source.minor_line:
        return Compatibility(
            allowed=True,
            verdict="NewerMinor",
            message=(
                f"the archive was taken from Crossplane {archived}; the control plane runs "
                f"Crossplane {target}, a newer minor, which serves what the older one did"
            ),
        )
    return Compatibility(allowed=True, verdict="SameMinor", message="")
