"""How an object in a control plane would change: a unified diff, secrets masked.

Both sides lose the metadata the API server manages (uid, resourceVersion,
managedFields, ...), so an object a restore would leave as it is compares
equal. A Secret's values never appear: as ``kubectl diff`` does, each is
``***``, or ``*** (before)`` and ``*** (after)`` where it differs, so a
changed key still shows. YAML is dumped ASCII-only, so nothing in an object
can drive a terminal. Pure: no Kubernetes.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

import yaml

from provider.backup.format.archive import strip

MASK = "***"
_SECRET_FIELDS = ("data", "stringData")
# Each would repeat a Secret's values.
_SECRET_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def changed(live: Mapping[str, Any], proposed: Mapping[str, Any]) -> bool:
    """Whether ``proposed`` differs from ``live`` in anything but server-managed metadata."""
    return strip(live) != strip(proposed)


def _masked(before: Any, after: Any) -> tuple[Any, Any]:
    """Mask both values; marked before and after when they differ."""
    if before == after:
        return MASK, MASK
    return f"{MASK} (before)", f"{MASK} (after)"


def _mask_secret(live: dict[str, Any], proposed: dict[str, Any]) -> None:
    for field in _SECRET_FIELDS:
        old, new = live.get(field), proposed.get(field)
        old = old if isinstance(old, dict) else {}
        new = new if isinstance(new, dict) else {}
        for key in old.keys() | new.keys():
            masked = _masked(old.get(key), new.get(key))
            if key in old:
                old[key] = masked[0]
            if key in new:
                new[key] = masked[1]
    for name in _SECRET_ANNOTATIONS:
        annotations = [
            (obj.get("metadata") or {}).get("annotations") or {} for obj in (live, proposed)
        ]
        masked = _masked(annotations[0].get(name), annotations[1].get(name))
        for side, value in zip(annotations, masked, strict=True):
            if name in side:
                side[name] = value


def unified(
    live: Mapping[str, Any],
    proposed: Mapping[str, Any],
    path: str,
    *,
    labels: tuple[str, str] = ("live", "restored"),
) -> str:
    """The unified diff from ``live`` to ``proposed``, labelled ``live/`` and ``restored/``.

    Args:
        live: the object as the control plane holds it.
        proposed: the object as the restore would leave it (a dry-run apply's answer).
        path: the object's path in the archive, naming both sides.
        labels: the two sides' prefixes (``controlplane-plan`` says ``planned/``).

    Returns:
        The diff, each line ending in a newline; empty when nothing changes.
    """
    before, after = strip(live), strip(proposed)
    if before.get("kind") == "Secret" or after.get("kind") == "Secret":
        _mask_secret(before, after)
    return "".join(
        difflib.unified_diff(
            _lines(before),
            _lines(after),
            fromfile=f"{labels[0]}/{path}",
            tofile=f"{labels[1]}/{path}",
        )
    )


# libyaml's emitter where PyYAML has it: the same YAML, several times faster.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _lines(obj: dict[str, Any]) -> list[str]:
    text: str = yaml.dump(obj, Dumper=_DUMPER, sort_keys=True, allow_unicode=False)
    return text.splitlines(keepends=True)
