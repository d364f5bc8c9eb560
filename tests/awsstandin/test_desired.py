"""provider-aws's fields become the S3 API's parameters, and what cannot be applied is said."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.awsstandin import desired

RENDERED_RULE = {
    "id": "expire-backups",
    "status": "Enabled",
    "filter": [{"prefix": "team-a/myctp/"}],
    "expiration": [{"days": 8}],
    "noncurrentVersionExpiration": [{"noncurrentDays": 7}],
    "abortIncompleteMultipartUpload": [{"daysAfterInitiation": 1}],
}
S3_RULE = {
    "ID": "expire-backups",
    "Status": "Enabled",
    "Filter": {"Prefix": "team-a/myctp/"},
    "Expiration": {"Days": 8},
    "NoncurrentVersionExpiration": {"NoncurrentDays": 7},
    "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 1},
}


@dataclass
class Case:
    reason: str
    for_provider: dict[str, Any]
    value: Any
    not_applied: list[str]


ENCRYPTION = [
    Case(
        "SSE-S3 is applied as the S3 API spells it",
        {"rule": [{"applyServerSideEncryptionByDefault": {"sseAlgorithm": "AES256"}}]},
        [
            {
                "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"},
                "BucketKeyEnabled": False,
            }
        ],
        [],
    ),
    Case(
        "a KMS key cannot be applied and is named in what is not applied",
        {
            "rule": [
                {
                    "applyServerSideEncryptionByDefault": [
                        {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": "arn:aws:kms:k"}
                    ],
                    "bucketKeyEnabled": True,
                }
            ]
        },
        None,
        [
            "default encryption aws:kms with arn:aws:kms:k (no KMS runs beside SeaweedFS; "
            "objects are stored without default encryption)"
        ],
    ),
]


@pytest.mark.parametrize("case", ENCRYPTION, ids=lambda case: case.reason)
def test_default_encryption_is_applied_where_the_s3_server_can(case: Case) -> None:
    wanted = desired.encryption_rules(case.for_provider)

    assert (wanted.value, wanted.not_applied) == (case.value, case.not_applied)


LIFECYCLE = [
    Case("the function's rule converts field for field", {"rule": [RENDERED_RULE]}, [S3_RULE], []),
    Case(
        "a rule's transitions are reported, the rest applied",
        {"rule": [{**RENDERED_RULE, "transition": [{"days": 30, "storageClass": "GLACIER"}]}]},
        [S3_RULE],
        ["rule expire-backups: transition"],
    ),
    Case(
        "a filter on tags is reported, its prefix applied",
        {"rule": [{**RENDERED_RULE, "filter": [{"prefix": "p/", "tag": [{"key": "k"}]}]}]},
        [{**S3_RULE, "Filter": {"Prefix": "p/"}}],
        ["rule expire-backups: filter ['tag']"],
    ),
]


@pytest.mark.parametrize("case", LIFECYCLE, ids=lambda case: case.reason)
def test_lifecycle_rules_convert_to_the_s3_api(case: Case) -> None:
    wanted = desired.lifecycle_rules(case.for_provider)

    assert (wanted.value, wanted.not_applied) == (case.value, case.not_applied)


@dataclass
class MatchCase:
    reason: str
    current: list[dict[str, Any]] | None
    matches: bool


MATCHES = [
    MatchCase("no rules at all do not match", None, matches=False),
    MatchCase(
        "fields the server adds do not count",
        [{**S3_RULE, "TransitionDefaultMinimumObjectSize": "all_storage_classes_128K"}],
        matches=True,
    ),
    MatchCase("a changed expiry does not match", [{**S3_RULE, "Expiration": {"Days": 9}}], False),
    MatchCase("an extra rule does not match", [S3_RULE, S3_RULE], matches=False),
]


@pytest.mark.parametrize("case", MATCHES, ids=lambda case: case.reason)
def test_the_bucket_lifecycle_matches_only_what_was_asked(case: MatchCase) -> None:
    assert desired.lifecycle_matches([S3_RULE], case.current) is case.matches


@pytest.mark.parametrize(
    ("status", "expected"),
    [("Enabled", "Enabled"), ("Suspended", "Suspended"), ("Disabled", "Suspended")],
)
def test_versioning_status_is_what_the_s3_api_takes(status: str, expected: str) -> None:
    for_provider = {"versioningConfiguration": {"status": status}}

    assert desired.versioning_status(for_provider) == expected


def test_references_and_selectors_are_not_echoed_into_at_provider() -> None:
    for_provider = {"bucket": "b", "bucketRef": {"name": "x"}, "bucketSelector": {}, "region": "r"}

    assert desired.without_references(for_provider) == {"bucket": "b", "region": "r"}
