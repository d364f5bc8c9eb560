"""Each trust mode end to end: the role the function renders, the writer's credential chain, STS.

The composition function renders a team's role (its trust policy and its
access policy) and its BackupSchedule's ``storage`` for each trust mode of the
input; the role goes into moto's IAM exactly as rendered. The backup writer
(``provider.backup.storage.s3``) then connects as that ``storage`` says, from the
pod identity the mode gives the controller (an IAM user's keys, EKS Pod
Identity's container credentials, a projected service account token), through
the AWS stand-in's STS bridge: it holds every assumption to the role's trust
policy (``sandbox.awsstandin.trust``; moto evaluates none) and gives the session
to SeaweedFS under the role's access policy. So a trust policy that does not
match the writer's calls fails here as it would on AWS, and a session that is
not the team role's cannot write under the team's prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import logging
import os
import re
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from function.compose import Outcome, compose
from provider.backup.controllers.backups import storage_spec
from provider.backup.restore import steps as restore_steps
from provider.backup.restore.restorer import RestoreError, Restorer
from provider.backup.storage.s3 import StorageError, StorageSpec, Store
from provider.backup.storage.web_identity import WebIdentityPolicy
from provider.kube import Cluster, ServiceAccountRef
from sandbox.awsstandin.cloud import Cloud, Endpoints
from sandbox.awsstandin.identities import Identities, SeaweedAdmin
from sandbox.awsstandin.podidentity import Association, PodIdentityAgent
from sandbox.awsstandin.sts import Bridge, StsServer
from sandbox.s3 import Moto, SeaweedFS, credentials_environment
from sandbox.spaces import Kube
from tests import builders as b
from tests.backup.test_archive import CONFIGMAPS
from tests.backup.test_archive_limits import NAMESPACES as NAMESPACE_TYPE
from tests.backup.test_archive_limits import meta, written
from tests.servers import Proxy, proxy
from tests.tokens import service_account_token, write_token

ACCOUNT = "123456789012"
# The OIDC provider and service account of the function's example input.
ISSUER = "oidc.eks.us-east-1.amazonaws.com/id/EXAMPLE"
CONTROLLER_NAMESPACE, CONTROLLER_ACCOUNT = "controlplane-system", "controlplane-backup"
CLUSTER_ARN = f"arn:aws:eks:us-east-1:{ACCOUNT}:cluster/platform"
TEAM = "team-a"
# What EKS asks of a Pod Identity role (the controller's own role).
EKS_POD_IDENTITY_TRUST = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Effect": "Allow",
            "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
        }
    ],
}


@dataclass(frozen=True)
class Aws:
    cloud: Cloud
    bridge: Bridge
    sts_endpoint: str
    s3_endpoint: str
    moto: Moto


@pytest.fixture(scope="module")
def aws(seaweed: SeaweedFS, moto_sts: Moto) -> Iterator[Aws]:
    """IAM and STS (moto) behind the stand-in's trust-checking bridge, S3 (SeaweedFS)."""
    with pytest.MonkeyPatch.context() as environment:
        for name, value in credentials_environment(seaweed.access_key, seaweed.secret_key).items():
            environment.setenv(name, value)
        # boto3 reads the admin's credentials as the clients are made.
        cloud = Cloud(Endpoints(s3=seaweed.endpoint, iam=moto_sts.endpoint))
    admin = SeaweedAdmin(seaweed.master.address, seaweed.filer.address)
    bridge = Bridge(moto_sts.endpoint, cloud, Identities(admin))
    server = StsServer(bridge)
    server.start()
    try:
        yield Aws(cloud, bridge, server.endpoint, seaweed.endpoint, moto_sts)
    finally:
        server.stop()


def pod_environment(monkeypatch: pytest.MonkeyPatch, aws: Aws, **variables: str) -> None:
    """The controller pod's environment: only ``variables`` and the endpoints, nothing else."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    for name, value in {
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_STS": aws.sts_endpoint,
        "AWS_ENDPOINT_URL_S3": aws.s3_endpoint,
        **variables,
    }.items():
        monkeypatch.setenv(name, value)


def render(trust: dict[str, Any], composite: str, bucket: str, role_arn: str = "") -> Outcome:
    """What the function composes for a team's backups into ``bucket`` with this trust."""
    function_input = b.example_input()
    function_input["backup"]["trust"] = trust
    # The operator allows the team this existing bucket.
    function_input["backup"]["allowedBuckets"] = [bucket]
    xr = b.composite({"backup": {"bucket": {"name": bucket}}}, name=composite, namespace=TEAM)
    seen = {"backup-role": b.role_with_arn(role_arn)} if role_arn else None
    return compose(b.observed(xr, seen), function_input)


def external_name(outcome: Outcome, resource: str) -> str:
    annotations = outcome.resources[resource].body["metadata"]["annotations"]
    return str(annotations["crossplane.io/external-name"])


def for_provider(outcome: Outcome, resource: str) -> dict[str, Any]:
    spec: dict[str, Any] = outcome.resources[resource].body["spec"]["forProvider"]
    return spec


def create_team_role(
    aws: Aws, trust: dict[str, Any], bucket: str, edit: Callable[[dict[str, Any]], None]
) -> dict[str, Any]:
    """Make the rendered role and policy in IAM; return the rendered schedule's storage."""
    composite = f"ctp-{uuid.uuid4().hex[:8]}"
    first = render(trust, composite, bucket)
    role, policy = external_name(first, "backup-role"), external_name(first, "backup-policy")
    document = json.loads(for_provider(first, "backup-role")["assumeRolePolicy"])
    edit(document)
    aws.cloud.create_role(role, json.dumps(document), "rendered by the function")
    aws.cloud.create_policy(
        policy, for_provider(first, "backup-policy")["policy"], "rendered by the function"
    )
    aws.cloud.attach(role, aws.cloud.policy_arn(policy))
    ready = render(trust, composite, bucket, f"arn:aws:iam::{ACCOUNT}:role/{role}")
    storage: dict[str, Any] = ready.resources["backup-schedule"].body["spec"]["storage"]
    return storage


# --- the pod's own identity, per mode ---------------------------------------------


@dataclass(frozen=True)
class Launch:
    """What a controller pod starts from."""

    aws: Aws
    # The controller that runs (an IAM user's or role's name).
    controller: str
    folder: Path
    case: Chain
    env: pytest.MonkeyPatch
    # Whatever the pod starts is stopped when this closes.
    stack: contextlib.ExitStack


# How a mode's controller pod gets its own identity.
Start = Callable[[Launch], None]


@dataclass(frozen=True)
class Pod:
    """A mode: the input's trust naming a controller, and how the controller's pod starts."""

    trust: Callable[[Aws, str], dict[str, Any]]
    start: Start


def _user_arn(_: Aws, name: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:user/{name}"


def _start_with_keys(launch: Launch) -> None:
    identity = launch.aws.moto.create_identity(launch.controller)
    pod_environment(
        launch.env,
        launch.aws,
        AWS_ACCESS_KEY_ID=identity.access_key,
        AWS_SECRET_ACCESS_KEY=identity.secret_key,
    )


def _controller_role(aws: Aws, name: str) -> str:
    if aws.cloud.role(name) is None:
        aws.cloud.create_role(name, json.dumps(EKS_POD_IDENTITY_TRUST), "a Pod Identity role")
    return f"arn:aws:iam::{ACCOUNT}:role/{name}"


def _start_pod_identity(launch: Launch) -> None:
    role = _controller_role(launch.aws, launch.controller)
    association = Association(CLUSTER_ARN, CONTROLLER_NAMESPACE, CONTROLLER_ACCOUNT, role)
    agent = PodIdentityAgent(launch.aws.bridge, association, launch.folder)
    agent.start()
    launch.stack.callback(agent.stop)
    pod_environment(launch.env, launch.aws, **agent.environment())


def _start_with_token(launch: Launch) -> None:
    case = launch.case
    token = service_account_token(
        f"https://{case.issuer}",
        CONTROLLER_NAMESPACE,
        case.service_account,
        audience=case.audience,
        lifetime=case.token_lifetime,
    )
    pod_environment(
        launch.env,
        launch.aws,
        AWS_WEB_IDENTITY_TOKEN_FILE=str(write_token(launch.folder / "token", token)),
        # The pod's own IRSA role, which the writer must not use: it does not exist,
        # so going through it would fail.
        AWS_ROLE_ARN=f"arn:aws:iam::{ACCOUNT}:role/not-the-team-role",
    )


PODS = {
    "roleArn": Pod(lambda aws, name: {"roleArn": _user_arn(aws, name)}, _start_with_keys),
    "podIdentity": Pod(
        lambda aws, name: {"podIdentity": {"controllerRoleArn": _controller_role(aws, name)}},
        _start_pod_identity,
    ),
    "irsa": Pod(
        lambda aws, name: {
            "irsa": {
                "oidcProviderArn": f"arn:aws:iam::{ACCOUNT}:oidc-provider/{ISSUER}",
                "serviceAccount": {"namespace": CONTROLLER_NAMESPACE, "name": CONTROLLER_ACCOUNT},
            }
        },
        _start_with_token,
    ),
}


def _without_tag_session(policy: dict[str, Any]) -> None:
    policy["Statement"][0]["Action"] = "sts:AssumeRole"


def _trusting_the_eks_service(policy: dict[str, Any]) -> None:
    # What the function rendered for podIdentity before: the principal of the
    # controller's own role, which no chained call is made as.
    policy["Statement"][0]["Principal"] = {"Service": "pods.eks.amazonaws.com"}


@dataclass
class Chain:
    reason: str
    mode: str
    assume_role_with: str
    # The namespace of the Backup: its ExternalId.
    backup_namespace: str = TEAM
    # Another controller than the one the team role trusts runs the writer.
    other_controller: bool = False
    edit: Callable[[dict[str, Any]], None] = lambda _: None
    issuer: str = ISSUER
    service_account: str = CONTROLLER_ACCOUNT
    audience: str = "sts.amazonaws.com"
    token_lifetime: float = 3600.0
    # Empty: the writer gets in; else part of the bridge's reason for refusing.
    refused: str = ""


CHAINS = [
    Chain(
        "roleArn: the controller's identity chains into the team role with the namespace as "
        "ExternalId and writes under the prefix",
        "roleArn",
        "AssumeRole",
    ),
    Chain(
        "roleArn: a Backup in another namespace naming the team's role is refused by ExternalId",
        "roleArn",
        "AssumeRole",
        backup_namespace="team-b",
        refused="the conditions of the statements allowing sts:AssumeRole",
    ),
    Chain(
        "roleArn: an identity other than the trusted controller is refused",
        "roleArn",
        "AssumeRole",
        other_controller=True,
        refused="no statement trusts AWS arn:aws:iam::123456789012:user/",
    ),
    Chain(
        "podIdentity: the controller chains from its Pod Identity credentials, tags and all, "
        "into the team role and writes under the prefix",
        "podIdentity",
        "AssumeRole",
    ),
    Chain(
        "podIdentity: a Backup in another namespace naming the team's role is refused by "
        "ExternalId",
        "podIdentity",
        "AssumeRole",
        backup_namespace="team-b",
        refused="the conditions of the statements allowing sts:AssumeRole",
    ),
    Chain(
        "podIdentity: another controller's Pod Identity role is refused",
        "podIdentity",
        "AssumeRole",
        other_controller=True,
        refused="no statement trusts AWS arn:aws:sts::123456789012:assumed-role/",
    ),
    Chain(
        "podIdentity: a team role without sts:TagSession refuses the Pod Identity session's "
        "transitive tags",
        "podIdentity",
        "AssumeRole",
        edit=_without_tag_session,
        refused="no statement allows sts:TagSession",
    ),
    Chain(
        "podIdentity: a team role trusting the EKS service principal cannot be chained into",
        "podIdentity",
        "AssumeRole",
        edit=_trusting_the_eks_service,
        refused="no statement trusts AWS arn:aws:sts::123456789012:assumed-role/",
    ),
    Chain(
        "irsa: the projected token goes straight into the team role and writes under the prefix",
        "irsa",
        "WebIdentity",
    ),
    Chain(
        "irsa: a token of another service account is refused by the sub condition",
        "irsa",
        "WebIdentity",
        service_account="default",
        refused="the conditions of the statements allowing sts:AssumeRoleWithWebIdentity",
    ),
    Chain(
        "irsa: a token for another audience is refused by the aud condition",
        "irsa",
        "WebIdentity",
        audience="https://kubernetes.default.svc",
        refused="the conditions of the statements allowing sts:AssumeRoleWithWebIdentity",
    ),
    Chain(
        "irsa: a token of another cluster's issuer is refused",
        "irsa",
        "WebIdentity",
        issuer="oidc.eks.us-east-1.amazonaws.com/id/OTHER",
        refused="no statement trusts Federated arn:aws:iam::123456789012:oidc-provider/",
    ),
    Chain(
        "irsa: an expired token is refused",
        "irsa",
        "WebIdentity",
        token_lifetime=-60.0,
        refused="the web identity token has expired",
    ),
]


@pytest.mark.parametrize("case", CHAINS, ids=lambda case: case.reason)
def test_the_writer_gets_into_the_rendered_role_only_as_its_trust_policy_says(
    case: Chain,
    aws: Aws,
    seaweed: SeaweedFS,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    bucket = f"trust-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    pod = PODS[case.mode]
    trusted = f"controller-{uuid.uuid4().hex[:8]}"
    running = f"intruder-{uuid.uuid4().hex[:8]}" if case.other_controller else trusted
    storage = create_team_role(aws, pod.trust(aws, trusted), bucket, case.edit)
    assert storage["assumeRoleWith"] == case.assume_role_with
    with contextlib.ExitStack() as stack:
        pod.start(Launch(aws, running, tmp_path, case, monkeypatch, stack))
        spec = storage_spec(storage, case.backup_namespace)
        if case.refused:
            with (
                caplog.at_level(logging.WARNING, "sandbox.awsstandin.sts"),
                pytest.raises(StorageError) as failed,
            ):
                Store.connect(spec)
            assert f"assume role {storage['roleArn']}" in str(failed.value)
            assert "AccessDenied (HTTP 403" in str(failed.value)
            reasons = [getattr(r, "fields", {}).get("why", "") for r in caplog.records]
            assert any(case.refused in reason for reason in reasons), reasons
            return
        store = Store.connect(spec)
        key = f"{storage['prefix']}probe.tar.gz"
        with store.writer(key) as out:
            out.write(b"written as the team's role")
        sink = io.BytesIO()
        store.download(key, sink)
        assert sink.getvalue() == b"written as the team's role"
        # The session is the team role's: nothing outside its prefix.
        with pytest.raises(StorageError, match="AccessDenied"), store.writer("team-b/x") as out:
            out.write(b"elsewhere")


# --- renewal ------------------------------------------------------------------------


def short_sessions(lifetime: timedelta) -> Callable[[bytes], bytes]:
    """Make every session expire after ``lifetime``, within botocore's 10-minute window:
    the writer must then assume the role again before each use of its credentials."""

    def rewrite(answer: bytes) -> bytes:
        soon = (datetime.now(UTC) + lifetime).strftime("%Y-%m-%dT%H:%M:%SZ")
        return re.sub(
            rb"<Expiration>[^<]*</Expiration>", f"<Expiration>{soon}</Expiration>".encode(), answer
        )

    return rewrite


def assumptions(sts: Proxy) -> list[dict[str, list[str]]]:
    """The form of each assumption that went through the proxy, in order."""
    forms = [urllib.parse.parse_qs(body.decode()) for body in sts.bodies]
    return [form for form in forms if form.get("Action", [""])[0].startswith("AssumeRole")]


@dataclass(frozen=True)
class Renewal:
    reason: str
    mode: str
    # The form field each renewal must carry again, or carry anew.
    field: str


# podIdentity chains with the same code as roleArn, from another identity.
RENEWALS = [
    Renewal(
        "AssumeRole sessions are renewed before they expire, with the namespace as ExternalId",
        "roleArn",
        "ExternalId",
    ),
    Renewal(
        "WebIdentity sessions are renewed before they expire, with the token read again",
        "irsa",
        "WebIdentityToken",
    ),
]


@pytest.mark.parametrize("case", RENEWALS, ids=lambda case: case.reason)
def test_the_writer_renews_the_roles_credentials_before_they_expire(
    case: Renewal,
    aws: Aws,
    seaweed: SeaweedFS,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bucket = f"renew-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    pod = PODS[case.mode]
    controller = f"controller-{uuid.uuid4().hex[:8]}"
    storage = create_team_role(aws, pod.trust(aws, controller), bucket, lambda _: None)
    chain = Chain(case.reason, case.mode, storage["assumeRoleWith"])
    with (
        contextlib.ExitStack() as stack,
        proxy(aws.sts_endpoint, short_sessions(timedelta(minutes=5))) as sts,
    ):
        launch = Launch(aws, controller, tmp_path, chain, monkeypatch, stack)
        pod.start(launch)
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.address)
        store = Store.connect(storage_spec(storage, TEAM))
        assert len(assumptions(sts)) == 1
        if case.mode == "irsa":
            # The kubelet rotates the projected token; the next renewal must read it.
            _start_with_token(launch)

        key = f"{storage['prefix']}renewed.tar.gz"
        # One request (a PutObject), signed with credentials renewed for it.
        with store.writer(key) as out:
            out.write(b"written with renewed credentials")

    assert len(assumptions(sts)) >= 2, "no renewal before the credentials expired"
    values = [form[case.field][0] for form in assumptions(sts)]
    if case.field == "ExternalId":
        assert set(values) == {TEAM}
    else:
        assert values[0] != values[-1], "the renewal sent the token it started with"


# --- restores of irsa Backups ---------------------------------------------------------
#
# The provider runs as its own ServiceAccount, which an irsa team role does not
# trust: it reads the archive with a token it mints (TokenRequest) for the account
# it is configured with. Here the local cluster is a real API server: its
# ServiceAccounts, its issuer (the team role trusts it as the cluster's OIDC
# provider) and the tokens it signs are real.

SYSTEM_NAMESPACE = "controlplane-system"
# A ServiceAccount of the controller's namespace that no team role trusts.
OTHER_ACCOUNT = "provider-controlplane"


@dataclass(frozen=True)
class IrsaRestore:
    reason: str
    # The ServiceAccount the provider is configured with (--web-identity-service-account).
    account: str
    # Empty: restored; else in the restore's failure message.
    refused: str = ""
    # Part of the STS bridge's reason for refusing, when it refuses.
    sts_refused: str = ""


IRSA_RESTORES = [
    IrsaRestore(
        "An irsa Backup is restored with a token of the backup controller's ServiceAccount, "
        "which its team role trusts, with no projected token of the provider's own",
        CONTROLLER_ACCOUNT,
    ),
    IrsaRestore(
        "A provider configured with another ServiceAccount is refused by STS: the role trusts "
        "one subject",
        OTHER_ACCOUNT,
        refused="with web identity for s3://{bucket} failed: AccessDenied (HTTP 403, "
        "AssumeRoleWithWebIdentity)",
        sts_refused="the conditions of the statements allowing sts:AssumeRoleWithWebIdentity",
    ),
    IrsaRestore(
        "A ServiceAccount that does not exist fails the restore, naming it",
        "missing",
        refused=f"cannot get a web identity token for ServiceAccount {SYSTEM_NAMESPACE}/missing: "
        "no such ServiceAccount",
    ),
]


def upload_backup(local: Kube, storage: dict[str, Any], seaweed: SeaweedFS, app: str) -> str:
    """An archive of namespace ``app`` and a ConfigMap in the team's prefix, and its
    Completed Backup in the local cluster; the Backup's name."""
    data = written(
        (NAMESPACE_TYPE, meta(app)),
        (CONFIGMAPS, meta("settings", app, data={"restored": "yes"})),
    )
    name = f"irsa-{uuid.uuid4().hex[:8]}"
    key = f"{storage['prefix']}{name}.tar.gz"
    with pytest.MonkeyPatch.context() as admin:
        seaweed.configure(admin)
        admin_store = Store.connect(StorageSpec(storage["bucket"], endpoint=seaweed.endpoint))
        with admin_store.writer(key) as out:
            out.write(data)
    local.namespace(TEAM)
    local.create(
        "backups",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Backup",
            "metadata": {"name": name, "namespace": TEAM},
            "spec": {"instanceRef": {"name": "origin"}, "storage": storage, "ttl": "168h"},
        },
    )
    local.custom.patch_namespaced_custom_object_status(
        "controlplane.spaces.upbound.io",
        "v1alpha1",
        TEAM,
        "backups",
        name,
        {
            "status": {
                "phase": "Completed",
                "location": {"bucket": storage["bucket"], "key": key},
                "sha256": hashlib.sha256(data).hexdigest(),
                "size": len(data),
            }
        },
    )
    return name


def service_accounts(local: Kube, *names: str) -> None:
    local.namespace(SYSTEM_NAMESPACE)
    for name in names:
        with contextlib.suppress(ApiException):
            local.core.create_namespaced_service_account(
                SYSTEM_NAMESPACE, {"metadata": {"name": name}}
            )


@pytest.mark.parametrize("case", IRSA_RESTORES, ids=lambda case: case.reason)
def test_the_provider_restores_an_irsa_backup_as_the_service_account_its_role_trusts(
    case: IrsaRestore,
    aws: Aws,
    seaweed: SeaweedFS,
    local: Kube,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    service_accounts(local, CONTROLLER_ACCOUNT, OTHER_ACCOUNT)
    # The team role trusts the local cluster's issuer as EKS's OIDC provider.
    issuer = local.server.url.removeprefix("https://")
    trust = {
        "irsa": {
            "oidcProviderArn": f"arn:aws:iam::{ACCOUNT}:oidc-provider/{issuer}",
            "serviceAccount": {"namespace": SYSTEM_NAMESPACE, "name": CONTROLLER_ACCOUNT},
        }
    }
    bucket = f"restore-{uuid.uuid4().hex[:12]}"
    seaweed.create_bucket(bucket)
    storage = create_team_role(aws, trust, bucket, lambda _: None)
    assert storage["assumeRoleWith"] == "WebIdentity"
    app = f"app-{uuid.uuid4().hex[:8]}"
    backup = upload_backup(local, storage, seaweed, app)
    # The provider's pod: no AWS identity, no projected token of its own.
    pod_environment(monkeypatch, aws)
    assert "AWS_WEB_IDENTITY_TOKEN_FILE" not in os.environ

    reports: list[restore_steps.Progress] = []

    async def restore() -> None:
        kubeconfig = yaml.safe_load(local.server.kubeconfig)
        cluster = await Cluster.from_kubeconfig(kubeconfig)

        async def seen(progress: restore_steps.Progress) -> None:
            reports.append(progress)

        try:
            restorer = Restorer(
                cluster,
                web_identity=ServiceAccountRef(SYSTEM_NAMESPACE, case.account),
                # The operator enables WebIdentity for the team roles' account.
                web_identity_roles=WebIdentityPolicy(frozenset({ACCOUNT})),
            )
            # The Backup's control plane is the local cluster itself.
            await restorer.restore(TEAM, backup, kubeconfig, progress=seen)
        finally:
            await cluster.close()

    if not case.refused:
        asyncio.run(restore())
        assert reports[-1].phase == "Completed"
        restored = local.core.read_namespaced_config_map("settings", app)
        assert restored.data == {"restored": "yes"}
        return
    with (
        caplog.at_level(logging.WARNING, "sandbox.awsstandin.sts"),
        pytest.raises(RestoreError) as failed,
    ):
        asyncio.run(restore())
    refused = case.refused.format(bucket=bucket)
    assert refused in str(failed.value)
    assert reports[-1].phase == "Failed"
    assert refused in str(reports[-1].message)
    reasons = [getattr(r, "fields", {}).get("why", "") for r in caplog.records]
    assert case.sts_refused in " ".join(reasons), reasons
    assert "eyJ" not in str(failed.value), "no token in the message"
    with pytest.raises(ApiException, match="Not Found"):
        local.core.read_namespace(app)
