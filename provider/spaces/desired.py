"""What of a ControlPlane the provider sets, and the merge patch that brings it there.

The Space owns ``spec.crossplane.version`` once a control plane runs: with
an upgrade channel other than ``None`` it upgrades a control plane by
writing the new version there (github.com/upbound/docs,
``self-hosted-spaces-docs/howtos/auto-upgrade.md``: Patch, Stable and Rapid
move a control plane to the latest supported patch of their line). So an
Instance's version is a pin only with channel ``None``; with any other
channel it is where the control plane starts, and a version the Space has
moved past it is up to date. A patch names only what differs, so nothing
the provider does not set (a class it was not given, above all) is ever
sent, not even as ``null``.

Pure: the backend reads the ControlPlane and sends the patch.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from provider.model import ControlPlaneSpec, InstanceSpec
from provider.spaces import upgrades, versions

# Whose a ControlPlane is, as labels a Space's selectors can match (the
# ``controlPlaneSelector`` of SharedBackupSchedule, SharedBackup,
# SharedSecretStore and SharedExternalSecret in up-sdk-go's apis/spaces).
# Under the provider's own API group, so no other tool writes them; stable:
# selectors in a Space depend on them.
NAMESPACE_LABEL = "controlplane.spaces.upbound.io/namespace"
NAME_LABEL = "controlplane.spaces.upbound.io/name"
# The label Crossplane puts on every resource a composite composes.
COMPOSITE_LABEL = "crossplane.io/composite"

CONNECTION_SECRET_PREFIX = "kubeconfig-"  # noqa: S105 (a name prefix)
NONE = "None"

_LABEL_VALUE_MAX = 63
_HASH_CHARS = 8
_NOT_LABEL_VALUE = re.compile(r"[^A-Za-z0-9._-]+")


def label_value(text: str) -> str:
    """``text`` as a label value: as it is when it fits, else its head and a hash of it."""
    cleaned = _NOT_LABEL_VALUE.sub("-", text).strip("-._")
    if cleaned == text and len(text) <= _LABEL_VALUE_MAX:
        return text
    digest = hashlib.sha256(text.encode()).hexdigest()[:_HASH_CHARS]
    head = cleaned[: _LABEL_VALUE_MAX - _HASH_CHARS - 1].rstrip("-._")
    return f"{head}-{digest}" if head else digest


def owner_labels(instance_metadata: Mapping[str, Any]) -> dict[str, str]:
    """The team's namespace, and the composite's name (else the Instance's)."""
    labels = instance_metadata.get("labels") or {}
    name = str(labels.get(COMPOSITE_LABEL) or instance_metadata["name"])
    return {
        NAMESPACE_LABEL: label_value(str(instance_metadata.get("namespace", ""))),
        NAME_LABEL: label_value(name),
    }


def connection_secret_ref(external_name: str, group: str) -> dict[str, str]:
    """Where the Space writes the ControlPlane's kubeconfig."""
    return {"name": f"{CONNECTION_SECRET_PREFIX}{external_name}", "namespace": group}


def version_to_send(wanted: str | None, channel: str, observed: str | None) -> str | None:
    """The version to write into the ControlPlane, or None when it is up to date.

    Channel None: the version is a pin, sent whenever the ControlPlane differs.
    Any other channel: sent only when the ControlPlane is older than it (an
    Instance raised it); a newer one is the Space's upgrade, never undone.
    """
    if wanted is None or observed == wanted:
        return None
    if channel == NONE or observed is None:
        return wanted
    return None if versions.newer_or_same(observed, wanted) else wanted


def version_step(
    spec: InstanceSpec, actual: ControlPlaneSpec, releases: Sequence[str], *, settled: bool
) -> upgrades.Step:
    """The version to write now: the Instance's, or a step towards it (``upgrades.plan``)."""
    crossplane = spec.for_provider.crossplane
    observed = actual.crossplane.version
    version = version_to_send(crossplane.version, crossplane.auto_upgrade.channel, observed)
    if version is None:
        return upgrades.Step(send=None)
    return upgrades.plan(observed, version, releases, settled=settled)


def changes(  # noqa: PLR0917 (what a ControlPlane is compared with)
    spec: InstanceSpec,
    actual: ControlPlaneSpec,
    present_labels: Mapping[str, str],
    labels: Mapping[str, str],
    connection_ref: Mapping[str, str] | None,
    step: upgrades.Step,
) -> dict[str, Any]:
    """The merge patch that brings a ControlPlane to the Instance; empty when up to date.

    ``actual`` and ``present_labels`` are the ControlPlane's; ``labels`` are the
    owner labels it must carry; ``connection_ref`` is where its kubeconfig goes
    when it names no secret (an adopted one), None where a Space writes none;
    ``step`` is the version to write now (``version_step``).
    """
    wanted = spec.for_provider
    patch_spec: dict[str, Any] = {}
    patch_crossplane: dict[str, Any] = {}
    channel = wanted.crossplane.auto_upgrade.channel
    if actual.crossplane.auto_upgrade.channel != channel:
        patch_crossplane["autoUpgrade"] = {"channel": channel}
    if step.send is not None:
        patch_crossplane["version"] = step.send
    if patch_crossplane:
        patch_spec["crossplane"] = patch_crossplane
    if wanted.class_ is not None and actual.class_ != wanted.class_:
        patch_spec["class"] = wanted.class_
    if connection_ref is not None and (
        actual.write_connection_secret_to_ref is None
        or not actual.write_connection_secret_to_ref.name
    ):
        patch_spec["writeConnectionSecretToRef"] = dict(connection_ref)
    missing = {key: value for key, value in labels.items() if present_labels.get(key) != value}
    patch: dict[str, Any] = {}
    if missing:
        patch["metadata"] = {"labels": missing}
    if patch_spec:
        patch["spec"] = patch_spec
    return patch


def late_init(spec: InstanceSpec, actual: ControlPlaneSpec) -> dict[str, Any]:
    """The Instance's unset class, as the ControlPlane has it.

    Never the version: copied into the Instance it would read as where the
    control plane starts, and with channel None as a pin; the running
    version is reported in ``status.atProvider.crossplaneVersion`` instead.
    """
    if actual.class_ and spec.for_provider.class_ is None:
        return {"forProvider": {"class": actual.class_}}
    return {}
