"""AWS names: unambiguous per (namespace, name), within AWS's rules, kept on upgrade."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from function.compose import compose
from function.names import IAM_POLICY_MAX, IAM_ROLE_MAX, S3_BUCKET_MAX, AwsNames
from tests import builders as b

PREFIX = "acme-ctp-backups"
EXTERNAL_NAME = "crossplane.io/external-name"
# IAM role and policy names: letters, digits and +=,.@_- ; S3: lowercase letters,
# digits and hyphens, a letter or digit at each end, at least 3 characters.
IAM_NAME = re.compile(r"[A-Za-z0-9+=,.@_-]+")
BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")

SEGMENT = st.from_regex(r"[a-z0-9]{1,12}", fullmatch=True)
LABEL = st.from_regex(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True)
SUBDOMAIN = st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", fullmatch=True)


@given(segments=st.lists(SEGMENT, min_size=3, max_size=8), data=st.data())
def test_two_composites_whose_names_differ_only_in_where_the_dash_falls_share_no_aws_name(
    segments: list[str], data: st.DataObject
) -> None:
    # team-a/prod and team/a-prod: one string of segments split at two different dashes.
    first, second = data.draw(
        st.lists(st.integers(1, len(segments) - 1), min_size=2, max_size=2, unique=True)
    )
    one = AwsNames.of(PREFIX, "-".join(segments[:first]), "-".join(segments[first:]))
    other = AwsNames.of(PREFIX, "-".join(segments[:second]), "-".join(segments[second:]))
    assert one.role != other.role
    assert one.policy != other.policy
    assert one.bucket != other.bucket


@given(namespace=LABEL, name=SUBDOMAIN, prefix=st.sampled_from([PREFIX, "b", "x" * 60]))
def test_every_aws_name_keeps_to_the_rules_of_its_kind(
    namespace: str, name: str, prefix: str
) -> None:
    names = AwsNames.of(prefix, namespace, name)
    assert len(names.role) <= IAM_ROLE_MAX and IAM_NAME.fullmatch(names.role)
    assert len(names.policy) <= IAM_POLICY_MAX and IAM_NAME.fullmatch(names.policy)
    assert len(names.bucket) <= S3_BUCKET_MAX and BUCKET_NAME.fullmatch(names.bucket)


def test_the_names_of_a_short_composite_read_as_namespace_name_and_the_instance_s_hash() -> None:
    # The hash the Instance's external name carries: sha256 of "<namespace>/<name>", 8 digits.
    digest = hashlib.sha256(b"team-a/prod").hexdigest()[:8]
    assert AwsNames.of(PREFIX, "team-a", "prod") == AwsNames(
        role=f"team-a-prod-{digest}-backup",
        policy=f"team-a-prod-{digest}-backup",
        bucket=f"acme-ctp-backups-team-a-prod-{digest}",
    )


def _observed(external_names: dict[str, str]) -> dict[str, dict[str, Any]]:
    return {
        name: b.ready({"metadata": {"annotations": {EXTERNAL_NAME: value}}})
        for name, value in external_names.items()
    }


BEFORE = AwsNames.before_hashes(PREFIX, "team-a", "myctp")
NOW = AwsNames.of(PREFIX, "team-a", "myctp")


@dataclass(frozen=True)
class UpgradeCase:
    reason: str
    observed: dict[str, str] = field(default_factory=dict)
    want: AwsNames = NOW


UPGRADE_CASES = [
    UpgradeCase("A new composite gets the names with a hash."),
    UpgradeCase(
        "A composite made before the hash keeps every name its resources already have.",
        observed={
            "backup-role": BEFORE.role,
            "backup-policy": BEFORE.policy,
            "backup-bucket": BEFORE.bucket,
        },
        want=BEFORE,
    ),
    UpgradeCase(
        "A composite observed under the new names keeps them.",
        observed={
            "backup-role": NOW.role,
            "backup-policy": NOW.policy,
            "backup-bucket": NOW.bucket,
        },
    ),
    UpgradeCase(
        "Each resource keeps its own name: an old role beside a bucket not yet observed.",
        observed={"backup-role": BEFORE.role},
        want=AwsNames(role=BEFORE.role, policy=NOW.policy, bucket=NOW.bucket),
    ),
    UpgradeCase(
        "An external name edited to another team's role is not adopted: the function's own "
        "name is rendered again.",
        observed={"backup-role": "team-b-prod-backup", "backup-bucket": "platform-bucket"},
    ),
]


@pytest.mark.parametrize("case", UPGRADE_CASES, ids=lambda case: case.reason)
def test_an_upgrade_keeps_the_aws_names_already_observed_and_new_composites_get_new_ones(
    case: UpgradeCase,
) -> None:
    xr = b.composite({"backup": {}})
    outcome = compose(b.observed(xr, _observed(case.observed)), b.example_input())
    bodies = {name: desired.body for name, desired in outcome.resources.items()}

    def external(name: str) -> str:
        return str(bodies[name]["metadata"]["annotations"][EXTERNAL_NAME])

    assert (
        AwsNames(
            role=external("backup-role"),
            policy=external("backup-policy"),
            bucket=external("backup-bucket"),
        )
        == case.want
    )
    assert outcome.status["backup"]["bucket"] == case.want.bucket
    granted = bodies["backup-policy"]["spec"]["forProvider"]["policy"]
    assert f"arn:aws:s3:::{case.want.bucket}/team-a/myctp/*" in granted
