"""References resolve as crossplane-runtime's APISimpleReferenceResolver does (no servers)."""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from provider.kube import Cluster, Resource
from sandbox.awsstandin.kinds import BUCKET_VERSIONING, ROLE_POLICY_ATTACHMENT, Kind
from sandbox.awsstandin.references import References, UnresolvedReferenceError

NAMESPACE = "team-a"


def obj(
    name: str,
    *,
    external_name: str = "",
    arn: str = "",
    labels: dict[str, str] | None = None,
    controller: str = "",
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "labels": labels or {}}
    if external_name:
        metadata["annotations"] = {"crossplane.io/external-name": external_name}
    if controller:
        metadata["ownerReferences"] = [{"uid": controller, "controller": True}]
    return {"metadata": metadata, "status": {"atProvider": {"arn": arn}} if arn else {}}


class FakeCluster:
    """The two reads References makes, from a fixed set of objects per kind."""

    def __init__(self, objects: dict[str, list[dict[str, Any]]]) -> None:
        self.objects = objects

    async def get(self, resource: Resource, namespace: str | None, name: str) -> Any:
        found = [o for o in self.objects.get(resource.kind, []) if o["metadata"]["name"] == name]
        return copy.deepcopy(found[0]) if found else None

    async def list(self, resource: Resource, namespace: str | None = None) -> Any:
        return copy.deepcopy(self.objects.get(resource.kind, [])), "1"


@dataclass
class ResolveCase:
    reason: str
    kind: Kind
    for_provider: dict[str, Any]
    objects: dict[str, list[dict[str, Any]]]
    expected: dict[str, Any] | None = None
    error: str = ""
    owner: str = ""
    changed: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


CASES = [
    ResolveCase(
        "a bucketRef resolves to the bucket's external name",
        BUCKET_VERSIONING,
        {"bucketRef": {"name": "b"}},
        {"Bucket": [obj("b", external_name="real-bucket")]},
        expected={"bucketRef": {"name": "b"}, "bucket": "real-bucket"},
    ),
    ResolveCase(
        "a policyArnRef resolves to the policy's status.atProvider.arn, a roleRef to its name",
        ROLE_POLICY_ATTACHMENT,
        {"roleRef": {"name": "r"}, "policyArnRef": {"name": "p"}},
        {
            "Role": [obj("r", external_name="team-role")],
            "Policy": [obj("p", external_name="team-policy", arn="arn:aws:iam::1:policy/p")],
        },
        expected={
            "roleRef": {"name": "r"},
            "role": "team-role",
            "policyArnRef": {"name": "p"},
            "policyArn": "arn:aws:iam::1:policy/p",
        },
    ),
    ResolveCase(
        "a reference to an object that is not there names the field and the object",
        BUCKET_VERSIONING,
        {"bucketRef": {"name": "missing"}},
        {},
        error="spec.forProvider.Bucket: cannot get referenced resource: missing not found",
    ),
    ResolveCase(
        "a policy without an ARN yet leaves the reference unresolved",
        ROLE_POLICY_ATTACHMENT,
        {"roleRef": {"name": "r"}, "policyArnRef": {"name": "p"}},
        {"Role": [obj("r", external_name="team-role")], "Policy": [obj("p")]},
        error="spec.forProvider.PolicyArn: referenced field was empty "
        "(referenced resource may not yet be ready)",
    ),
    ResolveCase(
        "a value already there is kept when the policy does not say Always",
        BUCKET_VERSIONING,
        {"bucket": "kept", "bucketRef": {"name": "b"}},
        {"Bucket": [obj("b", external_name="other")]},
        expected={"bucket": "kept", "bucketRef": {"name": "b"}},
        changed=False,
    ),
    ResolveCase(
        "a value already there is resolved again when the policy says Always",
        BUCKET_VERSIONING,
        {"bucket": "old", "bucketRef": {"name": "b", "policy": {"resolve": "Always"}}},
        {"Bucket": [obj("b", external_name="new")]},
        expected={"bucket": "new", "bucketRef": {"name": "b", "policy": {"resolve": "Always"}}},
    ),
    ResolveCase(
        "a selector picks the first labelled bucket with a value and records it as the ref",
        BUCKET_VERSIONING,
        {"bucketSelector": {"matchLabels": {"team": "a"}}},
        {
            "Bucket": [
                obj("other", external_name="x", labels={"team": "b"}),
                obj("unnamed", labels={"team": "a"}),
                obj("chosen", external_name="real", labels={"team": "a"}),
            ]
        },
        expected={
            "bucketSelector": {"matchLabels": {"team": "a"}},
            "bucket": "real",
            "bucketRef": {"name": "chosen"},
        },
    ),
    ResolveCase(
        "a selector matching the controller skips buckets of another composite",
        BUCKET_VERSIONING,
        {"bucketSelector": {"matchControllerRef": True}},
        {
            "Bucket": [
                obj("theirs", external_name="x", controller="other"),
                obj("ours", external_name="mine", controller="composite"),
            ]
        },
        owner="composite",
        expected={
            "bucketSelector": {"matchControllerRef": True},
            "bucket": "mine",
            "bucketRef": {"name": "ours"},
        },
    ),
    ResolveCase(
        "a selector that matches nothing says so",
        BUCKET_VERSIONING,
        {"bucketSelector": {"matchLabels": {"team": "z"}}},
        {"Bucket": [obj("b", external_name="x", labels={"team": "a"})]},
        error="spec.forProvider.Bucket: no resources matched selector",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_a_reference_resolves_as_crossplane_runtime_resolves_it(case: ResolveCase) -> None:
    managed = obj("mine", controller=case.owner)
    managed["spec"] = {"forProvider": copy.deepcopy(case.for_provider)}
    references = References(cast(Cluster, FakeCluster(case.objects)), case.kind)

    if case.error:
        with pytest.raises(UnresolvedReferenceError) as raised:
            asyncio.run(references.resolve(managed))
        assert str(raised.value) == case.error
        return
    changed = asyncio.run(references.resolve(managed))

    assert managed["spec"]["forProvider"] == case.expected
    assert changed is case.changed
