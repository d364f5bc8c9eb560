"""Deleting a managed resource deletes the bucket or role, or orphans it, as crossplane-runtime.

Namespaced (v2) resources follow `managementPolicies` alone; cluster-scoped
(legacy) ones weigh `deletionPolicy` as crossplane-runtime v1 does.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from provider.backup.storage.s3 import StorageSpec, Store
from sandbox.awsstandin.cloud import Cloud
from sandbox.awsstandin.standin import AwsStandin
from sandbox.s3 import Moto, SeaweedFS
from sandbox.spaces import Kube, condition, wait_for
from tests.awsstandin.composed import aws_objects
from tests.awsstandin.test_reconcile import READY_SECONDS, apply, coordinates, fetch, wait_ready

_names = itertools.count()
NAMESPACE = "deletion"
TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"AWS": "arn:aws:iam::123456789012:user/someone"},
                "Action": "sts:AssumeRole",
            }
        ],
    }
)


@dataclass(frozen=True)
class DeletionCase:
    reason: str
    namespaced: bool
    spec: dict[str, Any] = field(default_factory=dict)
    kept: bool = False


CASES = [
    DeletionCase("a namespaced resource with the default policies deletes", namespaced=True),
    DeletionCase(
        "a namespaced resource whose policies lack Delete orphans",
        namespaced=True,
        spec={"managementPolicies": ["Observe", "Create", "Update", "LateInitialize"]},
        kept=True,
    ),
    DeletionCase("a cluster-scoped resource with the default deletion policy deletes", False),
    DeletionCase(
        "a cluster-scoped resource with deletionPolicy Orphan orphans",
        namespaced=False,
        spec={"deletionPolicy": "Orphan"},
        kept=True,
    ),
    DeletionCase(
        "a cluster-scoped resource whose non-default policies name Delete deletes, Orphan or not",
        namespaced=False,
        spec={"deletionPolicy": "Orphan", "managementPolicies": ["Observe", "Create", "Delete"]},
    ),
]


def managed(
    kind: str, name: str, case: DeletionCase, for_provider: dict[str, Any]
) -> dict[str, Any]:
    group = "s3" if kind == "Bucket" else "iam"
    version = "v1beta1" if case.namespaced or kind != "Bucket" else "v1beta2"
    metadata: dict[str, Any] = {"name": name}
    config_ref: dict[str, str] = {"name": "default"}
    if case.namespaced:
        metadata["namespace"] = NAMESPACE
        config_ref["kind"] = "ClusterProviderConfig"
    suffix = ".m" if case.namespaced else ""
    return {
        "apiVersion": f"{group}.aws{suffix}.upbound.io/{version}",
        "kind": kind,
        "metadata": metadata,
        "spec": {"forProvider": for_provider, "providerConfigRef": config_ref, **case.spec},
    }


def wait_gone(kube: Kube, obj: dict[str, Any]) -> None:
    wait_for(f"{obj['kind']} gone", lambda: fetch(kube, obj) is None, READY_SECONDS)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_deleting_the_managed_resource_deletes_or_keeps_the_external_one(
    case: DeletionCase, standin: AwsStandin, aws_kube: Kube, cloud: Cloud
) -> None:
    name = f"deletion-{next(_names)}"
    objects = [
        managed("Bucket", name, case, {"region": "us-east-1"}),
        managed("Role", name, case, {"assumeRolePolicy": TRUST}),
    ]
    apply(aws_kube, objects)
    for obj in objects:
        wait_ready(aws_kube, obj)
    assert cloud.bucket_exists(name)
    assert cloud.role(name) is not None

    for obj in objects:
        metadata = obj["metadata"]
        plural = "buckets" if obj["kind"] == "Bucket" else "roles"
        group, version = obj["apiVersion"].split("/")
        aws_kube.delete(plural, metadata.get("namespace"), metadata["name"], group, version)
    for obj in objects:
        wait_gone(aws_kube, obj)

    assert cloud.bucket_exists(name) is case.kept
    assert (cloud.role(name) is not None) is case.kept


def refused_bucket(
    aws_kube: Kube,
    cloud: Cloud,
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
    *,
    versioned: bool,
) -> tuple[str, dict[str, Any], Store]:
    """A bucket holding an archive, deleted, its deletion refused as not empty."""
    name = f"deletion-{next(_names)}"
    bucket = managed("Bucket", name, CASES[0], {"region": "us-east-1"})
    apply(aws_kube, [bucket])
    wait_ready(aws_kube, bucket)
    if versioned:
        cloud.put_versioning(name, "Enabled")
    seaweed.configure(monkeypatch)
    store = Store.connect(StorageSpec(name, "us-east-1", endpoint=seaweed.endpoint))
    with store.writer("kept/archive.tar.gz") as stream:
        stream.write(b"archive")
    if versioned:
        # A delete marker: the version stays, and so does the bucket's content.
        store.delete("kept/archive.tar.gz")

    aws_kube.delete("buckets", NAMESPACE, name, "s3.aws.m.upbound.io", "v1beta1")
    refused = wait_for("the deletion refused", lambda: _refused(aws_kube, bucket), READY_SECONDS)
    assert "BucketNotEmpty" in refused["message"]
    assert cloud.bucket_exists(name)
    return name, bucket, store


def test_a_bucket_holding_objects_is_kept_with_the_reason_until_it_is_empty(
    standin: AwsStandin,
    aws_kube: Kube,
    cloud: Cloud,
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    name, bucket, store = refused_bucket(aws_kube, cloud, seaweed, monkeypatch, versioned=False)
    store.delete("kept/archive.tar.gz")
    wait_gone(aws_kube, bucket)
    assert not cloud.bucket_exists(name)


def test_a_versioned_bucket_refused_as_not_empty_goes_with_force_destroy(
    standin: AwsStandin,
    aws_kube: Kube,
    cloud: Cloud,
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Versioned, as the composed bucket is: a deleted archive leaves its version behind.
    name, bucket, _ = refused_bucket(aws_kube, cloud, seaweed, monkeypatch, versioned=True)
    aws_kube.patch(
        "buckets",
        NAMESPACE,
        name,
        {"spec": {"forProvider": {"forceDestroy": True}}},
        "s3.aws.m.upbound.io",
        "v1beta1",
    )
    wait_gone(aws_kube, bucket)
    assert not cloud.bucket_exists(name)


def _refused(kube: Kube, obj: dict[str, Any]) -> dict[str, Any] | None:
    synced = condition(fetch(kube, obj), "Synced")
    return synced if synced.get("status") == "False" else None


def test_a_policy_attached_to_a_role_is_kept_with_the_reason_until_it_is_detached(
    standin: AwsStandin, aws_kube: Kube, moto_sts: Moto, cloud: Cloud
) -> None:
    team = f"deletion-{next(_names)}"
    writer = moto_sts.create_identity(f"{team}-writer")
    objects = {
        obj["kind"]: obj
        for obj in aws_objects(legacy=False, team=team, trusted_arn=writer.arn)
        if obj["kind"] in {"Role", "Policy", "RolePolicyAttachment"}
    }
    apply(aws_kube, list(objects.values()))
    done = {kind: wait_ready(aws_kube, obj) for kind, obj in objects.items()}
    arn = done["Policy"]["status"]["atProvider"]["arn"]

    # IAM refuses to delete a policy still attached (moto alone would delete it and
    # leave the role holding a dangling attachment that can never be detached).
    delete_managed(aws_kube, objects["Policy"])
    refused = wait_for(
        "the policy's deletion refused",
        lambda: _refused(aws_kube, objects["Policy"]),
        READY_SECONDS,
    )
    assert "DeleteConflict" in refused["message"]
    assert cloud.policy(arn) is not None

    delete_managed(aws_kube, objects["RolePolicyAttachment"])
    wait_gone(aws_kube, objects["Policy"])
    assert cloud.policy(arn) is None
    delete_managed(aws_kube, objects["Role"])
    wait_gone(aws_kube, objects["Role"])


def delete_managed(kube: Kube, obj: dict[str, Any]) -> None:
    plural, namespace, name, group, version = coordinates(obj)
    kube.delete(plural, namespace, name, group, version)
