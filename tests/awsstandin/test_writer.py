"""The backup writer's own credential path reaches exactly its prefix through the stand-in.

The writer (provider/backup/storage/s3.py) runs as it does in the backup
controller: its pod identity is a moto IAM user, it assumes the role the
function rendered, with its namespace as ExternalId, through the STS endpoint
it is given (the stand-in's bridge to moto's STS, which holds the call to the
role's trust policy), and writes to SeaweedFS with the session's credentials.
SeaweedFS evaluates the role's policy, as the function rendered it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest

from provider.backup.storage.s3 import StorageError, StorageSpec, Store
from sandbox.awsstandin.standin import AwsStandin
from sandbox.s3 import Moto, SeaweedFS, use_credentials
from sandbox.spaces import Kube, wait_for
from tests.awsstandin.composed import aws_objects
from tests.awsstandin.test_reconcile import apply, by_kind, fetch, wait_ready

_teams = itertools.count()
PAYLOAD = b"backup archive bytes"


@dataclass(frozen=True)
class Team:
    bucket: str
    prefix: str
    role_arn: str
    attachment: dict[str, Any]
    # The composite's namespace: the ExternalId its role's trust policy asks for.
    namespace: str


def compose_team(kube: Kube, moto_sts: Moto) -> tuple[Team, str, str]:
    """A composite's S3 and IAM objects, Ready; and the writer's pod identity keys."""
    name = f"writer-{next(_teams)}"
    writer = moto_sts.create_identity(f"{name}-pod")
    objects = aws_objects(legacy=False, team=name, trusted_arn=writer.arn)
    apply(kube, objects)
    done = {obj["kind"]: wait_ready(kube, obj) for obj in objects}
    rendered = by_kind(objects)
    prefix = rendered["BucketLifecycleConfiguration"]["spec"]["forProvider"]["rule"][0]["filter"]
    found = Team(
        bucket=done["Bucket"]["metadata"]["annotations"]["crossplane.io/external-name"],
        prefix=prefix[0]["prefix"],
        role_arn=done["Role"]["status"]["atProvider"]["arn"],
        attachment=rendered["RolePolicyAttachment"],
        namespace=name,
    )
    return found, writer.access_key, writer.secret_key


@pytest.fixture(scope="module")
def team(standin: AwsStandin, aws_kube: Kube, moto_sts: Moto) -> tuple[Team, str, str]:
    """A team whose objects stay as composed for every test of the module."""
    return compose_team(aws_kube, moto_sts)


def assume(
    monkeypatch: pytest.MonkeyPatch,
    team: tuple[Team, str, str],
    standin: AwsStandin,
    seaweed: SeaweedFS,
    *,
    role_arn: str = "",
) -> Store:
    """The writer's store, as the backup controller connects it: the pod assumes the role."""
    found, access_key, secret_key = team
    use_credentials(monkeypatch, access_key, secret_key, AWS_ENDPOINT_URL_STS=standin.sts_endpoint)
    return Store.connect(
        StorageSpec(
            found.bucket,
            "us-east-1",
            role_arn=role_arn or found.role_arn,
            endpoint=seaweed.endpoint,
            external_id=found.namespace,
        )
    )


@dataclass(frozen=True)
class WriteCase:
    reason: str
    key: str
    allowed: bool


WRITES = [
    WriteCase("an archive under the team's prefix is written", "{prefix}nightly.tar.gz", True),
    WriteCase(
        "a prefix that only begins like the team's is refused",
        "{stem}-other/nightly.tar.gz",
        False,
    ),
    WriteCase("another team's prefix is refused", "team-z/other/nightly.tar.gz", False),
    WriteCase("the bucket's root is refused", "nightly.tar.gz", False),
]


@pytest.mark.parametrize("case", WRITES, ids=lambda case: case.reason)
def test_the_writer_assumes_the_rendered_role_and_writes_only_under_its_prefix(
    case: WriteCase,
    team: tuple[Team, str, str],
    standin: AwsStandin,
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    found = team[0]
    store = assume(monkeypatch, team, standin, seaweed)
    key = case.key.format(prefix=found.prefix, stem=found.prefix.rstrip("/"))

    def write() -> None:
        with store.writer(key) as stream:
            stream.write(PAYLOAD)

    if case.allowed:
        write()
        assert store.exists(key)
    else:
        with pytest.raises(StorageError, match="AccessDenied"):
            write()


def test_a_role_iam_does_not_have_cannot_be_assumed(
    team: tuple[Team, str, str],
    standin: AwsStandin,
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    missing = team[0].role_arn.rpartition("/")[0] + "/no-such-role"

    with pytest.raises(StorageError, match="AccessDenied"):
        assume(monkeypatch, team, standin, seaweed, role_arn=missing)


def test_the_pod_identity_itself_cannot_write_to_the_bucket(
    team: tuple[Team, str, str], seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    found, access_key, secret_key = team
    use_credentials(monkeypatch, access_key, secret_key)
    store = Store.connect(StorageSpec(found.bucket, "us-east-1", endpoint=seaweed.endpoint))

    with (
        pytest.raises(StorageError, match="InvalidAccessKeyId"),
        store.writer(f"{found.prefix}direct.tar.gz") as stream,
    ):
        stream.write(PAYLOAD)


def test_detaching_the_policy_takes_the_access_of_a_running_session_away(
    standin: AwsStandin,
    aws_kube: Kube,
    moto_sts: Moto,
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    composed = compose_team(aws_kube, moto_sts)
    found = composed[0]
    store = assume(monkeypatch, composed, standin, seaweed)
    with store.writer(f"{found.prefix}before.tar.gz") as stream:
        stream.write(PAYLOAD)

    metadata = found.attachment["metadata"]
    aws_kube.delete(
        "rolepolicyattachments",
        metadata["namespace"],
        metadata["name"],
        "iam.aws.m.upbound.io",
        "v1beta1",
    )
    wait_for("the attachment gone", lambda: fetch(aws_kube, found.attachment) is None)

    # The S3 gateway takes the change from the filer within moments.
    wait_for("the session refused", lambda: _refused(store, f"{found.prefix}after.tar.gz"))


def _refused(store: Store, key: str) -> bool:
    try:
        with store.writer(key) as stream:
            stream.write(PAYLOAD)
    except StorageError as error:
        assert "AccessDenied" in str(error), error
        return True
    return False
