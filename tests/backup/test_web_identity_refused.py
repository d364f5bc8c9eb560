"""A WebIdentity Backup naming a role the operator does not allow (issue 18), on real servers.

The provider mints a token of the backup controller's ServiceAccount for a
restore of a WebIdentity Backup, and the backup controller passes its own
projected token: each straight into ``storage.roleArn``, which a team writes.
Here the local cluster is a real API server (its ServiceAccounts, issuer and
TokenRequest API), STS is the AWS stand-in holding every assumption to the
role's trust policy, and every request either controller sends is counted:
the provider's through its client's own request hook, STS's through a proxy.
A refused role must reach the Instance's (or the Backup's) status naming the
rule, with no token minted and no call to STS.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.backup.controllers.backups import BACKUPS, BackupReconciler
from provider.backup.restore.instance import InstanceRestore
from provider.backup.restore.restorer import Restorer
from provider.backup.storage.web_identity import (
    IRSA_ANNOTATION,
    POD_IRSA_SOURCE,
    WebIdentityPolicy,
    pod_irsa_role,
)
from provider.kube import Cluster, ServiceAccountRef
from provider.model import INSTANCES
from sandbox.s3 import SeaweedFS
from sandbox.spaces import Kube, condition
from tests.backup.test_credentials import (
    ACCOUNT,
    SYSTEM_NAMESPACE,
    TEAM,
    Aws,
    assumptions,
    create_team_role,
    pod_environment,
    service_accounts,
    upload_backup,
)
from tests.backup.test_roundtrip import Planes, instance_with_kubeconfig
from tests.servers import Proxy, proxy
from tests.tokens import write_token

CONTROLLER_ACCOUNT = "controlplane-backup"
FOREIGN = "444455556666"
# The backup controller's own IRSA role: it trusts the same subject as every team role.
CONTROLLER_ROLE = f"arn:aws:iam::{ACCOUNT}:role/controlplane-backup-controller"
# What a client of the provider's sends to mint a token: a POST on serviceaccounts.
TOKEN_REQUEST = ("POST", "serviceaccounts")


@dataclass(frozen=True)
class Refusal:
    reason: str
    policy: WebIdentityPolicy
    # Empty: the Backup's team role; else the role the Backup names instead.
    role_arn: str = ""
    # Empty: allowed; else the rule named in the status.
    refused: str = ""
    # The IRSA role of the backup controller's ServiceAccount (its annotation, which the
    # provider reads; the controller's AWS_ROLE_ARN); empty: it has none.
    irsa_role: str = ""


REFUSALS = [
    Refusal(
        "By default WebIdentity is off: the restore is refused and no token is minted",
        WebIdentityPolicy(),
        refused="spec.storage.roleArn: assumeRoleWith WebIdentity is off: the operator allows "
        "no AWS account's roles (--web-identity-role-account)",
    ),
    Refusal(
        "A team role in an account the operator does not list is refused",
        WebIdentityPolicy(frozenset({FOREIGN})),
        refused=f"spec.storage.roleArn is in AWS account {ACCOUNT}, which the operator does "
        "not allow (--web-identity-role-account)",
    ),
    Refusal(
        "A Backup naming the backup controller's own role is refused, in a listed account",
        WebIdentityPolicy(frozenset({ACCOUNT})),
        role_arn=CONTROLLER_ROLE,
        refused="spec.storage.roleArn must name the backup role of control plane ctp-",
    ),
    Refusal(
        "A team role of the namespace in a listed account is restored with a minted token",
        WebIdentityPolicy(frozenset({ACCOUNT})),
    ),
    Refusal(
        "As shipped, the account of the backup controller's IRSA role is allowed: the team "
        "role there is restored with a minted token",
        WebIdentityPolicy(irsa_default=True),
        irsa_role=CONTROLLER_ROLE,
    ),
    Refusal(
        "As shipped, a backup controller without an IRSA role leaves WebIdentity off, naming "
        "what to set, before a token is minted",
        WebIdentityPolicy(irsa_default=True),
        refused="spec.storage.roleArn: assumeRoleWith WebIdentity is off: the operator lists "
        "no AWS account (--web-identity-role-account) and the web identity has no IRSA role, "
        "whose account would be the default (the "
        f"eks.amazonaws.com/role-arn annotation of ServiceAccount {SYSTEM_NAMESPACE}/"
        f"{CONTROLLER_ACCOUNT})",
    ),
    Refusal(
        "As shipped, the IRSA role's account is the only one: a team role elsewhere is refused",
        WebIdentityPolicy(irsa_default=True),
        irsa_role=f"arn:aws:iam::{FOREIGN}:role/controlplane-backup-controller",
        refused=f"spec.storage.roleArn is in AWS account {ACCOUNT}, which the operator does "
        "not allow (--web-identity-role-account)",
    ),
    Refusal(
        "As shipped, the IRSA role itself is refused, though it trusts the minted token",
        WebIdentityPolicy(irsa_default=True),
        irsa_role=CONTROLLER_ROLE,
        role_arn=CONTROLLER_ROLE,
        refused="spec.storage.roleArn is a role the operator denies to teams "
        "(--web-identity-denied-role), or the web identity's own IRSA role",
    ),
]


def annotate_irsa_role(local: Kube, role: str) -> None:
    """Give the backup controller's ServiceAccount ``role`` as EKS's IRSA annotation ("": none)."""
    local.core.patch_namespaced_service_account(
        CONTROLLER_ACCOUNT,
        SYSTEM_NAMESPACE,
        {"metadata": {"annotations": {IRSA_ANNOTATION: role or None}}},
    )


@pytest.fixture
def sts(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Iterator[Proxy]:
    """The controllers' pod, with no AWS identity; its STS calls go through a counting proxy."""
    with proxy(aws.sts_endpoint) as counted:
        pod_environment(monkeypatch, aws, AWS_ENDPOINT_URL_STS=counted.address)
        yield counted


def irsa_storage(aws: Aws, planes: Planes, seaweed: SeaweedFS) -> dict[str, Any]:
    """A team role trusting the local cluster's issuer for the backup controller's account."""
    issuer = planes.local.server.url.removeprefix("https://")
    trust = {
        "irsa": {
            "oidcProviderArn": f"arn:aws:iam::{ACCOUNT}:oidc-provider/{issuer}",
            "serviceAccount": {"namespace": SYSTEM_NAMESPACE, "name": CONTROLLER_ACCOUNT},
        }
    }
    bucket = f"refused-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    storage = create_team_role(aws, trust, bucket, lambda _: None)
    assert storage["assumeRoleWith"] == "WebIdentity"
    return storage


@pytest.mark.parametrize("case", REFUSALS, ids=lambda case: case.reason)
def test_a_restore_mints_a_token_only_for_a_team_role_the_operator_allows(
    case: Refusal, aws: Aws, planes: Planes, seaweed: SeaweedFS, sts: Proxy
) -> None:
    local = planes.local
    service_accounts(local, CONTROLLER_ACCOUNT)
    annotate_irsa_role(local, case.irsa_role)
    storage = irsa_storage(aws, planes, seaweed)
    if case.role_arn:
        storage["roleArn"] = case.role_arn
    app = f"app-{uuid.uuid4().hex[:8]}"
    backup = upload_backup(local, storage, seaweed, app)
    instance = f"restored-{uuid.uuid4().hex[:8]}"
    instance_with_kubeconfig(local, planes.target.server, instance)
    assert "AWS_WEB_IDENTITY_TOKEN_FILE" not in os.environ
    requests: list[tuple[str, str]] = []

    async def restore() -> None:
        kubeconfig = yaml.safe_load(local.server.kubeconfig)
        cluster = await Cluster.from_kubeconfig(
            kubeconfig, on_request=lambda verb, plural, _: requests.append((verb, plural))
        )
        try:
            restorer = Restorer(
                cluster,
                web_identity=ServiceAccountRef(SYSTEM_NAMESPACE, CONTROLLER_ACCOUNT),
                web_identity_roles=case.policy,
            )
            managed = await cluster.get(INSTANCES, TEAM, instance)
            assert managed is not None
            # As the provider's reconciles do: start the restore, then, once the pool
            # has run it, record how it ended in the Instance's status.
            restoring = InstanceRestore(restorer)
            kubeconfig_of_target = planes.target.server.kubeconfig.encode()
            await restoring.run(managed, backup, kubeconfig_of_target)
            job = restoring.pool.job((TEAM, instance))
            assert job is not None and job.task is not None
            await job.task
            await restoring.run(managed, backup, kubeconfig_of_target)
            await cluster.replace_status(INSTANCES, managed)
        finally:
            await cluster.close()

    asyncio.run(restore())

    found = local.get("instances", TEAM, instance)
    assert found is not None
    record = found["status"]["atProvider"]["restore"]
    restored = condition(found, "Restored")
    if not case.refused:
        assert record["phase"] == "Completed", record
        assert restored["status"] == "True"
        assert requests.count(TOKEN_REQUEST) == 1, "one token, for the one download"
        assert [form["Action"] for form in assumptions(sts)] == [["AssumeRoleWithWebIdentity"]]
        assert planes.target.core.read_namespaced_config_map("settings", app).data == {
            "restored": "yes"
        }
        return
    assert record["phase"] == "Failed"
    assert case.refused in record["message"]
    assert (restored["status"], restored["reason"]) == ("False", "RestoreFailed")
    assert f"Backup {TEAM}/{backup} is refused: {case.refused}" in restored["message"]
    assert TOKEN_REQUEST not in requests, "no token was minted"
    assert assumptions(sts) == [], "nothing reached STS"


BACKUP_REFUSALS = [
    Refusal(
        "By default the backup controller refuses a WebIdentity Backup before using its token",
        WebIdentityPolicy(),
        refused="spec.storage.roleArn: assumeRoleWith WebIdentity is off",
    ),
    Refusal(
        "The backup controller refuses a team role in an account the operator does not list",
        WebIdentityPolicy(frozenset({FOREIGN})),
        refused=f"spec.storage.roleArn is in AWS account {ACCOUNT}, which the operator does "
        "not allow (--web-identity-role-account)",
    ),
    Refusal(
        "The backup controller refuses its own role, though it trusts the controller's token",
        WebIdentityPolicy(frozenset({ACCOUNT}), denied=frozenset({CONTROLLER_ROLE})),
        role_arn=CONTROLLER_ROLE,
        refused="spec.storage.roleArn is a role the operator denies to teams",
    ),
    Refusal(
        "As shipped, the backup controller refuses its own IRSA role (AWS_ROLE_ARN) unasked",
        WebIdentityPolicy(irsa_default=True),
        role_arn=CONTROLLER_ROLE,
        irsa_role=CONTROLLER_ROLE,
        refused="or the web identity's own IRSA role",
    ),
    Refusal(
        "As shipped, a backup controller without IRSA refuses a WebIdentity Backup, naming "
        "what to set",
        WebIdentityPolicy(irsa_default=True),
        refused=f"would be the default ({POD_IRSA_SOURCE})",
    ),
]


@pytest.mark.parametrize("case", BACKUP_REFUSALS, ids=lambda case: case.reason)
def test_the_backup_controller_passes_its_token_only_to_a_role_the_operator_allows(
    case: Refusal,
    aws: Aws,
    planes: Planes,
    seaweed: SeaweedFS,
    sts: Proxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local = planes.local
    service_accounts(local, CONTROLLER_ACCOUNT)
    # The controller's projected token, as the kubelet mounts it: real, and trusted.
    minted = local.core.create_namespaced_service_account_token(
        CONTROLLER_ACCOUNT,
        SYSTEM_NAMESPACE,
        {"spec": {"audiences": ["sts.amazonaws.com"], "expirationSeconds": 3600}},
    )
    token = write_token(tmp_path / "token", minted.status.token)
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    if case.irsa_role:
        monkeypatch.setenv("AWS_ROLE_ARN", case.irsa_role)
    # As controlplane-backup-controller resolves it at start: this pod's IRSA role.
    policy = case.policy.resolved(pod_irsa_role(os.environ), POD_IRSA_SOURCE)
    storage = irsa_storage(aws, planes, seaweed)
    if case.role_arn:
        storage["roleArn"] = case.role_arn
    origin = f"origin-{uuid.uuid4().hex[:8]}"
    instance_with_kubeconfig(local, planes.source.server, origin)
    name = f"refused-{uuid.uuid4().hex[:8]}"
    local.create(
        "backups",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Backup",
            "metadata": {"name": name, "namespace": TEAM},
            "spec": {"instanceRef": {"name": origin}, "storage": storage, "ttl": "168h"},
        },
    )

    async def reconcile() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
        try:
            await BackupReconciler(cluster, web_identity_roles=policy).reconcile(TEAM, name)
        finally:
            await cluster.close()

    asyncio.run(reconcile())

    found = local.get(BACKUPS.plural, TEAM, name)
    assert found is not None
    assert found["status"]["phase"] == "Failed"
    failed = condition(found, "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "StorageRefused")
    assert case.refused in failed["message"]
    assert assumptions(sts) == [], "the token went nowhere"
