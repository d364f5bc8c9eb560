"""What a verified archive holds, by kind and namespace: ``controlplane-backup describe``.

Everything comes from the manifest ``archive.verify`` returns (its types and
the paths ``export.yaml`` lists, each checked against the layout), so no
object is parsed twice. Text that came from the archive and is not a checked
Kubernetes name (a kind, the instance) is escaped before it reaches a
terminal. Pure: no Kubernetes, no S3.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from provider.backup.format.archive import METADATA_FILE, Manifest

CLUSTER_SCOPED = "(cluster)"
_HEADERS = ("KIND", "GROUP", "NAMESPACE", "OBJECTS")


@dataclass(frozen=True)
class Row:
    """The objects of one type in one namespace (``namespace`` empty: cluster-scoped)."""

    kind: str
    group: str
    version: str
    namespace: str
    objects: int


def printable(text: str) -> str:
    """``text`` with control characters escaped, so it cannot drive a terminal."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def rows(manifest: Manifest) -> list[Row]:
    """One row per type and namespace, in folder then namespace order."""
    counts: dict[tuple[str, str], int] = {}
    for path, _ in manifest.files:
        folder, *rest = path.split("/")
        if rest == [METADATA_FILE]:
            continue
        namespace = rest[1] if rest[0] == "namespaces" else ""
        counts[folder, namespace] = counts.get((folder, namespace), 0) + 1
    found = []
    for (folder, namespace), count in sorted(counts.items()):
        rtype = manifest.types[folder]
        found.append(Row(rtype.kind, rtype.group, rtype.version, namespace, count))
    return found


def table(manifest: Manifest) -> str:
    """A heading and aligned columns, as ``kubectl get`` prints them."""
    lines = [
        f"instance {printable(manifest.instance)}, exported at "
        f"{manifest.exported_at.isoformat().replace('+00:00', 'Z')}: "
        f"{manifest.objects} objects of {len(manifest.types)} types",
    ]
    if manifest.excluded:
        lines.append(f"excluded: {', '.join(printable(name) for name in manifest.excluded)}")
    lines.append(source_line(manifest))
    lines.append("")
    cells = [_HEADERS] + [
        (
            printable(row.kind),
            row.group or "(core)",
            row.namespace or CLUSTER_SCOPED,
            str(row.objects),
        )
        for row in rows(manifest)
    ]
    widths = [max(len(cell[column]) for cell in cells) for column in range(len(_HEADERS))]
    for cell in cells:
        padded = (value.ljust(width) for value, width in zip(cell, widths, strict=True))
        lines.append("   ".join(padded).rstrip())
    return "\n".join(lines) + "\n"


def source_line(manifest: Manifest) -> str:
    """What the source ran, as ``export.yaml`` records it (checked by ``archive.verify``)."""
    source = manifest.source
    flags = f" (feature flags: {' '.join(source.feature_flags)})" if source.feature_flags else ""
    return (
        f"source: Kubernetes {source.kubernetes or 'not recorded'}, "
        f"Crossplane {source.crossplane or 'not recorded'}{flags}"
    )


def document(manifest: Manifest) -> dict[str, Any]:
    """The same as a JSON-ready document, for ``-o json``."""
    return {
        "instance": manifest.instance,
        "exportedAt": manifest.exported_at.isoformat().replace("+00:00", "Z"),
        "objects": manifest.objects,
        "excludedResources": list(manifest.excluded),
        "source": {
            "kubernetes": manifest.source.kubernetes or None,
            "crossplane": manifest.source.crossplane or None,
            "featureFlags": list(manifest.source.feature_flags),
        },
        "types": [
            {
                "kind": rtype.kind,
                "group": rtype.group,
                "version": rtype.version,
                "resource": rtype.resource,
                "namespaced": rtype.namespaced,
                "categories": list(rtype.categories),
            }
            for _, rtype in sorted(manifest.types.items())
        ],
        "contents": [
            {
                "kind": row.kind,
                "group": row.group,
                "version": row.version,
                "namespace": row.namespace or None,
                "objects": row.objects,
            }
            for row in rows(manifest)
        ],
    }
