"""The stand-in makes the function's S3 and IAM objects real, as provider-aws would.

A real kube-apiserver with the upstream provider-aws CRDs, a real SeaweedFS and
moto's IAM: the composed objects are applied, the stand-in reconciles them, and
what it made is then looked at in SeaweedFS and moto directly.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.awsstandin.cloud import Cloud
from sandbox.awsstandin.kinds import BY_NAME
from sandbox.awsstandin.standin import AwsStandin
from sandbox.s3 import Moto
from sandbox.spaces import Kube, condition, wait_for
from tests.awsstandin.composed import aws_objects

ACCOUNT = "123456789012"
READY_SECONDS = 60.0
_teams = itertools.count()


def coordinates(obj: dict[str, Any]) -> tuple[str, str | None, str, str, str]:
    """plural, namespace, name, group, version of a provider-aws object."""
    namespace = obj["metadata"].get("namespace")
    resource = BY_NAME[obj["kind"]].resource(namespaced=namespace is not None)
    return resource.plural, namespace, obj["metadata"]["name"], resource.group, resource.version


def fetch(kube: Kube, obj: dict[str, Any]) -> dict[str, Any] | None:
    plural, namespace, name, group, version = coordinates(obj)
    return kube.get(plural, namespace, name, group, version)


def apply(kube: Kube, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if namespace:
            kube.namespace(namespace)
        plural, _, _, group, version = coordinates(obj)
        kube.create(plural, obj, group, version)


def ready(kube: Kube, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The object once Ready and Synced are True, else None."""
    found = fetch(kube, obj)
    synced = condition(found, "Synced").get("status") == "True"
    return found if synced and condition(found, "Ready").get("status") == "True" else None


def wait_ready(kube: Kube, obj: dict[str, Any]) -> dict[str, Any]:
    return wait_for(f"{obj['kind']} Ready", lambda: ready(kube, obj), READY_SECONDS)


def by_kind(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in objects}


@dataclass(frozen=True)
class Flavour:
    reason: str
    legacy: bool


FLAVOURS = [
    Flavour("the v2 composite composes namespaced .aws.m.upbound.io kinds", legacy=False),
    Flavour("the legacy composite composes cluster-scoped .aws.upbound.io kinds", legacy=True),
]


@pytest.mark.parametrize("flavour", FLAVOURS, ids=lambda f: f.reason)
def test_the_composed_objects_become_ready_with_arn_and_id_and_exist_for_real(
    flavour: Flavour, standin: AwsStandin, aws_kube: Kube, moto_sts: Moto, cloud: Cloud
) -> None:
    team = f"team-{next(_teams)}-{'legacy' if flavour.legacy else 'v2'}"
    writer = moto_sts.create_identity(f"{team}-writer")
    objects = aws_objects(legacy=flavour.legacy, team=team, trusted_arn=writer.arn)
    assert sorted(by_kind(objects)) == sorted(BY_NAME), "the render composes every kind once"

    apply(aws_kube, objects)
    done = {obj["kind"]: wait_ready(aws_kube, obj) for obj in objects}

    bucket = done["Bucket"]["metadata"]["annotations"]["crossplane.io/external-name"]
    role = done["Role"]["metadata"]["annotations"]["crossplane.io/external-name"]
    policy = done["Policy"]["metadata"]["annotations"]["crossplane.io/external-name"]
    policy_arn = f"arn:aws:iam::{ACCOUNT}:policy/{policy}"
    at = {kind: obj["status"]["atProvider"] for kind, obj in done.items()}
    assert (at["Bucket"]["arn"], at["Bucket"]["id"]) == (f"arn:aws:s3:::{bucket}", bucket)
    assert (at["Role"]["arn"], at["Role"]["id"]) == (f"arn:aws:iam::{ACCOUNT}:role/{role}", role)
    assert (at["Policy"]["arn"], at["Policy"]["id"]) == (policy_arn, policy_arn)
    for kind in (
        "BucketVersioning",
        "BucketServerSideEncryptionConfiguration",
        "BucketPublicAccessBlock",
        "BucketLifecycleConfiguration",
    ):
        # The reference was resolved into the spec, as crossplane-runtime writes it.
        assert done[kind]["spec"]["forProvider"]["bucket"] == bucket, kind
        assert at[kind]["id"] == bucket, kind
        assert done[kind]["metadata"]["annotations"]["crossplane.io/external-name"] == bucket
    attachment = done["RolePolicyAttachment"]
    assert attachment["spec"]["forProvider"]["role"] == role
    assert attachment["spec"]["forProvider"]["policyArn"] == policy_arn
    assert at["RolePolicyAttachment"]["id"] == f"{role}/{policy_arn}"

    rendered = by_kind(objects)
    prefix = rendered["BucketLifecycleConfiguration"]["spec"]["forProvider"]["rule"][0]["filter"]
    # What SeaweedFS really holds.
    assert cloud.bucket_exists(bucket)
    assert cloud.versioning(bucket) == "Enabled"
    encryption = cloud.encryption(bucket)
    assert encryption is not None
    assert encryption[0]["ApplyServerSideEncryptionByDefault"]["SSEAlgorithm"] == "AES256"
    lifecycle = cloud.lifecycle(bucket)
    assert lifecycle is not None
    assert lifecycle[0]["Filter"] == {"Prefix": prefix[0]["prefix"]}
    assert lifecycle[0]["Expiration"]["Days"] >= 1
    assert lifecycle[0]["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7}
    assert lifecycle[0]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}
    # SeaweedFS has no public access block: the stand-in says so, having checked
    # that anonymous requests are refused.
    message = condition(done["BucketPublicAccessBlock"], "Ready")["message"]
    assert "public access block (NotImplemented)" in message
    assert "anonymous requests are refused" in message

    # What moto's IAM really holds: the documents exactly as rendered.
    found_role = cloud.role(role)
    assert found_role is not None
    assert found_role["AssumeRolePolicyDocument"] == json.loads(
        rendered["Role"]["spec"]["forProvider"]["assumeRolePolicy"]
    )
    found_policy = cloud.policy(policy_arn)
    assert found_policy is not None
    assert found_policy[1] == json.loads(rendered["Policy"]["spec"]["forProvider"]["policy"])
    assert cloud.attached_policies(role) == [policy_arn]


def bucket_with(
    team: str, kind: str, for_provider: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """A namespaced Bucket and one configuration object referring to it."""
    bucket = {
        "apiVersion": "s3.aws.m.upbound.io/v1beta1",
        "kind": "Bucket",
        "metadata": {"name": team, "namespace": team},
        "spec": {"forProvider": {"region": "us-east-1"}},
    }
    part = {
        "apiVersion": "s3.aws.m.upbound.io/v1beta1",
        "kind": kind,
        "metadata": {"name": team, "namespace": team},
        "spec": {
            "forProvider": {"bucketRef": {"name": team}, "region": "us-east-1", **for_provider}
        },
    }
    return bucket, part


def test_a_kms_key_is_said_not_applied_in_the_ready_condition_and_an_event(
    standin: AwsStandin, aws_kube: Kube, cloud: Cloud
) -> None:
    team = f"team-{next(_teams)}-kms"
    key = "arn:aws:kms:us-east-1:123456789012:key/backups"
    default = {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": key}
    bucket, encryption = bucket_with(
        team,
        "BucketServerSideEncryptionConfiguration",
        {"rule": [{"applyServerSideEncryptionByDefault": default, "bucketKeyEnabled": True}]},
    )
    apply(aws_kube, [bucket, encryption])

    done = wait_ready(aws_kube, encryption)

    assert f"default encryption aws:kms with {key}" in condition(done, "Ready")["message"]
    events = aws_kube.core.list_namespaced_event(team).items
    assert any(e.reason == "NotAppliedByStandIn" and key in e.message for e in events)
    assert cloud.encryption(team) is None, "nothing was applied in the KMS key's place"


def test_versioning_follows_the_spec_and_drift_in_seaweedfs_is_undone(
    standin: AwsStandin, aws_kube: Kube, cloud: Cloud
) -> None:
    team = f"team-{next(_teams)}-drift"
    bucket, versioning = bucket_with(
        team, "BucketVersioning", {"versioningConfiguration": {"status": "Enabled"}}
    )
    apply(aws_kube, [bucket, versioning])
    wait_ready(aws_kube, versioning)
    assert cloud.versioning(team) == "Enabled"

    cloud.put_versioning(team, "Suspended")
    wait_for("versioning enabled again", lambda: cloud.versioning(team) == "Enabled", 20.0)

    aws_kube.patch(
        "bucketversionings",
        team,
        team,
        {"spec": {"forProvider": {"versioningConfiguration": {"status": "Suspended"}}}},
        "s3.aws.m.upbound.io",
        "v1beta1",
    )
    wait_for("versioning suspended", lambda: cloud.versioning(team) == "Suspended", 20.0)


def test_a_role_already_there_under_the_rendered_name_is_adopted_and_its_trust_rewritten(
    standin: AwsStandin, aws_kube: Kube, moto_sts: Moto, cloud: Cloud
) -> None:
    # provider-aws observes by external name and takes over what it finds: a role
    # another team already had is rewritten to this team's trust policy. This is
    # what two composites sharing an AWS name would do to each other, and why the
    # function's AWS names carry a hash of <namespace>/<name>.
    team = f"team-{next(_teams)}-adopt"
    writer = moto_sts.create_identity(f"{team}-writer")
    role = by_kind(aws_objects(legacy=False, team=team, trusted_arn=writer.arn))["Role"]
    name = role["metadata"]["annotations"]["crossplane.io/external-name"]
    earlier_trust = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::210987654321:root"},
                "Action": "sts:AssumeRole",
            },
        ],
    }
    cloud.create_role(name, json.dumps(earlier_trust), "another team's role")
    created_at = cloud.role(name)
    assert created_at is not None

    apply(aws_kube, [role])
    done = wait_ready(aws_kube, role)

    found = cloud.role(name)
    assert found is not None
    assert found["RoleId"] == created_at["RoleId"], "the same role, not a new one"
    assert done["status"]["atProvider"]["uniqueId"] == created_at["RoleId"]
    assert found["AssumeRolePolicyDocument"] == json.loads(
        role["spec"]["forProvider"]["assumeRolePolicy"]
    )
