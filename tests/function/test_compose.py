"""Table-driven tests of the pure composition, row by row of the contract's section 2."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from function import compose as c
from function.compose import Outcome, compose
from function.observed import Condition
from function.resources import flux
from tests import builders as b

USAGE_INSTANCE_KUSTOMIZATION = "usage-instance-by-kustomization"
USAGE_INSTANCE_SCHEDULE = "usage-instance-by-backup-schedule"
USAGE_ROLE_SCHEDULE = "usage-backup-role-by-backup-schedule"
USAGE_ATTACHMENT_SCHEDULE = "usage-backup-role-policy-attachment-by-backup-schedule"
USAGE_BUCKET_SCHEDULE = "usage-backup-bucket-by-backup-schedule"
USAGE_POLICY_SCHEDULE = "usage-backup-policy-by-backup-schedule"
BUCKET_PARTS = {
    "backup-bucket",
    "backup-bucket-versioning",
    "backup-bucket-encryption",
    "backup-bucket-public-access-block",
    "backup-bucket-lifecycle",
}
IAM_PARTS = {"backup-role", "backup-policy", "backup-role-policy-attachment"}


def run(
    spec: dict[str, Any] | None = None,
    seen: dict[str, dict[str, Any]] | None = None,
    *,
    namespace: str | None = "team-a",
    name: str = "myctp",
    labels: dict[str, str] | None = None,
    details: dict[str, dict[str, bytes]] | None = None,
    function_input: dict[str, Any] | None = None,
) -> Outcome:
    xr = b.composite(spec, name=name, namespace=namespace, labels=labels)
    return compose(
        b.observed(xr, seen, details),
        function_input if function_input is not None else b.example_input(),
    )


def condition(outcome: Outcome, type_: str) -> Condition:
    return next(cond for cond in outcome.conditions if cond.type == type_)


@dataclass
class ResourcesCase:
    reason: str
    spec: dict[str, Any]
    seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    want: set[str] = field(default_factory=set)


RESOURCES_CASES = [
    ResourcesCase(
        reason="A composite with nothing but defaults composes only the Instance.",
        spec={},
        want={"instance"},
    ),
    ResourcesCase(
        reason="A source composes the GitRepository at once, but the Kustomization waits "
        "for the instance.",
        spec={"source": b.SOURCE},
        want={"instance", "git-repository"},
    ),
    ResourcesCase(
        reason="A source whose instance is not ready yet still has no Kustomization.",
        spec={"source": b.SOURCE},
        seen={"instance": b.not_ready()},
        want={"instance", "git-repository"},
    ),
    ResourcesCase(
        reason="Once the instance is Ready the Kustomization appears, held by a Usage of "
        "the instance.",
        spec={"source": b.SOURCE},
        seen={"instance": b.ready()},
        want={"instance", "git-repository", "kustomization", USAGE_INSTANCE_KUSTOMIZATION},
    ),
    ResourcesCase(
        reason="A Kustomization already composed stays when the instance's readiness flickers.",
        spec={"source": b.SOURCE},
        seen={"instance": b.not_ready(), "kustomization": b.ready()},
        want={"instance", "git-repository", "kustomization", USAGE_INSTANCE_KUSTOMIZATION},
    ),
    ResourcesCase(
        reason="Backups without a bucket name compose a dedicated bucket and the IAM role, "
        "but no schedule before the role's ARN is known.",
        spec={"backup": b.BACKUP},
        want={"instance"} | BUCKET_PARTS | IAM_PARTS,
    ),
    ResourcesCase(
        reason="Backups into an existing bucket compose no bucket objects.",
        spec={"backup": {"bucket": {"name": b.SHARED_BUCKET}}},
        want={"instance"} | IAM_PARTS,
    ),
    ResourcesCase(
        reason="Once the role reports its ARN the BackupSchedule appears, with Usages of the "
        "instance, the role, its policy, the attachment and the bucket.",
        spec={"backup": b.BACKUP},
        seen={"backup-role": b.role_with_arn()},
        want={"instance", "backup-schedule"}
        | BUCKET_PARTS
        | IAM_PARTS
        | {
            USAGE_INSTANCE_SCHEDULE,
            USAGE_ROLE_SCHEDULE,
            USAGE_ATTACHMENT_SCHEDULE,
            USAGE_POLICY_SCHEDULE,
            USAGE_BUCKET_SCHEDULE,
        },
    ),
    ResourcesCase(
        reason="A schedule writing into an existing bucket holds no bucket: none is composed.",
        spec={"backup": {"bucket": {"name": b.SHARED_BUCKET}}},
        seen={"backup-role": b.role_with_arn()},
        want={"instance", "backup-schedule"}
        | IAM_PARTS
        | {
            USAGE_INSTANCE_SCHEDULE,
            USAGE_ROLE_SCHEDULE,
            USAGE_ATTACHMENT_SCHEDULE,
            USAGE_POLICY_SCHEDULE,
        },
    ),
    ResourcesCase(
        reason="A BackupSchedule already composed stays when the role's ARN vanishes.",
        spec={"backup": b.BACKUP},
        seen={
            "backup-role": b.not_ready("Role"),
            "backup-schedule": {"spec": {"storage": {"roleArn": b.ROLE_ARN}}},
        },
        want={"instance", "backup-schedule"}
        | BUCKET_PARTS
        | IAM_PARTS
        | {
            USAGE_INSTANCE_SCHEDULE,
            USAGE_ROLE_SCHEDULE,
            USAGE_ATTACHMENT_SCHEDULE,
            USAGE_POLICY_SCHEDULE,
            USAGE_BUCKET_SCHEDULE,
        },
    ),
    ResourcesCase(
        reason="Everything at once: source, backups, restore, all observed ready.",
        spec={"source": b.SOURCE, "backup": b.BACKUP, "restore": {"backupName": "b-1"}},
        seen={"instance": b.ready(), "backup-role": b.role_with_arn()},
        want={"instance", "git-repository", "kustomization", "backup-schedule"}
        | BUCKET_PARTS
        | IAM_PARTS
        | {
            USAGE_INSTANCE_KUSTOMIZATION,
            USAGE_INSTANCE_SCHEDULE,
            USAGE_ROLE_SCHEDULE,
            USAGE_ATTACHMENT_SCHEDULE,
            USAGE_POLICY_SCHEDULE,
            USAGE_BUCKET_SCHEDULE,
        },
    ),
    ResourcesCase(
        reason="Dropping the source withdraws the Flux objects and their Usage.",
        spec={},
        seen={"instance": b.ready(), "kustomization": b.ready(), "git-repository": b.ready()},
        want={"instance"},
    ),
]


@pytest.mark.parametrize("case", RESOURCES_CASES, ids=lambda case: case.reason)
def test_each_object_appears_exactly_when_the_contract_says(case: ResourcesCase) -> None:
    outcome = run(case.spec, case.seen)
    assert set(outcome.resources) == case.want, case.reason


@dataclass
class UsageCase:
    reason: str
    usage: str
    of: tuple[str, str]
    by: tuple[str, str]


USAGE_CASES = [
    UsageCase(
        "The Kustomization holds the instance, so Flux lets go before the kubeconfig goes.",
        USAGE_INSTANCE_KUSTOMIZATION,
        ("Instance", "myctp"),
        ("Kustomization", "myctp"),
    ),
    UsageCase(
        "The BackupSchedule holds the instance it backs up.",
        USAGE_INSTANCE_SCHEDULE,
        ("Instance", "myctp"),
        ("BackupSchedule", "myctp"),
    ),
    UsageCase(
        "The BackupSchedule holds the role whose credentials it uses.",
        USAGE_ROLE_SCHEDULE,
        ("Role", "myctp-backup"),
        ("BackupSchedule", "myctp"),
    ),
    UsageCase(
        "The BackupSchedule holds the attachment that grants the role its policy.",
        USAGE_ATTACHMENT_SCHEDULE,
        ("RolePolicyAttachment", "myctp-backup"),
        ("BackupSchedule", "myctp"),
    ),
    UsageCase(
        "The BackupSchedule holds the policy that lets the role write (its final Backup too).",
        USAGE_POLICY_SCHEDULE,
        ("Policy", "myctp-backup"),
        ("BackupSchedule", "myctp"),
    ),
    UsageCase(
        "The BackupSchedule holds the bucket its final Backup writes into.",
        USAGE_BUCKET_SCHEDULE,
        ("Bucket", "myctp-backups"),
        ("BackupSchedule", "myctp"),
    ),
]


@pytest.mark.parametrize("case", USAGE_CASES, ids=lambda case: case.reason)
def test_usages_order_deletion_and_replay_it(case: UsageCase) -> None:
    outcome = run(
        {"source": b.SOURCE, "backup": b.BACKUP},
        {"instance": b.ready(), "backup-role": b.role_with_arn()},
    )
    body = outcome.resources[case.usage].body
    assert body["apiVersion"] == "protection.crossplane.io/v1beta1"
    assert body["metadata"]["namespace"] == "team-a"
    assert body["spec"]["replayDeletion"] is True
    assert (body["spec"]["of"]["kind"], body["spec"]["of"]["resourceRef"]["name"]) == case.of
    assert (body["spec"]["by"]["kind"], body["spec"]["by"]["resourceRef"]["name"]) == case.by


@dataclass
class RestoreCase:
    reason: str
    spec: dict[str, Any]
    seen: dict[str, dict[str, Any]]
    want: str | None
    warns: bool = False


RESTORE_CASES = [
    RestoreCase(
        "A restore is asked for when the Instance is first created.",
        {"restore": {"backupName": "myctp-backup-1"}},
        {},
        "myctp-backup-1",
    ),
    RestoreCase(
        "An Instance observed with the restore keeps it, so the immutable field never changes.",
        {"restore": {"backupName": "myctp-backup-1"}},
        {
            "instance": {
                "spec": {"forProvider": {"initialRestorationFrom": {"backupRef": {"name": "old"}}}}
            }
        },
        "old",
    ),
    RestoreCase(
        "A restore added after the Instance exists is not honoured, and a warning says so.",
        {"restore": {"backupName": "myctp-backup-1"}},
        {"instance": b.ready()},
        None,
        warns=True,
    ),
    RestoreCase(
        "An Instance observed with a restore keeps it even without spec.restore: the "
        "field is immutable on the Instance.",
        {},
        {
            "instance": {
                "spec": {"forProvider": {"initialRestorationFrom": {"backupRef": {"name": "old"}}}}
            }
        },
        "old",
    ),
    RestoreCase("No restore asked, none given.", {}, {}, None),
]


@pytest.mark.parametrize("case", RESTORE_CASES, ids=lambda case: case.reason)
def test_restore_is_honoured_only_at_creation(case: RestoreCase) -> None:
    outcome = run(case.spec, case.seen)
    for_provider = outcome.resources["instance"].body["spec"]["forProvider"]
    got = for_provider.get("initialRestorationFrom", {}).get("backupRef", {}).get("name")
    assert got == case.want
    assert bool(outcome.warnings) == case.warns


def test_the_instance_carries_version_channel_class_and_its_connection_secret() -> None:
    outcome = run({"crossplaneVersion": "2.1.4-up.2", "channel": "Rapid", "class": "large"})
    spec = outcome.resources["instance"].body["spec"]
    assert spec["forProvider"] == {
        "crossplane": {"version": "2.1.4-up.2", "autoUpgrade": {"channel": "Rapid"}},
        "class": "large",
    }
    assert spec["writeConnectionSecretToRef"] == {"name": "myctp-kubeconfig"}
    assert spec["providerConfigRef"] == {"kind": "ClusterProviderConfig", "name": "default"}


def test_the_flux_objects_follow_the_source_and_never_delete_what_they_synced() -> None:
    source = {
        "url": "ssh://git@github.com/acmeorg/myctp-source",
        "ref": {"tag": "v1.2.0"},
        "path": "./clusters/prod",
        "interval": "10s",
        "timeout": "2m",
        "secretRef": {"name": "git-credentials"},
        "prune": False,
        "suspend": True,
    }
    outcome = run({"source": source}, {"instance": b.ready()})
    repository = outcome.resources["git-repository"].body
    assert repository["apiVersion"] == "source.toolkit.fluxcd.io/v1"
    assert repository["spec"] == {
        "url": source["url"],
        "ref": {"tag": "v1.2.0"},
        "interval": "10s",
        "timeout": "2m",
        "suspend": True,
        "secretRef": {"name": "git-credentials"},
    }
    kustomization = outcome.resources["kustomization"].body
    assert kustomization["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1"
    assert kustomization["spec"] == {
        "sourceRef": {"kind": "GitRepository", "name": "myctp"},
        "path": "./clusters/prod",
        "interval": "10s",
        "timeout": "2m",
        "prune": False,
        "wait": True,
        "suspend": True,
        "deletionPolicy": "Orphan",
        "kubeConfig": {"secretRef": {"name": "myctp-kubeconfig", "key": "kubeconfig"}},
        "healthCheckExprs": [
            check.model_dump(by_alias=True, exclude_none=True)
            for check in flux.CROSSPLANE_HEALTH_CHECKS
        ],
        "postBuild": {
            "substitute": {"CONTROLPLANE_NAME": "myctp", "CONTROLPLANE_NAMESPACE": "team-a"}
        },
        "force": False,
    }


def test_a_source_gets_the_contracts_defaults() -> None:
    outcome = run({"source": b.SOURCE}, {"instance": b.ready()})
    assert outcome.resources["git-repository"].body["spec"]["ref"] == {"branch": "main"}
    spec = outcome.resources["kustomization"].body["spec"]
    assert (spec["path"], spec["interval"], spec["timeout"], spec["prune"]) == (
        "./",
        "1m",
        "5m",
        True,
    )


@dataclass
class FlavourCase:
    reason: str
    namespace: str | None
    labels: dict[str, str] | None
    want_namespace: str
    want_s3: str
    want_iam: str
    want_aws_namespaced: bool


FLAVOUR_CASES = [
    FlavourCase(
        "The v2 composite composes the namespaced .m. kinds in its own namespace.",
        "team-a",
        None,
        "team-a",
        "s3.aws.m.upbound.io/v1beta1",
        "iam.aws.m.upbound.io/v1beta1",
        True,
    ),
    FlavourCase(
        "The legacy composite composes the cluster-scoped kinds; its namespaced objects go "
        "to the claim's namespace.",
        None,
        {"crossplane.io/claim-namespace": "team-b", "crossplane.io/claim-name": "myctp"},
        "team-b",
        "s3.aws.upbound.io/v1beta2",
        "iam.aws.upbound.io/v1beta1",
        False,
    ),
    FlavourCase(
        "A legacy composite without a claim (and so without a source) puts its namespaced "
        "objects in the input's namespace.",
        None,
        None,
        "controlplane-system",
        "s3.aws.upbound.io/v1beta2",
        "iam.aws.upbound.io/v1beta1",
        False,
    ),
]


@pytest.mark.parametrize("case", FLAVOUR_CASES, ids=lambda case: case.reason)
def test_v2_and_legacy_composites_compose_their_own_kinds_and_namespaces(
    case: FlavourCase,
) -> None:
    claimed = case.namespace is not None or case.labels is not None
    outcome = run(
        {"source": b.SOURCE, "backup": b.BACKUP} if claimed else {"backup": b.BACKUP},
        {"instance": b.ready(), "backup-role": b.role_with_arn()},
        namespace=case.namespace,
        labels=case.labels,
    )
    names = ("instance", "backup-schedule") + (
        ("git-repository", "kustomization") if claimed else ()
    )
    for name in names:
        assert outcome.resources[name].body["metadata"]["namespace"] == case.want_namespace
    assert outcome.resources["backup-bucket"].body["apiVersion"] == case.want_s3
    assert outcome.resources["backup-role"].body["apiVersion"] == case.want_iam
    for name in BUCKET_PARTS | IAM_PARTS:
        metadata = outcome.resources[name].body["metadata"]
        assert ("namespace" in metadata) is case.want_aws_namespaced, name
    assert outcome.status["backup"]["prefix"] == f"{case.want_namespace}/myctp/"


def test_a_legacy_composite_is_composed_into_its_claims_namespace_without_any_label() -> None:
    # Crossplane's claimRef decides; the label is a copy, never needed and never trusted.
    claim = {
        "apiVersion": "legacy.platform.acme.io/v1alpha1",
        "kind": "ControlPlane",
        "name": "myctp",
        "namespace": "team-b",
    }
    outcome = run(
        {"source": b.SOURCE, "restore": {"backupName": "b-1"}, "claimRef": claim},
        {"instance": b.ready()},
        namespace=None,
    )
    for name in ("instance", "git-repository", "kustomization"):
        assert outcome.resources[name].body["metadata"]["namespace"] == "team-b"


def test_legacy_storage_versions_are_the_ones_the_upstream_crds_store() -> None:
    outcome = run({"backup": b.BACKUP}, namespace=None)
    versions = {name: outcome.resources[name].body["apiVersion"] for name in BUCKET_PARTS}
    assert versions == {
        "backup-bucket": "s3.aws.upbound.io/v1beta2",
        "backup-bucket-versioning": "s3.aws.upbound.io/v1beta2",
        "backup-bucket-encryption": "s3.aws.upbound.io/v1beta2",
        "backup-bucket-public-access-block": "s3.aws.upbound.io/v1beta1",
        "backup-bucket-lifecycle": "s3.aws.upbound.io/v1beta1",
    }
    assert outcome.resources["backup-role"].body["spec"]["providerConfigRef"] == {"name": "default"}


@dataclass
class ConnectionCase:
    reason: str
    namespace: str | None
    details: dict[str, dict[str, bytes]]
    want: dict[str, bytes]


CONNECTION_CASES = [
    ConnectionCase(
        "The legacy composite passes the instance's kubeconfig on to its claim.",
        None,
        {"instance": {"kubeconfig": b"apiVersion: v1\nkind: Config\n"}},
        {"kubeconfig": b"apiVersion: v1\nkind: Config\n"},
    ),
    ConnectionCase(
        "The legacy composite has nothing to pass on before the instance has a kubeconfig.",
        None,
        {},
        {},
    ),
    ConnectionCase(
        "The v2 composite has no connection secret; its status names the instance's secret.",
        "team-a",
        {"instance": {"kubeconfig": b"apiVersion: v1\nkind: Config\n"}},
        {},
    ),
]


@pytest.mark.parametrize("case", CONNECTION_CASES, ids=lambda case: case.reason)
def test_connection_details_reach_only_the_legacy_claim(case: ConnectionCase) -> None:
    outcome = run({}, {"instance": b.ready()}, namespace=case.namespace, details=case.details)
    assert outcome.connection_details == case.want
    assert outcome.status["instance"]["kubeconfigSecretRef"] == {
        "name": "myctp-kubeconfig",
        "key": "kubeconfig",
    }


@dataclass
class ConditionCase:
    reason: str
    spec: dict[str, Any]
    seen: dict[str, dict[str, Any]]
    want: dict[str, tuple[str, str]]  # type -> (status, reason)
    message_has: dict[str, str] = field(default_factory=dict)


CONDITION_CASES = [
    ConditionCase(
        "Just created: the instance is awaited and nothing else is configured.",
        {},
        {},
        {
            "InstanceReady": ("False", "WaitingForInstance"),
            "SourceSynced": ("True", "NotConfigured"),
            "BackupsReady": ("True", "NotConfigured"),
        },
    ),
    ConditionCase(
        "The instance's own reason and message reach the composite while it is not ready.",
        {},
        {"instance": b.not_ready(reason="Unavailable", message="control plane is provisioning")},
        {"InstanceReady": ("False", "Unavailable")},
        {"InstanceReady": "control plane is provisioning"},
    ),
    ConditionCase(
        "The sync waits for the instance, and says so.",
        {"source": b.SOURCE},
        {},
        {"SourceSynced": ("False", "WaitingForInstance")},
    ),
    ConditionCase(
        "Flux's failure reason and message reach the composite.",
        {"source": b.SOURCE},
        {
            "instance": b.ready(),
            "git-repository": b.ready(
                {"kind": "GitRepository", "metadata": {"name": "myctp"}},
                status="False",
                reason="GitOperationFailed",
                message="authentication required",
            ),
        },
        {"SourceSynced": ("False", "GitOperationFailed"), "InstanceReady": ("True", "Available")},
        {"SourceSynced": "GitRepository myctp: authentication required"},
    ),
    ConditionCase(
        "A synced source is True with Flux's own reason.",
        {"source": b.SOURCE},
        {
            "instance": b.ready(),
            "git-repository": b.ready(reason="Succeeded"),
            "kustomization": b.ready(
                reason="ReconciliationSucceeded", message="Applied revision: main@sha1:abc"
            ),
        },
        {"SourceSynced": ("True", "ReconciliationSucceeded")},
        {"SourceSynced": "Applied revision: main@sha1:abc"},
    ),
    ConditionCase(
        "Backups wait for the role's ARN, and say so.",
        {"backup": b.BACKUP},
        {},
        {"BackupsReady": ("False", "WaitingForRoleArn")},
        {"BackupsReady": "Role myctp-backup"},
    ),
    ConditionCase(
        "Backups name the first part that is not ready yet.",
        {"backup": b.BACKUP},
        {
            "backup-role": b.role_with_arn(),
            "backup-bucket": b.ready(
                {"kind": "Bucket", "metadata": {"name": "myctp-backups"}},
                status="False",
                reason="ReconcileError",
                message="BucketAlreadyExists",
            ),
        },
        {"BackupsReady": ("False", "ReconcileError")},
        {"BackupsReady": "Bucket myctp-backups: BucketAlreadyExists"},
    ),
]


@pytest.mark.parametrize("case", CONDITION_CASES, ids=lambda case: case.reason)
def test_conditions_give_reasons_a_person_can_act_on(case: ConditionCase) -> None:
    outcome = run(case.spec, case.seen)
    for type_, (status, reason) in case.want.items():
        got = condition(outcome, type_)
        assert (got.status, got.reason) == (status, reason), case.reason
    for type_, text in case.message_has.items():
        assert text in condition(outcome, type_).message, case.reason


def test_every_condition_type_is_reported_once_on_every_run() -> None:
    outcome = run({"source": b.SOURCE, "backup": b.BACKUP})
    assert sorted(cond.type for cond in outcome.conditions) == [
        "BackupsReady",
        "InstanceReady",
        "SourceSynced",
    ]


def test_status_reports_instance_source_and_backups_from_what_was_observed() -> None:
    seen = {
        "instance": b.ready(
            extra_status={"atProvider": {"id": "ctp-123", "crossplaneVersion": "2.1.5-up.1"}}
        ),
        "git-repository": b.ready(extra_status={"artifact": {"revision": "main@sha1:aaa"}}),
        "kustomization": b.ready(extra_status={"lastAppliedRevision": "main@sha1:bbb"}),
        "backup-role": b.role_with_arn(),
        "backup-schedule": b.ready(
            extra_status={
                "lastBackup": "myctp-20261202060000",
                "lastSuccessfulBackup": "myctp-20261202000000",
            }
        ),
    } | {name: b.ready() for name in BUCKET_PARTS | IAM_PARTS - {"backup-role"}}
    outcome = run({"source": b.SOURCE, "backup": b.BACKUP}, seen)
    assert outcome.status == {
        "instance": {
            "ready": True,
            "id": "ctp-123",
            "crossplaneVersion": "2.1.5-up.1",
            "kubeconfigSecretRef": {"name": "myctp-kubeconfig", "key": "kubeconfig"},
        },
        "source": {
            "ready": True,
            "revision": "main@sha1:bbb",
            "lastAttemptedRevision": "main@sha1:aaa",
        },
        "backup": {
            "ready": True,
            "bucket": "acme-ctp-backups-team-a-myctp-a8ef8cc7",
            "prefix": "team-a/myctp/",
            "roleArn": b.ROLE_ARN,
            "lastBackup": "myctp-20261202060000",
            "lastSuccessfulBackup": "myctp-20261202000000",
        },
    }


@dataclass
class ReadinessCase:
    reason: str
    seen: dict[str, Any] | None
    want: bool


READINESS_CASES = [
    ReadinessCase("A resource not observed yet is not ready.", None, False),
    ReadinessCase("A resource with Ready=True is ready.", b.ready(), True),
    ReadinessCase("A resource with Ready=False is not ready.", b.not_ready(), False),
    ReadinessCase("A resource with Ready=Unknown is not ready.", b.ready(status="Unknown"), False),
    ReadinessCase("A resource without conditions is not ready.", {"status": {}}, False),
]


@pytest.mark.parametrize("case", READINESS_CASES, ids=lambda case: case.reason)
@pytest.mark.parametrize(
    "name",
    [
        "instance",
        "git-repository",
        "kustomization",
        "backup-bucket",
        "backup-role",
        "backup-schedule",
        USAGE_INSTANCE_SCHEDULE,
    ],
)
def test_each_composed_resource_is_ready_from_its_own_ready_condition(
    case: ReadinessCase, name: str
) -> None:
    seen: dict[str, dict[str, Any]] = {
        "instance": b.ready(),
        "kustomization": b.ready(),
        "backup-role": b.role_with_arn(),
        "backup-schedule": {"spec": {"storage": {"roleArn": b.ROLE_ARN}}},
    }
    if case.seen is None:
        seen.pop(name, None)
    else:
        seen[name] = case.seen
    outcome = run({"source": b.SOURCE, "backup": b.BACKUP}, seen)
    assert outcome.resources[name].ready is case.want, case.reason


@dataclass
class TtlCase:
    reason: str
    spec: dict[str, Any]
    seen: dict[str, dict[str, Any]]
    want: Any


TTL_CASES = [
    TtlCase("Waiting for the instance: a short TTL.", {}, {}, c.PENDING_TTL),
    TtlCase("The instance is ready: a long TTL.", {}, {"instance": b.ready()}, c.SETTLED_TTL),
    TtlCase(
        "Waiting for the role's ARN even though all composed objects are ready: short.",
        {"backup": {"bucket": {"name": b.SHARED_BUCKET}}},
        {"instance": b.ready()} | {name: b.ready() for name in IAM_PARTS},
        c.PENDING_TTL,
    ),
    TtlCase(
        "A source whose Kustomization waits for the instance: short.",
        {"source": b.SOURCE},
        {"git-repository": b.ready()},
        c.PENDING_TTL,
    ),
]


@pytest.mark.parametrize("case", TTL_CASES, ids=lambda case: case.reason)
def test_the_response_ttl_is_short_while_something_is_awaited(case: TtlCase) -> None:
    assert run(case.spec, case.seen).ttl == case.want
    assert c.PENDING_TTL < c.SETTLED_TTL


def test_the_bucket_is_hardened() -> None:
    outcome = run({"backup": {"ttl": "48h", "bucket": {"region": "eu-west-1"}}})
    versioning = outcome.resources["backup-bucket-versioning"].body["spec"]["forProvider"]
    assert versioning["versioningConfiguration"] == {"status": "Enabled"}
    assert versioning["region"] == "eu-west-1"
    encryption = outcome.resources["backup-bucket-encryption"].body["spec"]["forProvider"]
    assert encryption["rule"][0]["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "AES256"}
    block = outcome.resources["backup-bucket-public-access-block"].body["spec"]["forProvider"]
    assert all(
        block[key] is True
        for key in (
            "blockPublicAcls",
            "blockPublicPolicy",
            "ignorePublicAcls",
            "restrictPublicBuckets",
        )
    )
    rule = outcome.resources["backup-bucket-lifecycle"].body["spec"]["forProvider"]["rule"][0]
    assert rule["filter"] == [{"prefix": "team-a/myctp/"}]
    assert rule["expiration"] == [{"days": 3}], "ttl 48h plus one day"
    bucket = outcome.resources["backup-bucket"].body
    assert bucket["metadata"]["annotations"]["crossplane.io/external-name"] == (
        "acme-ctp-backups-team-a-myctp-a8ef8cc7"
    )


def test_a_kms_key_in_the_input_encrypts_the_bucket_and_is_granted_to_the_writer() -> None:
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    function_input = b.example_input()
    function_input["backup"]["kmsKeyArn"] = key
    outcome = run({"backup": b.BACKUP}, function_input=function_input)
    rule = outcome.resources["backup-bucket-encryption"].body["spec"]["forProvider"]["rule"][0]
    assert rule["applyServerSideEncryptionByDefault"] == {
        "sseAlgorithm": "aws:kms",
        "kmsMasterKeyId": key,
    }
    policy = json.loads(outcome.resources["backup-policy"].body["spec"]["forProvider"]["policy"])
    assert policy["Statement"][-1] == {
        "Sid": "BackupEncryptionKey",
        "Effect": "Allow",
        "Action": ["kms:GenerateDataKey", "kms:Decrypt"],
        "Resource": key,
    }


def test_the_policy_grants_exactly_the_backup_prefix() -> None:
    outcome = run({"backup": {"bucket": {"name": b.SHARED_BUCKET}}})
    policy = json.loads(outcome.resources["backup-policy"].body["spec"]["forProvider"]["policy"])
    assert policy == {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "BackupObjects",
                "Effect": "Allow",
                "Action": [
                    "s3:PutObject",
                    "s3:GetObject",
                    "s3:DeleteObject",
                    "s3:AbortMultipartUpload",
                ],
                "Resource": f"arn:aws:s3:::{b.SHARED_BUCKET}/team-a/myctp/*",
            },
            {
                "Sid": "ListBackups",
                "Effect": "Allow",
                "Action": "s3:ListBucket",
                "Resource": f"arn:aws:s3:::{b.SHARED_BUCKET}",
                "Condition": {"StringLike": {"s3:prefix": ["team-a/myctp/*"]}},
            },
        ],
    }
    attachment = outcome.resources["backup-role-policy-attachment"].body["spec"]["forProvider"]
    assert attachment == {
        "roleRef": {"name": "myctp-backup"},
        "policyArnRef": {"name": "myctp-backup"},
    }


OIDC_PROVIDER = "arn:aws:iam::123456789012:oidc-provider/oidc.eks.eu-west-1.amazonaws.com/id/ABC"
CONTROLLER_ROLE = "arn:aws:iam::123456789012:role/controlplane-backup-controller"


@dataclass
class TrustCase:
    reason: str
    trust: dict[str, Any]
    want: dict[str, Any]
    # The schedule's storage.assumeRoleWith: the call the trust policy allows.
    assume_role_with: str


TRUST_CASES = [
    TrustCase(
        "IRSA trusts one service account of the cluster's OIDC provider.",
        {
            "irsa": {
                "oidcProviderArn": OIDC_PROVIDER,
                "serviceAccount": {"namespace": "controlplane-system", "name": "backup"},
            }
        },
        {
            "Effect": "Allow",
            "Principal": {"Federated": OIDC_PROVIDER},
            "Action": "sts:AssumeRoleWithWebIdentity",
            "Condition": {
                "StringEquals": {
                    "oidc.eks.eu-west-1.amazonaws.com/id/ABC:aud": "sts.amazonaws.com",
                    "oidc.eks.eu-west-1.amazonaws.com/id/ABC:sub": (
                        "system:serviceaccount:controlplane-system:backup"
                    ),
                }
            },
        },
        "WebIdentity",
    ),
    TrustCase(
        "EKS Pod Identity trusts the controller's Pod Identity role, not the EKS service, "
        "to AssumeRole and TagSession only with the namespace as ExternalId.",
        {"podIdentity": {"controllerRoleArn": CONTROLLER_ROLE}},
        {
            "Effect": "Allow",
            "Principal": {"AWS": CONTROLLER_ROLE},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {"StringEquals": {"sts:ExternalId": "team-a"}},
        },
        "AssumeRole",
    ),
    TrustCase(
        "A controller role chains into the backup role only with the namespace as ExternalId.",
        {"roleArn": CONTROLLER_ROLE},
        {
            "Effect": "Allow",
            "Principal": {"AWS": CONTROLLER_ROLE},
            "Action": "sts:AssumeRole",
            "Condition": {"StringEquals": {"sts:ExternalId": "team-a"}},
        },
        "AssumeRole",
    ),
]


@pytest.mark.parametrize("case", TRUST_CASES, ids=lambda case: case.reason)
def test_the_role_trusts_what_the_input_says_and_the_schedule_assumes_it_so(
    case: TrustCase,
) -> None:
    function_input = b.example_input()
    function_input["backup"]["trust"] = case.trust
    outcome = run(
        {"backup": b.BACKUP}, {"backup-role": b.role_with_arn()}, function_input=function_input
    )
    role = outcome.resources["backup-role"].body
    assert json.loads(role["spec"]["forProvider"]["assumeRolePolicy"]) == {
        "Version": "2012-10-17",
        "Statement": [case.want],
    }
    assert (
        role["metadata"]["annotations"]["crossplane.io/external-name"]
        == "team-a-myctp-a8ef8cc7-backup"
    )
    storage = outcome.resources["backup-schedule"].body["spec"]["storage"]
    assert storage["assumeRoleWith"] == case.assume_role_with


def test_the_schedule_takes_the_input_defaults_and_the_observed_arn() -> None:
    outcome = run({"backup": {"suspend": True}}, {"backup-role": b.role_with_arn()})
    assert outcome.resources["backup-schedule"].body["spec"] == {
        "instanceRef": {"name": "myctp"},
        "schedule": "0 */6 * * *",
        "ttl": "168h",
        "suspend": True,
        "finalBackup": True,
        "storage": {
            "bucket": "acme-ctp-backups-team-a-myctp-a8ef8cc7",
            "prefix": "team-a/myctp/",
            "region": "us-east-1",
            "roleArn": b.ROLE_ARN,
            "assumeRoleWith": "WebIdentity",
        },
    }


@dataclass(frozen=True)
class RetentionCase:
    reason: str
    bucket: dict[str, Any]
    legacy: bool
    want_policies: list[str] | None
    want_deletion_policy: str | None


LEGACY_CLAIM = {"crossplane.io/claim-namespace": "team-b", "crossplane.io/claim-name": "myctp"}
RETENTION_CASES = [
    RetentionCase(
        "A v2 bucket is kept by default: every action but Delete, on all five bucket kinds.",
        {},
        legacy=False,
        want_policies=["Observe", "Create", "Update", "LateInitialize"],
        want_deletion_policy=None,
    ),
    RetentionCase(
        "A legacy bucket is kept by default: deletionPolicy Orphan, on all five bucket kinds.",
        {},
        legacy=True,
        want_policies=None,
        want_deletion_policy="Orphan",
    ),
    RetentionCase(
        "A v2 bucket with retainOnDelete false takes the provider's default policies (deleted).",
        {"retainOnDelete": False},
        legacy=False,
        want_policies=None,
        want_deletion_policy=None,
    ),
    RetentionCase(
        "A legacy bucket with retainOnDelete false takes the default deletion policy (Delete).",
        {"retainOnDelete": False},
        legacy=True,
        want_policies=None,
        want_deletion_policy=None,
    ),
]


@pytest.mark.parametrize("case", RETENTION_CASES, ids=lambda case: case.reason)
def test_a_dedicated_bucket_is_retained_unless_asked_and_iam_never_is(
    case: RetentionCase,
) -> None:
    outcome = run(
        {"backup": {"bucket": case.bucket}},
        {"backup-role": b.role_with_arn()},
        namespace=None if case.legacy else "team-a",
        labels=LEGACY_CLAIM if case.legacy else None,
    )
    for name in BUCKET_PARTS:
        spec = outcome.resources[name].body["spec"]
        assert spec.get("managementPolicies") == case.want_policies, name
        assert spec.get("deletionPolicy") == case.want_deletion_policy, name
    # The role goes with the composite: what it could reach is kept, not who could reach it.
    for name in IAM_PARTS:
        spec = outcome.resources[name].body["spec"]
        assert "managementPolicies" not in spec and "deletionPolicy" not in spec, name


@dataclass(frozen=True)
class FinalBackupCase:
    reason: str
    backup: dict[str, Any]
    want: bool


FINAL_BACKUP_CASES = [
    FinalBackupCase("A schedule takes a final backup by default.", {}, want=True),
    FinalBackupCase(
        "finalBackup false is passed to the schedule.", {"finalBackup": False}, want=False
    ),
    FinalBackupCase(
        "finalBackup true is passed to the schedule.", {"finalBackup": True}, want=True
    ),
]


@pytest.mark.parametrize("case", FINAL_BACKUP_CASES, ids=lambda case: case.reason)
def test_the_final_backup_setting_reaches_the_schedule(case: FinalBackupCase) -> None:
    outcome = run({"backup": case.backup}, {"backup-role": b.role_with_arn()})
    assert outcome.resources["backup-schedule"].body["spec"]["finalBackup"] is case.want


def test_the_function_ignores_the_composites_group_and_kind() -> None:
    xr = b.composite({"source": b.SOURCE})
    xr["apiVersion"], xr["kind"] = "example.org/v9", "Anything"
    outcome = compose(b.observed(xr), b.example_input())
    assert set(outcome.resources) == {"instance", "git-repository"}
