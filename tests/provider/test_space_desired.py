"""What of a ControlPlane the provider sets: the patch, and so whether it is up to date."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from provider.model import ControlPlaneSpec, InstanceSpec, parse
from provider.spaces import desired

GROUP = "default"
REF = desired.connection_secret_ref("team-a-myctp-1a2b3c4d", GROUP)
LABELS = {desired.NAMESPACE_LABEL: "team-a", desired.NAME_LABEL: "myctp"}


def spec(version: str | None = "2.1.4-up.2", channel: str = "Stable", **extra: Any) -> InstanceSpec:
    crossplane: dict[str, Any] = {"autoUpgrade": {"channel": channel}}
    if version is not None:
        crossplane["version"] = version
    return parse(InstanceSpec, {"forProvider": {"crossplane": crossplane, **extra}}, "spec")


def control_plane(
    version: str | None = "2.1.4-up.2",
    channel: str | None = "Stable",
    *,
    labels: dict[str, str] | None = None,
    ref: dict[str, str] | None = None,
    class_: str | None = None,
) -> dict[str, Any]:
    crossplane: dict[str, Any] = {}
    if version is not None:
        crossplane["version"] = version
    if channel is not None:
        crossplane["autoUpgrade"] = {"channel": channel}
    return {
        "metadata": {"labels": LABELS if labels is None else labels},
        "spec": {
            "crossplane": crossplane,
            "writeConnectionSecretToRef": REF if ref is None else ref,
            **({"class": class_} if class_ else {}),
        },
    }


@dataclass
class ChangeCase:
    reason: str
    wanted: InstanceSpec
    actual: dict[str, Any]
    patch: dict[str, Any] = field(default_factory=dict)


CHANGE_CASES = [
    ChangeCase("the same version and channel is up to date", spec(), control_plane()),
    ChangeCase(
        "a version the Space upgraded to on the Stable channel is up to date",
        spec(),
        control_plane("2.1.5-up.1"),
    ),
    ChangeCase(
        "a build the Space upgraded to on the Patch channel is up to date",
        spec("2.1.4-up.2", "Patch"),
        control_plane("2.1.4-up.10", "Patch"),
    ),
    ChangeCase(
        "a minor the Space upgraded to on the Rapid channel is up to date",
        spec("2.1.4-up.2", "Rapid"),
        control_plane("2.2.1-up.1", "Rapid"),
    ),
    ChangeCase(
        "an Instance raising the start past the running version upgrades it",
        spec("2.2.1-up.1"),
        control_plane("2.1.4-up.2"),
        {"spec": {"crossplane": {"version": "2.2.1-up.1"}}},
    ),
    ChangeCase(
        "with channel None the version is a pin, even below the running one",
        spec("2.1.4-up.2", "None"),
        control_plane("2.1.5-up.1", "None"),
        {"spec": {"crossplane": {"version": "2.1.4-up.2"}}},
    ),
    ChangeCase(
        "turning auto-upgrades off pins the version and the channel together",
        spec("2.1.4-up.2", "None"),
        control_plane("2.1.5-up.1", "Stable"),
        {"spec": {"crossplane": {"autoUpgrade": {"channel": "None"}, "version": "2.1.4-up.2"}}},
    ),
    ChangeCase(
        "a channel change alone sends only the channel",
        spec("2.1.4-up.2", "Rapid"),
        control_plane("2.1.5-up.1", "Stable"),
        {"spec": {"crossplane": {"autoUpgrade": {"channel": "Rapid"}}}},
    ),
    ChangeCase(
        "no version in the Instance leaves the Space's choice alone",
        spec(None),
        control_plane("2.1.5-up.1"),
    ),
    ChangeCase(
        "a ControlPlane without a channel has the Spaces CRD's default, Stable",
        spec(),
        control_plane(channel=None),
    ),
    ChangeCase(
        "a running version that is no version is replaced by the Instance's",
        spec(),
        control_plane("latest"),
        {"spec": {"crossplane": {"version": "2.1.4-up.2"}}},
    ),
    ChangeCase(
        "an unset class is never sent, not even as null",
        spec(),
        control_plane(class_="small"),
    ),
    ChangeCase(
        "a class of the Instance's own is sent when it differs",
        spec(**{"class": "large"}),
        control_plane(class_="small"),
        {"spec": {"class": "large"}},
    ),
    ChangeCase(
        "an adopted ControlPlane without a connection secret gets one",
        spec(),
        control_plane(ref={}),
        {"spec": {"writeConnectionSecretToRef": REF}},
    ),
    ChangeCase(
        "an adopted ControlPlane keeps a connection secret of its own",
        spec(),
        control_plane(ref={"name": "its-own", "namespace": GROUP}),
    ),
    ChangeCase(
        "missing or stale owner labels are set, others are left alone",
        spec(),
        control_plane(
            labels={desired.NAMESPACE_LABEL: "team-a", desired.NAME_LABEL: "old", "x": "y"}
        ),
        {"metadata": {"labels": {desired.NAME_LABEL: "myctp"}}},
    ),
]


@pytest.mark.parametrize("case", CHANGE_CASES, ids=lambda c: c.reason)
def test_the_patch_names_only_what_differs_and_never_reverts_an_upgrade(case: ChangeCase) -> None:
    actual = parse(ControlPlaneSpec, case.actual["spec"], "spec")
    present = case.actual["metadata"]["labels"]
    step = desired.version_step(case.wanted, actual, (), settled=True)
    patch = desired.changes(case.wanted, actual, present, LABELS, REF, step)
    assert patch == case.patch, case.reason


@dataclass
class LabelCase:
    reason: str
    metadata: dict[str, Any]
    name: str
    # The name label is the name itself, or only starts with it (a cut name and a hash).
    exact: bool = True


LABEL_CASES = [
    LabelCase(
        "an Instance no composite made is named by itself",
        {"name": "myctp", "namespace": "team-a"},
        "myctp",
    ),
    LabelCase(
        "a composed Instance is named by its composite",
        {
            "name": "myctp-x7k2p",
            "namespace": "team-a",
            "labels": {"crossplane.io/composite": "myctp"},
        },
        "myctp",
    ),
    LabelCase(
        "a name too long for a label value keeps its head and a hash",
        {"name": "n" * 80, "namespace": "team-a"},
        "n" * 54 + "-",
        exact=False,
    ),
]


@pytest.mark.parametrize("case", LABEL_CASES, ids=lambda c: c.reason)
def test_owner_labels_say_whose_the_control_plane_is(case: LabelCase) -> None:
    labels = desired.owner_labels(case.metadata)
    assert labels[desired.NAMESPACE_LABEL] == "team-a", case.reason
    name = labels[desired.NAME_LABEL]
    assert len(name) <= 63, case.reason
    assert (name == case.name) if case.exact else name.startswith(case.name), case.reason


def test_a_long_label_value_is_stable_and_tells_names_apart() -> None:
    first, second = "a" * 70 + "-one", "a" * 70 + "-two"
    assert desired.label_value(first) == desired.label_value(first)
    assert desired.label_value(first) != desired.label_value(second)
    assert all(len(desired.label_value(text)) <= 63 for text in (first, second))


@dataclass
class LateInitCase:
    reason: str
    wanted: InstanceSpec
    actual: dict[str, Any]
    late_init: dict[str, Any]


LATE_INIT_CASES = [
    LateInitCase(
        "the running version is never copied into the Instance",
        spec(None),
        control_plane("2.1.5-up.1"),
        {},
    ),
    LateInitCase(
        "an unset class is copied from the ControlPlane",
        spec(None),
        control_plane(class_="small"),
        {"forProvider": {"class": "small"}},
    ),
    LateInitCase(
        "a class of the Instance's own is kept",
        spec(**{"class": "large"}),
        control_plane(class_="small"),
        {},
    ),
]


@pytest.mark.parametrize("case", LATE_INIT_CASES, ids=lambda c: c.reason)
def test_late_initialisation_never_turns_the_running_version_into_a_pin(
    case: LateInitCase,
) -> None:
    actual = parse(ControlPlaneSpec, case.actual["spec"], "spec")
    assert desired.late_init(case.wanted, actual) == case.late_init, case.reason
