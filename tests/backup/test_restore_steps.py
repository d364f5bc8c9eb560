"""A restore's decisions, without servers: its steps, where it resumes, what it writes when."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from provider.backup.format.archive import ResourceType
from provider.backup.restore.steps import (
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    REASON_COMPLETED,
    REASON_FAILED,
    REASON_IN_PROGRESS,
    REASON_PENDING,
    UNPAUSE,
    Progress,
    Resume,
    Step,
    Throttle,
    pending,
    plan,
    resume_point,
    verdict,
)

NAMESPACES = ResourceType("namespaces", "", "v1", "Namespace", False)
CONFIGMAPS = ResourceType("configmaps", "", "v1", "ConfigMap", True)
SECRETS = ResourceType("secrets", "", "v1", "Secret", True)
PROVIDERS = ResourceType("providers", "pkg.crossplane.io", "v1", "Provider", False)
XRDS = ResourceType(
    "compositeresourcedefinitions",
    "apiextensions.crossplane.io",
    "v2",
    "CompositeResourceDefinition",
    False,
)
COMPOSITIONS = ResourceType(
    "compositions", "apiextensions.crossplane.io", "v1", "Composition", False
)
CLAIMS = ResourceType("dbclaims", "db.example.org", "v1", "DBClaim", True, ("claim",))
COMPOSITES = ResourceType("xdbs", "db.example.org", "v1", "XDB", False, ("composite",))
BUCKETS = ResourceType("buckets", "s3.example.org", "v1", "Bucket", True, ("crossplane", "managed"))
OTHERS = ResourceType("widgets", "widgets.example.org", "v1", "Widget", True)
EVERY_TYPE = (
    NAMESPACES,
    CONFIGMAPS,
    SECRETS,
    PROVIDERS,
    XRDS,
    COMPOSITIONS,
    CLAIMS,
    COMPOSITES,
    BUCKETS,
    OTHERS,
)


@dataclass
class PlanCase:
    reason: str
    types: tuple[ResourceType, ...]
    counts: dict[str, int]
    expected: list[Step]


PLAN_CASES = [
    PlanCase(
        reason="every kind of the contract gets its step, in the contract's order",
        # Given out of order: the plan orders them.
        types=tuple(reversed(EVERY_TYPE)),
        counts={t.folder: 2 for t in EVERY_TYPE},
        expected=[
            Step("namespaces", frozenset({"namespaces"}), 2),
            Step("configmaps", frozenset({"configmaps"}), 2),
            Step("secrets", frozenset({"secrets"}), 2),
            Step("packages", frozenset({"providers.pkg.crossplane.io"}), 2),
            Step(
                "definitions",
                frozenset(
                    {
                        "compositeresourcedefinitions.apiextensions.crossplane.io",
                        "compositions.apiextensions.crossplane.io",
                    }
                ),
                4,
            ),
            Step("claims", frozenset({"dbclaims.db.example.org"}), 2),
            Step("composites", frozenset({"xdbs.db.example.org"}), 2),
            Step("managed", frozenset({"buckets.s3.example.org"}), 2),
            Step("resources", frozenset({"widgets.widgets.example.org"}), 2),
            Step(UNPAUSE, frozenset(), 0),
        ],
    ),
    PlanCase(
        reason="only the kinds the archive holds are planned, and unpause always ends it",
        types=(SECRETS, NAMESPACES),
        counts={"secrets": 7, "namespaces": 1},
        expected=[
            Step("namespaces", frozenset({"namespaces"}), 1),
            Step("secrets", frozenset({"secrets"}), 7),
            Step(UNPAUSE, frozenset(), 0),
        ],
    ),
    PlanCase(
        reason="an empty archive is only the unpause step",
        types=(),
        counts={},
        expected=[Step(UNPAUSE, frozenset(), 0)],
    ),
]


@pytest.mark.parametrize("case", PLAN_CASES, ids=lambda c: c.reason)
def test_a_restore_is_planned_as_the_contracts_steps(case: PlanCase) -> None:
    assert plan({t.folder: t for t in case.types}, case.counts) == case.expected, case.reason


STEPS = [
    Step("namespaces", frozenset({"namespaces"}), 10),
    Step("configmaps", frozenset({"configmaps"}), 100),
    Step("secrets", frozenset({"secrets"}), 50),
    Step("managed", frozenset({"buckets.s3.example.org"}), 40),
    Step(UNPAUSE, frozenset(), 0),
]
STARTED = "2026-12-03T09:00:00Z"


@dataclass
class ResumeCase:
    reason: str
    recorded: dict[str, Any] | None
    expected: Resume


def record(**fields: Any) -> dict[str, Any]:
    return {"backupName": "b1", "startedAt": STARTED, **fields}


RESUME_CASES = [
    ResumeCase(
        reason="nothing recorded: from the first step",
        recorded=None,
        expected=Resume(0, 0, None),
    ),
    ResumeCase(
        reason="interrupted at a step: at that step, the objects of the steps before applied",
        recorded=record(phase=IN_PROGRESS, step="secrets", applied=130, total=200),
        expected=Resume(2, 110, STARTED),
    ),
    ResumeCase(
        reason="interrupted while unpausing: only the unpause is left",
        recorded=record(phase=IN_PROGRESS, step=UNPAUSE, applied=200, total=200),
        expected=Resume(4, 200, STARTED),
    ),
    ResumeCase(
        reason="failed at a step: retried at that step",
        recorded=record(phase=FAILED, step="managed", message="CRD not Established"),
        expected=Resume(3, 160, STARTED),
    ),
    ResumeCase(
        reason="failed before any step (the Backup was missing): from the first step",
        recorded=record(phase=FAILED, step="", message="Backup team-a/b1 not found"),
        expected=Resume(0, 0, None),
    ),
    ResumeCase(
        reason="a record of another Backup is not this restore's: from the first step",
        recorded={**record(phase=IN_PROGRESS, step="secrets"), "backupName": "b0"},
        expected=Resume(0, 0, None),
    ),
    ResumeCase(
        reason="a step this archive's plan does not have: from the first step",
        recorded=record(phase=IN_PROGRESS, step="claims"),
        expected=Resume(0, 0, None),
    ),
    ResumeCase(
        reason="a Completed record is never resumed (the caller does not restore again)",
        recorded=record(phase=COMPLETED, step=UNPAUSE),
        expected=Resume(0, 0, None),
    ),
]


@pytest.mark.parametrize("case", RESUME_CASES, ids=lambda c: c.reason)
def test_an_interrupted_restore_resumes_at_the_step_it_recorded(case: ResumeCase) -> None:
    assert resume_point(STEPS, case.recorded, "b1") == case.expected, case.reason


def progress(step: str = "configmaps", applied: int = 20, phase: str = IN_PROGRESS) -> Progress:
    return Progress("b1", phase, step, applied, 200, STARTED)  # type: ignore[arg-type]


# What was written last, at 100 s, in most cases.
EARLIER = progress()


@dataclass
class ThrottleCase:
    reason: str
    progress: Progress
    now: float
    expected: bool
    last: Progress | None = EARLIER
    last_at: float | None = 100.0


THROTTLE_CASES = [
    ThrottleCase(
        reason="the first progress is written",
        progress=progress(),
        now=100.0,
        last=None,
        last_at=None,
        expected=True,
    ),
    ThrottleCase(
        reason="more objects within the interval wait",
        progress=progress(applied=60),
        now=101.9,
        expected=False,
    ),
    ThrottleCase(
        reason="more objects once the interval passed are written",
        progress=progress(applied=60),
        now=102.0,
        expected=True,
    ),
    ThrottleCase(
        reason="a new step is written at once",
        progress=progress(step="secrets", applied=110),
        now=100.1,
        expected=True,
    ),
    ThrottleCase(
        reason="a failure is written at once",
        progress=progress().failed("cannot apply"),
        now=100.1,
        expected=True,
    ),
    ThrottleCase(
        reason="nothing new is never written, however long since",
        progress=progress(),
        now=500.0,
        expected=False,
    ),
]


@pytest.mark.parametrize("case", THROTTLE_CASES, ids=lambda c: c.reason)
def test_progress_is_written_at_a_bounded_rate(case: ThrottleCase) -> None:
    throttle = Throttle(2.0, case.last_at, case.last)
    assert throttle.due(case.progress, case.now) is case.expected, case.reason


def test_a_restore_of_thousands_of_objects_writes_its_progress_a_bounded_number_of_times() -> None:
    # 10,000 objects at 500 a second, reported every 16: twenty seconds, five steps.
    throttle, writes, now = Throttle(2.0), 0, 0.0
    applied = 0
    for step in ("namespaces", "configmaps", "secrets", "managed"):
        for _ in range(2500 // 16):
            applied += 16
            now += 16 / 500
            current = progress(step, applied)
            if throttle.due(current, now):
                throttle, writes = throttle.wrote(current, now), writes + 1
    # One per step and one per two seconds: about 4 + 20/2, never one per batch (625).
    assert writes <= 4 + 20 / 2 + 1


@dataclass
class VerdictCase:
    reason: str
    progress: Progress
    status: str
    condition_reason: str
    message: str


VERDICT_CASES = [
    VerdictCase(
        reason="in progress: the step and the counts",
        progress=progress("secrets", 120),
        status="False",
        condition_reason=REASON_IN_PROGRESS,
        message="restoring Backup b1: step secrets, 120 of 200 objects applied",
    ),
    VerdictCase(
        reason="unpausing: what it does",
        progress=progress(UNPAUSE, 200),
        status="False",
        condition_reason=REASON_IN_PROGRESS,
        message="restoring Backup b1: unpausing the managed resources the restore paused",
    ),
    VerdictCase(
        reason="completed: how many objects, from which Backup",
        progress=progress(UNPAUSE, 200, COMPLETED),
        status="True",
        condition_reason=REASON_COMPLETED,
        message="restored 200 objects from Backup b1",
    ),
    VerdictCase(
        reason="failed at a step: why, and that it is retried from there",
        progress=progress("managed", 170).failed("CustomResourceDefinition x is not Established"),
        status="False",
        condition_reason=REASON_FAILED,
        message=(
            "restore from Backup b1 failed at step managed: CustomResourceDefinition x is not "
            "Established; it is retried from that step (objects applied so far stay)"
        ),
    ),
    VerdictCase(
        reason="failed before anything was applied: why, and that it is retried",
        progress=progress("", 0).failed("Backup team-a/b1 not found"),
        status="False",
        condition_reason=REASON_FAILED,
        message=(
            "restore from Backup b1 failed before applying anything: Backup team-a/b1 not "
            "found; it is retried"
        ),
    ),
]


@pytest.mark.parametrize("case", VERDICT_CASES, ids=lambda c: c.reason)
def test_the_restored_condition_says_where_the_restore_stands(case: VerdictCase) -> None:
    found = verdict(case.progress)
    assert (found.status, found.reason, found.message) == (
        case.status,
        case.condition_reason,
        case.message,
    ), case.reason


def test_a_restore_not_started_says_what_it_waits_for() -> None:
    found = pending("b1", "its control plane has a kubeconfig")
    assert (found.status, found.reason) == ("False", REASON_PENDING)
    assert found.message == "Backup b1 is restored once its control plane has a kubeconfig"


def test_a_record_names_every_field_of_the_contract_and_drops_empty_ones() -> None:
    assert progress("secrets", 120).record() == {
        "backupName": "b1",
        "phase": IN_PROGRESS,
        "step": "secrets",
        "applied": 120,
        "total": 200,
        "startedAt": STARTED,
    }
    assert progress("secrets", 120).failed("boom").record()["message"] == "boom"
