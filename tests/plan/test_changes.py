"""The offline comparison, Flux's object ids and annotations, the exit codes and the masks."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import pytest

from plan import changes, kinds
from plan.changes import Built, ObjectId, Plan, StagePlan

from .conftest import configmap


def cm(name: str, value: str = "1", **metadata: Any) -> Built:
    return Built(configmap(name, {"a": value}, **metadata))


def secret(name: str, value: str, *, encrypted: bool = False) -> Built:
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "data": {"password": base64.b64encode(value.encode()).decode()},
    }
    if encrypted:
        body["sops"] = {"mac": f"ENC[mac-of-{value}]"}
    return Built(body, encrypted=encrypted)


@dataclass
class OfflineCase:
    reason: str
    base: list[Built] | None
    head: list[Built]
    expected: list[tuple[str, str]]
    prune: bool = True


OFFLINE = [
    OfflineCase("no base: every object is created", None, [cm("a")], [("create", "a")]),
    OfflineCase("an object only in the head is created", [], [cm("a")], [("create", "a")]),
    OfflineCase("an equal object is unchanged", [cm("a")], [cm("a")], [("unchanged", "a")]),
    OfflineCase("a different object is changed", [cm("a")], [cm("a", "2")], [("change", "a")]),
    OfflineCase("an object gone from the head is deleted", [cm("a")], [], [("delete", "a")]),
    OfflineCase("without prune nothing is deleted", [cm("a")], [], [], prune=False),
    OfflineCase(
        "an object whose prune is disabled is kept",
        [cm("a", annotations={changes.PRUNE_ANNOTATION: "disabled"})],
        [],
        [],
    ),
    OfflineCase(
        "an object Flux ignores (ssa: Ignore) is not planned",
        [cm("a")],
        [cm("a", "2", annotations={changes.SSA_ANNOTATION: "Ignore"})],
        [],
    ),
    OfflineCase(
        "an object applied only if not present is unchanged once there",
        [cm("a", annotations={changes.SSA_ANNOTATION: "IfNotPresent"})],
        [cm("a", "2", annotations={changes.SSA_ANNOTATION: "IfNotPresent"})],
        [("unchanged", "a")],
    ),
    OfflineCase(
        "an encrypted object with the same ciphertext is unchanged",
        [secret("s", "c1", encrypted=True)],
        [secret("s", "c1", encrypted=True)],
        [("unchanged", "s")],
    ),
    OfflineCase(
        "an encrypted object with a new ciphertext is changed",
        [secret("s", "c1", encrypted=True)],
        [secret("s", "c2", encrypted=True)],
        [("change", "s")],
    ),
]


@pytest.mark.parametrize("case", OFFLINE, ids=lambda case: case.reason)
def test_offline_a_stage_is_compared_from_base_to_head(case: OfflineCase) -> None:
    found = changes.offline(case.base, case.head, prune=case.prune)

    assert [(change.action, change.object.name) for change in found] == case.expected


def test_a_changed_secret_shows_no_value_plain_or_encrypted() -> None:
    plain = changes.offline([secret("s", "old-password")], [secret("s", "new-password")])
    sealed = changes.offline(
        [secret("e", "old-ciphertext", encrypted=True)],
        [secret("e", "new-ciphertext", encrypted=True)],
    )

    for change in (*plain, *sealed):
        assert change.action == "change"
        assert "***" in change.diff
        for value in ("old-password", "new-password", "old-ciphertext", "new-ciphertext"):
            assert value not in change.diff
            assert base64.b64encode(value.encode()).decode() not in change.diff
    assert sealed[0].note == changes.ENCRYPTED_NOTE


def test_a_diff_says_which_side_is_the_base_and_which_the_head() -> None:
    [change] = changes.offline([cm("a")], [cm("a", "2")])

    assert change.diff.startswith("--- base/ConfigMap/default/a\n+++ head/ConfigMap/default/a\n")
    assert "-  a: '1'" in change.diff
    assert "+  a: '2'" in change.diff


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ("default_a__ConfigMap", ObjectId("", "ConfigMap", "default", "a")),
        (
            "_memos.acme.io_apiextensions.k8s.io_CustomResourceDefinition",
            ObjectId("apiextensions.k8s.io", "CustomResourceDefinition", "", "memos.acme.io"),
        ),
    ],
    ids=["a namespaced core object", "a cluster-scoped object of a group"],
)
def test_a_flux_inventory_id_names_the_object(entry: str, expected: ObjectId) -> None:
    assert ObjectId.from_inventory(entry) == expected


def test_an_inventory_gives_each_objects_id_and_applied_version() -> None:
    live = {
        "status": {
            "inventory": {
                "entries": [
                    {"id": "default_a__ConfigMap", "v": "v1"},
                    {"id": "default_n_fixture.acme.io_Note", "v": "v1alpha1"},
                ]
            }
        }
    }

    assert changes.inventory(live) == [
        (ObjectId("", "ConfigMap", "default", "a"), "v1"),
        (ObjectId("fixture.acme.io", "Note", "default", "n"), "fixture.acme.io/v1alpha1"),
    ]
    assert changes.inventory(None) == []
    with pytest.raises(ValueError, match="not a Flux inventory id"):
        changes.inventory({"status": {"inventory": {"entries": [{"id": "nonsense"}]}}})


def plan_of(*stage_plans: StagePlan) -> Plan:
    return Plan("team-a/myctp", "offline", stage_plans)


def change(action: changes.Action) -> changes.Change:
    return changes.Change(action, ObjectId("", "ConfigMap", "default", "a"))


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (plan_of(StagePlan("a", "k", "./a", changes=(change("unchanged"),))), 0),
        (plan_of(StagePlan("a", "k", "./a")), 0),
        (plan_of(StagePlan("a", "k", "./a", changes=(change("delete"),))), 2),
        (
            plan_of(
                StagePlan("a", "k", "./a", changes=(change("create"),)),
                StagePlan("b", "k", "./b", error="x"),
            ),
            1,
        ),
    ],
    ids=["unchanged objects only: 0", "an empty stage: 0", "a deletion: 2", "an error wins: 1"],
)
def test_exit_codes_are_terraforms_detailed_ones(plan: Plan, expected: int) -> None:
    assert changes.exit_code(plan) == expected


def test_redaction_masks_every_secret_value_even_inside_another() -> None:
    text = "token=abcdefgh1234 and abcdefgh"

    assert changes.redact(text, ["abcdefgh", "abcdefgh1234", ""]) == "token=*** and ***"


@dataclass
class InstallCase:
    reason: str
    key: ObjectId
    same: list[Built]
    earlier: list[Built] = field(default_factory=list)
    expected: str = ""


def crd(group: str, kind: str) -> Built:
    return Built(
        {
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{kind.lower()}s.{group}"},
            "spec": {"group": group, "names": {"kind": kind}},
        },
        apply_stage=0,
    )


def xrd(group: str, kind: str, claim: str | None = None) -> Built:
    names: dict[str, Any] = {"group": group, "names": {"kind": kind}}
    if claim:
        names["claimNames"] = {"kind": claim}
    return Built(
        {
            "apiVersion": "apiextensions.crossplane.io/v1",
            "kind": "CompositeResourceDefinition",
            "metadata": {"name": f"x.{group}"},
            "spec": names,
        }
    )


PACKAGE = Built(
    {"apiVersion": "pkg.crossplane.io/v1", "kind": "Configuration", "metadata": {"name": "memos"}}
)
MEMO = ObjectId("memos.acme.io", "Memo", "default", "first")

INSTALLS = [
    InstallCase(
        "a CRD of the same stage defines the kind",
        MEMO,
        [crd("memos.acme.io", "Memo")],
        expected="of this stage",
    ),
    InstallCase(
        "a CRD of an earlier stage defines the kind",
        MEMO,
        [],
        [crd("memos.acme.io", "Memo")],
        "of stage earlier",
    ),
    InstallCase(
        "an XRD of an earlier stage defines the kind",
        MEMO,
        [],
        [xrd("memos.acme.io", "Memo")],
        "an XRD of stage earlier",
    ),
    InstallCase(
        "an XRD's claim kind is defined too",
        MEMO,
        [],
        [xrd("memos.acme.io", "XMemo", "Memo")],
        "an XRD",
    ),
    InstallCase(
        "a package of an earlier stage may define it",
        MEMO,
        [],
        [PACKAGE],
        "installs Configuration memos",
    ),
    InstallCase(
        "an XRD of the same stage does not: Flux waits only for CRDs",
        MEMO,
        [xrd("memos.acme.io", "Memo")],
    ),
    InstallCase("nothing defines another group's kind", MEMO, [], [crd("other.acme.io", "Memo")]),
]


@pytest.mark.parametrize("case", INSTALLS, ids=lambda case: case.reason)
def test_a_kind_not_served_yet_is_planned_when_an_earlier_stage_installs_it(
    case: InstallCase,
) -> None:
    same = kinds.installs("this", case.same)
    earlier = [kinds.installs("earlier", case.earlier)]

    found = kinds.installed_by(case.key, same, earlier)

    assert (case.expected in found) if case.expected else found == ""


def test_same_ignores_exactly_what_comparable_drops() -> None:
    live = {
        **configmap("a", {"k": "v"}),
        "status": {"x": 1},
    }
    live["metadata"] = {**live["metadata"], "uid": "u", "resourceVersion": "7", "managedFields": []}
    relabelled = configmap("a", {"k": "v"}, labels={"team": "a"})

    assert changes.same(live, configmap("a", {"k": "v"}))
    assert changes.comparable(live) == changes.comparable(configmap("a", {"k": "v"}))
    assert not changes.same(live, relabelled)
    assert not changes.same(live, configmap("a", {"k": "w"}))
