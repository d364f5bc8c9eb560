"""spec.restore.fromControlPlane: the newest Completed Backup of a control plane, chosen once.

The choice itself (``function.restore.latest``) is a table and a property; the
composition around it (what is composed while the Backups are fetched, when
none is found, once one is chosen or recorded) is checked through ``compose``
and, for the requirement Crossplane reads, through the gRPC answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given
from hypothesis import strategies as st

from function import compose as c
from function import fn, restore
from function.compose import Outcome, compose
from function.names import Names
from function.observed import Observed
from function.render import request
from provider.backup.controllers import schedules
from tests import builders as b

NAMESPACE = "team-a"
EPOCH = datetime(2026, 12, 1, tzinfo=UTC)


def backup(
    name: str,
    *,
    minute: int | None = 0,
    phase: str = "Completed",
    instance: str = "myctp",
    label: str | None = None,
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    """A Backup as the schedule makes it; ``minute``: its completion, in minutes after EPOCH."""
    status: dict[str, Any] = {"phase": phase}
    if minute is not None:
        completed = EPOCH + timedelta(minutes=minute)
        status["completedAt"] = completed.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": restore.BACKUP_API_VERSION,
        "kind": restore.BACKUP_KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {restore.INSTANCE_LABEL: instance if label is None else label},
        },
        "spec": {"instanceRef": {"name": instance}},
        "status": status,
    }


@dataclass(frozen=True)
class LatestCase:
    reason: str
    backups: list[dict[str, Any]]
    want: str | None


LATEST_CASES = [
    LatestCase("No Backup at all: nothing to restore.", [], None),
    LatestCase(
        "The newest by completion wins, whatever the order of the list.",
        [backup("myctp-2", minute=20), backup("myctp-3", minute=30), backup("myctp-1", minute=10)],
        "myctp-3",
    ),
    LatestCase(
        "Completion, not the name, decides: a Backup made by hand may sort anywhere.",
        [backup("zz-by-hand", minute=5), backup("myctp-20261201000900", minute=9)],
        "myctp-20261201000900",
    ),
    LatestCase(
        "A Failed Backup is skipped, though it carries a completion time too.",
        [backup("myctp-1", minute=10), backup("myctp-2", minute=20, phase="Failed")],
        "myctp-1",
    ),
    LatestCase(
        "A Backup still InProgress, or Pending, is skipped.",
        [
            backup("myctp-1", minute=10),
            backup("myctp-2", minute=None, phase="InProgress"),
            backup("myctp-3", minute=None, phase="Pending"),
        ],
        "myctp-1",
    ),
    LatestCase(
        "Another control plane's Backup is skipped, however new.",
        [backup("myctp-1", minute=10), backup("other-9", minute=90, instance="other")],
        "myctp-1",
    ),
    LatestCase(
        "A Backup labelled for this control plane that holds another one is skipped: "
        "the spec says what is in it.",
        [backup("myctp-1", minute=10), backup("odd", minute=90, instance="other", label="myctp")],
        "myctp-1",
    ),
    LatestCase(
        "A Backup of another namespace is skipped.",
        [backup("myctp-1", minute=10), backup("myctp-9", minute=90, namespace="team-b")],
        "myctp-1",
    ),
    LatestCase(
        "The final Backup is one of the control plane's Backups, and is usually its newest.",
        [backup("myctp-20261201000000", minute=0), backup("myctp-final-20261201003000", minute=30)],
        "myctp-final-20261201003000",
    ),
    LatestCase(
        "Of two completed in the same second, the greater name: the choice never depends "
        "on the order Crossplane lists them in.",
        [backup("myctp-b", minute=10), backup("myctp-a", minute=10)],
        "myctp-b",
    ),
    LatestCase(
        "A Backup that cannot be read (no name, a completion time that is not a time) is "
        "never chosen, and does not stop the choice.",
        [
            {"metadata": {}, "status": {"phase": "Completed"}},
            {**backup("myctp-bad"), "status": {"phase": "Completed", "completedAt": "soon"}},
            backup("myctp-1", minute=1),
        ],
        "myctp-1",
    ),
]


@pytest.mark.parametrize("case", LATEST_CASES, ids=lambda case: case.reason)
def test_the_newest_completed_backup_of_the_control_plane_is_chosen(case: LatestCase) -> None:
    assert restore.latest(case.backups, NAMESPACE, "myctp") == case.want


BACKUPS = st.lists(
    st.builds(
        lambda index, minute, phase, instance: backup(
            f"{instance}-{index}", minute=minute, phase=phase, instance=instance
        ),
        st.integers(0, 50),
        st.integers(0, 600),
        st.sampled_from(["Completed", "Failed", "InProgress"]),
        st.sampled_from(["myctp", "other"]),
    ),
    max_size=12,
    unique_by=lambda item: item["metadata"]["name"],
)


@given(BACKUPS, st.randoms(use_true_random=False))
def test_the_choice_is_a_completed_backup_of_the_control_plane_none_newer_in_any_order(
    backups: list[dict[str, Any]], shuffler: Any
) -> None:
    chosen = restore.latest(backups, NAMESPACE, "myctp")
    eligible = [
        item
        for item in backups
        if item["status"]["phase"] == "Completed" and item["spec"]["instanceRef"]["name"] == "myctp"
    ]
    if not eligible:
        assert chosen is None
        return
    picked = next(item for item in eligible if item["metadata"]["name"] == chosen)
    assert all(
        item["status"]["completedAt"] <= picked["status"]["completedAt"] for item in eligible
    )
    shuffled = list(backups)
    shuffler.shuffle(shuffled)
    assert restore.latest(shuffled, NAMESPACE, "myctp") == chosen


def test_the_function_and_the_schedule_controller_agree_on_the_label() -> None:
    assert restore.INSTANCE_LABEL == schedules.INSTANCE_LABEL


def run(
    spec: dict[str, Any],
    seen: dict[str, dict[str, Any]] | None = None,
    required: dict[str, tuple[dict[str, Any], ...]] | None = None,
    *,
    name: str = "myctp-2",
    namespace: str | None = NAMESPACE,
    labels: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
) -> Outcome:
    xr = b.composite(spec, name=name, namespace=namespace, labels=labels)
    if status is not None:
        xr["status"] = status
    observed = b.observed(xr, seen)
    return compose(
        Observed(observed.composite, observed.resources, required or {}), b.example_input()
    )


def restored_from(outcome: Outcome) -> str | None:
    body = outcome.resources["instance"].body
    ref = body["spec"]["forProvider"].get("initialRestorationFrom", {}).get("backupRef", {})
    name = ref.get("name")
    return str(name) if name is not None else None


FROM_MYCTP = {"restore": {"fromControlPlane": "myctp"}}
FOUND: dict[str, tuple[dict[str, Any], ...]] = {
    restore.REQUIREMENT: (backup("myctp-1", minute=1), backup("myctp-final-2", minute=2))
}


@dataclass(frozen=True)
class FromControlPlaneCase:
    reason: str
    spec: dict[str, Any]
    required: dict[str, tuple[dict[str, Any], ...]] = field(default_factory=dict)
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    status: dict[str, Any] | None = None
    # The Backup the Instance is created from; None: no Instance composed.
    want: str | None = None
    # Whether the Backups are asked for, the InstanceReady reason, and a warning's fragment.
    asks: bool = False
    reason_code: str = ""
    warns: str = ""


FROM_CASES = [
    FromControlPlaneCase(
        "Before the Backups are fetched, nothing is created: the Backups are asked for.",
        FROM_MYCTP,
        asks=True,
        reason_code=c.LOOKING_FOR_BACKUP,
    ),
    FromControlPlaneCase(
        "With the Backups fetched, the Instance is created from the newest Completed one.",
        FROM_MYCTP,
        required=FOUND,
        want="myctp-final-2",
        asks=True,
        reason_code=c.WAITING_FOR_INSTANCE,
    ),
    FromControlPlaneCase(
        "No Completed Backup of the control plane: the Instance waits, and the composite "
        "says which control plane it waits for.",
        FROM_MYCTP,
        required={restore.REQUIREMENT: (backup("myctp-1", minute=1, phase="Failed"),)},
        asks=True,
        reason_code=c.NO_BACKUP_TO_RESTORE,
        warns="no Completed Backup of control plane myctp in namespace team-a",
    ),
    FromControlPlaneCase(
        "A choice recorded in the composite's status is kept: a newer Backup does not change "
        "it, and nothing is asked for again.",
        FROM_MYCTP,
        required=FOUND,
        status={"restore": {"backupName": "myctp-1"}},
        want="myctp-1",
        reason_code=c.WAITING_FOR_INSTANCE,
    ),
    FromControlPlaneCase(
        "An observed Instance keeps the Backup it was created from, and the status names it.",
        FROM_MYCTP,
        seen={
            "instance": b.ready(
                {"spec": {"forProvider": {"initialRestorationFrom": {"backupRef": {"name": "x"}}}}}
            )
        },
        want="x",
        reason_code="Available",
    ),
    FromControlPlaneCase(
        "A named Backup needs nothing fetched, and the status names it too.",
        {"restore": {"backupName": "myctp-backup-1"}},
        want="myctp-backup-1",
        reason_code=c.WAITING_FOR_INSTANCE,
    ),
]


@pytest.mark.parametrize("case", FROM_CASES, ids=lambda case: case.reason)
def test_a_restore_from_a_control_plane_is_resolved_once_before_the_instance_is_created(
    case: FromControlPlaneCase,
) -> None:
    outcome = run(case.spec, case.seen, case.required, status=case.status)
    if case.want is None:
        assert "instance" not in outcome.resources
        assert "restore" not in outcome.status
        assert outcome.ttl == c.PENDING_TTL
        # Composing nothing, the composite would be Ready: it says it is not.
        assert outcome.held_back
    else:
        assert restored_from(outcome) == case.want
        assert outcome.status["restore"] == {"backupName": case.want}
        assert not outcome.held_back
    assert bool(outcome.requirements) == case.asks
    instance_ready = next(cond for cond in outcome.conditions if cond.type == c.INSTANCE_READY)
    assert instance_ready.reason == case.reason_code
    if case.warns:
        assert any(case.warns in warning for warning in outcome.warnings)
        assert case.warns in instance_ready.message
    else:
        assert not outcome.warnings


def test_the_backups_asked_for_are_the_control_planes_in_the_composites_namespace() -> None:
    outcome = run(FROM_MYCTP)
    (asked,) = outcome.requirements
    assert (asked.api_version, asked.kind) == ("controlplane.spaces.upbound.io/v1alpha1", "Backup")
    assert asked.namespace == NAMESPACE
    assert dict(asked.match_labels) == {restore.INSTANCE_LABEL: "myctp"}


def test_a_legacy_composite_asks_in_its_claims_namespace() -> None:
    outcome = run(
        FROM_MYCTP, namespace=None, name="myctp-x7k2p", labels={c.CLAIM_NAMESPACE_LABEL: "team-b"}
    )
    (asked,) = outcome.requirements
    assert asked.namespace == "team-b"


def test_a_long_control_plane_name_is_looked_up_by_its_instances_shortened_name() -> None:
    long_name = "a-control-plane-whose-name-is-longer-than-a-kubernetes-label-may-be"
    outcome = run({"restore": {"fromControlPlane": long_name}})
    (asked,) = outcome.requirements
    label = dict(asked.match_labels)[restore.INSTANCE_LABEL]
    assert label == Names.of(NAMESPACE, long_name).instance
    assert len(label) <= 63


def test_while_the_instance_waits_nothing_that_needs_it_is_composed() -> None:
    outcome = run(
        {**FROM_MYCTP, "source": b.SOURCE, "backup": b.BACKUP},
        seen={"backup-role": b.role_with_arn()},
        required={restore.REQUIREMENT: ()},
    )
    assert "instance" not in outcome.resources
    assert "backup-schedule" not in outcome.resources
    assert not any(name.startswith("usage-") for name in outcome.resources)
    backups_ready = next(cond for cond in outcome.conditions if cond.type == c.BACKUPS_READY)
    assert (backups_ready.status, backups_ready.reason) == ("False", c.WAITING_FOR_INSTANCE)


def test_a_schedule_already_observed_is_never_withdrawn_while_the_instance_waits() -> None:
    outcome = run(
        {**FROM_MYCTP, "backup": b.BACKUP},
        seen={"backup-role": b.role_with_arn(), "backup-schedule": b.ready()},
        required={restore.REQUIREMENT: ()},
    )
    assert "backup-schedule" in outcome.resources


def test_over_grpc_crossplane_is_asked_for_the_backups_and_then_given_them() -> None:
    xr = b.composite(FROM_MYCTP, name="myctp-2")
    first = fn.run(request(xr, b.example_input()))
    selector = first.requirements.resources[restore.REQUIREMENT]
    assert (selector.api_version, selector.kind, selector.namespace) == (
        restore.BACKUP_API_VERSION,
        restore.BACKUP_KIND,
        NAMESPACE,
    )
    assert dict(selector.match_labels.labels) == {restore.INSTANCE_LABEL: "myctp"}
    assert "instance" not in first.desired.resources

    second_request = request(xr, b.example_input())
    for item in FOUND[restore.REQUIREMENT]:
        second_request.required_resources[restore.REQUIREMENT].items.add().resource.update(item)
    second = fn.run(second_request)
    # The requirement is the same, so Crossplane stops calling and keeps this answer.
    assert second.requirements == first.requirements
    ref = second.desired.resources["instance"].resource["spec"]["forProvider"]
    assert ref["initialRestorationFrom"]["backupRef"]["name"] == "myctp-final-2"
    assert second.desired.composite.resource["status"]["restore"]["backupName"] == "myctp-final-2"
    assert not [r for r in second.results if r.severity == fnv1.SEVERITY_FATAL]


def test_over_grpc_a_requirement_that_matched_nothing_is_told_from_one_not_fetched() -> None:
    xr = b.composite(FROM_MYCTP, name="myctp-2")
    fetched_nothing = request(xr, b.example_input())
    fetched_nothing.required_resources[restore.REQUIREMENT].SetInParent()
    rsp = fn.run(fetched_nothing)
    warnings = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    assert any("no Completed Backup of control plane myctp" in w for w in warnings)
    assert rsp.desired.composite.ready == fnv1.READY_FALSE
