"""Annotations and metadata, against crossplane-runtime's ``pkg/meta``.

The expected values follow crossplane-runtime v2.2.1's ``meta.go``:
``ExternalCreateIncomplete`` is true when the pending time is set and strictly
after the later of the succeeded and failed times (an unset or unparsable
time is Go's zero time); times are parsed with ``time.RFC3339``, which accepts
fractional seconds and any offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from provider.managed import meta

PENDING = "crossplane.io/external-create-pending"
SUCCEEDED = "crossplane.io/external-create-succeeded"
FAILED = "crossplane.io/external-create-failed"


def annotated(annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "cp", "namespace": "team-a", "annotations": annotations}}


@dataclass
class IncompleteCase:
    reason: str
    annotations: dict[str, str]
    incomplete: bool


INCOMPLETE_CASES = [
    IncompleteCase("a resource never created is not incomplete", {}, incomplete=False),
    IncompleteCase(
        "a create only recorded as pending is incomplete",
        {PENDING: "2024-05-01T10:00:00Z"},
        incomplete=True,
    ),
    IncompleteCase(
        "a pending create newer than the last success is incomplete",
        {PENDING: "2024-05-01T10:00:01Z", SUCCEEDED: "2024-05-01T10:00:00Z"},
        incomplete=True,
    ),
    IncompleteCase(
        "a success newer than the pending create completes it",
        {PENDING: "2024-05-01T10:00:00Z", SUCCEEDED: "2024-05-01T10:00:01Z"},
        incomplete=False,
    ),
    IncompleteCase(
        "a success in the same second as the pending create completes it",
        {PENDING: "2024-05-01T10:00:00Z", SUCCEEDED: "2024-05-01T10:00:00Z"},
        incomplete=False,
    ),
    IncompleteCase(
        "a failure newer than the pending create completes it",
        {PENDING: "2024-05-01T10:00:00Z", FAILED: "2024-05-01T10:00:01Z"},
        incomplete=False,
    ),
    IncompleteCase(
        "a failure in the same second as the pending create completes it",
        {PENDING: "2024-05-01T10:00:00Z", FAILED: "2024-05-01T10:00:00Z"},
        incomplete=False,
    ),
    IncompleteCase(
        "a pending create newer than the last failure is incomplete",
        {PENDING: "2024-05-01T10:00:01Z", FAILED: "2024-05-01T10:00:00Z"},
        incomplete=True,
    ),
    IncompleteCase(
        "a pending create newer than both a success and a failure is incomplete",
        {
            PENDING: "2024-05-01T10:00:02Z",
            SUCCEEDED: "2024-05-01T10:00:00Z",
            FAILED: "2024-05-01T10:00:01Z",
        },
        incomplete=True,
    ),
    IncompleteCase(
        "a pending create after an old failure but before a success is complete",
        {
            PENDING: "2024-05-01T10:00:01Z",
            SUCCEEDED: "2024-05-01T10:00:02Z",
            FAILED: "2024-05-01T10:00:00Z",
        },
        incomplete=False,
    ),
    IncompleteCase(
        "a success without any pending create is not incomplete",
        {SUCCEEDED: "2024-05-01T10:00:00Z"},
        incomplete=False,
    ),
    IncompleteCase(
        "fractional seconds put a pending create half a second after the success",
        {PENDING: "2024-05-01T10:00:00.5Z", SUCCEEDED: "2024-05-01T10:00:00Z"},
        incomplete=True,
    ),
    IncompleteCase(
        "fractional seconds put a success half a second after the pending create",
        {PENDING: "2024-05-01T10:00:00Z", SUCCEEDED: "2024-05-01T10:00:00.5Z"},
        incomplete=False,
    ),
    IncompleteCase(
        "a fractional pending time alone is incomplete",
        {PENDING: "2024-05-01T10:00:00.123456Z"},
        incomplete=True,
    ),
    IncompleteCase(
        "an offset is honoured when comparing a pending create with a success",
        {PENDING: "2024-05-01T12:00:01+02:00", SUCCEEDED: "2024-05-01T10:00:00Z"},
        incomplete=True,
    ),
    IncompleteCase(
        "an offset is honoured when comparing a success with a pending create",
        {PENDING: "2024-05-01T10:00:01Z", SUCCEEDED: "2024-05-01T12:00:02+02:00"},
        incomplete=False,
    ),
    IncompleteCase(
        "an empty pending annotation counts as unset",
        {PENDING: "", SUCCEEDED: "2024-05-01T10:00:00Z"},
        incomplete=False,
    ),
    IncompleteCase(
        "an empty success annotation counts as unset",
        {PENDING: "2024-05-01T10:00:00Z", SUCCEEDED: ""},
        incomplete=True,
    ),
]


@pytest.mark.parametrize("case", INCOMPLETE_CASES, ids=lambda case: case.reason)
def test_create_incomplete_follows_crossplane_runtime(case: IncompleteCase) -> None:
    assert meta.create_incomplete(annotated(case.annotations)) is case.incomplete


# Where we differ from crossplane-runtime: Go's time.Parse(time.RFC3339, ...)
# fails on these and GetExternalCreate* return the zero time, so the
# annotation counts as unset; meta._time raises or returns a naive datetime.
MALFORMED_CASES = [
    IncompleteCase(
        "an unparsable pending annotation counts as unset",
        {PENDING: "yesterday"},
        incomplete=False,
    ),
    IncompleteCase(
        "an unparsable success annotation counts as unset",
        {PENDING: "2024-05-01T10:00:00Z", SUCCEEDED: "yesterday"},
        incomplete=True,
    ),
    IncompleteCase(
        "a pending time without an offset is not RFC 3339 and counts as unset",
        {PENDING: "2024-05-01T10:00:00"},
        incomplete=False,
    ),
    IncompleteCase(
        "a success time without an offset is not RFC 3339 and counts as unset",
        {PENDING: "2024-05-01T10:00:00Z", SUCCEEDED: "2024-05-01T10:00:01"},
        incomplete=True,
    ),
]


@pytest.mark.parametrize("case", MALFORMED_CASES, ids=lambda case: case.reason)
def test_create_incomplete_treats_a_malformed_time_as_unset_like_crossplane_runtime(
    case: IncompleteCase,
) -> None:
    assert meta.create_incomplete(annotated(case.annotations)) is case.incomplete


NOW = datetime(2024, 5, 1, 10, 0, 30, tzinfo=UTC)


@dataclass
class GraceCase:
    reason: str
    annotations: dict[str, str]
    seconds: float
    left: float


GRACE_CASES = [
    GraceCase("never created leaves no grace", {}, 30, left=0),
    GraceCase(
        "a create that only failed did not succeed", {FAILED: "2024-05-01T10:00:20Z"}, 30, left=0
    ),
    GraceCase(
        "a success ten seconds ago leaves twenty of thirty seconds",
        {SUCCEEDED: "2024-05-01T10:00:20Z"},
        30,
        left=20,
    ),
    GraceCase(
        "a success exactly thirty seconds ago leaves nothing of thirty seconds",
        {SUCCEEDED: "2024-05-01T10:00:00Z"},
        30,
        left=0,
    ),
    GraceCase(
        "a success thirty one seconds ago leaves nothing of thirty seconds",
        {SUCCEEDED: "2024-05-01T09:59:59Z"},
        30,
        left=0,
    ),
    GraceCase(
        "a success half a second inside the period leaves half a second",
        {SUCCEEDED: "2024-05-01T10:00:00.5Z"},
        30,
        left=0.5,
    ),
    GraceCase(
        "a success stamped in the future by a skewed clock leaves one whole period",
        {SUCCEEDED: "2024-05-01T10:01:00Z"},
        30,
        left=30,
    ),
    GraceCase(
        "a zero grace period never waits",
        {SUCCEEDED: "2024-05-01T10:00:30Z"},
        0,
        left=0,
    ),
]


@pytest.mark.parametrize("case", GRACE_CASES, ids=lambda case: case.reason)
def test_the_grace_left_after_a_create_follows_crossplane_runtime(case: GraceCase) -> None:
    assert meta.create_grace_left(annotated(case.annotations), case.seconds, NOW) == (
        pytest.approx(case.left)
    )


@dataclass
class ObjectCase:
    reason: str
    obj: dict[str, Any]
    expected: object


PAUSED_CASES = [
    ObjectCase("the value true pauses", annotated({meta.PAUSED: "true"}), expected=True),
    ObjectCase("the value True does not pause", annotated({meta.PAUSED: "True"}), expected=False),
    ObjectCase("the value false does not pause", annotated({meta.PAUSED: "false"}), False),
    ObjectCase("an empty value does not pause", annotated({meta.PAUSED: ""}), expected=False),
    ObjectCase("the value yes does not pause", annotated({meta.PAUSED: "yes"}), expected=False),
    ObjectCase("a padded true does not pause", annotated({meta.PAUSED: " true"}), expected=False),
    ObjectCase("no annotation does not pause", annotated({}), expected=False),
    ObjectCase("null annotations do not pause", {"metadata": {"annotations": None}}, False),
    ObjectCase("no metadata does not pause", {}, expected=False),
]


@pytest.mark.parametrize("case", PAUSED_CASES, ids=lambda case: case.reason)
def test_only_the_exact_value_true_pauses_reconciliation(case: ObjectCase) -> None:
    assert meta.is_paused(case.obj) is case.expected


EXTERNAL_NAME_CASES = [
    ObjectCase("a set name is returned", annotated({meta.EXTERNAL_NAME: "team-a-cp"}), "team-a-cp"),
    ObjectCase("no annotation gives an empty name", annotated({}), expected=""),
    ObjectCase("null annotations give an empty name", {"metadata": {"annotations": None}}, ""),
    ObjectCase("no metadata gives an empty name", {}, expected=""),
    ObjectCase(
        "other annotations are not mistaken for the name",
        annotated({"crossplane.io/external-name-other": "x", PENDING: "2024-05-01T10:00:00Z"}),
        expected="",
    ),
]


@pytest.mark.parametrize("case", EXTERNAL_NAME_CASES, ids=lambda case: case.reason)
def test_external_name_reads_the_crossplane_annotation(case: ObjectCase) -> None:
    assert meta.external_name(case.obj) == case.expected


DELETED_CASES = [
    ObjectCase(
        "a deletion timestamp means deleted",
        {"metadata": {"deletionTimestamp": "2024-05-01T10:00:00Z"}},
        expected=True,
    ),
    ObjectCase("no deletion timestamp means not deleted", {"metadata": {"name": "cp"}}, False),
    ObjectCase(
        "a null deletion timestamp means not deleted",
        {"metadata": {"deletionTimestamp": None}},
        False,
    ),
    ObjectCase("no metadata means not deleted", {}, expected=False),
]


@pytest.mark.parametrize("case", DELETED_CASES, ids=lambda case: case.reason)
def test_was_deleted_follows_the_deletion_timestamp(case: ObjectCase) -> None:
    assert meta.was_deleted(case.obj) is case.expected


def test_the_annotation_keys_and_finalizer_are_crossplane_runtimes() -> None:
    assert (
        meta.FINALIZER,
        meta.EXTERNAL_NAME,
        meta.EXTERNAL_CREATE_PENDING,
        meta.EXTERNAL_CREATE_SUCCEEDED,
        meta.EXTERNAL_CREATE_FAILED,
        meta.PAUSED,
    ) == (
        "finalizer.managedresource.crossplane.io",
        "crossplane.io/external-name",
        PENDING,
        SUCCEEDED,
        FAILED,
        "crossplane.io/paused",
    )


def test_a_timestamp_is_written_as_rfc_3339_in_utc_and_read_back_to_the_second() -> None:
    written = meta.timestamp(datetime(2024, 5, 1, 10, 0, 0, 999_999, tzinfo=UTC))

    assert written == "2024-05-01T10:00:00Z"
    later = annotated({SUCCEEDED: written})
    assert meta.create_grace_left(later, 1, datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC)) == 1
    assert not meta.create_grace_left(
        later, 1, datetime(2024, 5, 1, 10, 0, 0, tzinfo=UTC) + timedelta(seconds=1)
    )
