"""The STS bridge's decisions, with IAM, SeaweedFS and moto's STS replaced by fakes."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

from sandbox.awsstandin.cloud import Cloud
from sandbox.awsstandin.identities import Identities, IdentityError
from sandbox.awsstandin.sts import Bridge

ROLE = "team-a-myctp-backup"
ROLE_ARN = f"arn:aws:iam::123456789012:role/{ROLE}"
POLICY = {"Version": "2012-10-17", "Statement": []}
# These tests are about the bridge's passing and granting; test_trust.py and
# tests/backup/test_credentials.py hold the trust decisions.
TRUSTING_ANYONE = {
    "Version": "2012-10-17",
    "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "sts:AssumeRole"}],
}


def answer(access_key: str, expires: datetime) -> bytes:
    stamp = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        '<AssumeRoleResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
        "<AssumeRoleResult><Credentials>"
        f"<AccessKeyId>{access_key}</AccessKeyId><SecretAccessKey>secret-{access_key}"
        "</SecretAccessKey><SessionToken>FQoGZXIvYXdzEJr//token</SessionToken>"
        f"<Expiration>{stamp}</Expiration></Credentials></AssumeRoleResult>"
        "</AssumeRoleResponse>"
    ).encode()


def form(action: str, role_arn: str = ROLE_ARN) -> bytes:
    return urllib.parse.urlencode(
        {"Action": action, "RoleArn": role_arn, "RoleSessionName": "s", "Version": "2011-06-15"}
    ).encode()


class FakeCloud:
    def __init__(self, roles: dict[str, dict[str, Any]]) -> None:
        self.roles = roles

    def role_policies(self, role: str) -> dict[str, Any] | None:
        return self.roles.get(role)

    def trust_policy(self, role: str) -> dict[str, Any] | None:
        return TRUSTING_ANYONE if role in self.roles else None

    def key_is_known(self, access_key: str, secret_key: str) -> bool:
        return True


@dataclass
class FakeIdentities:
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    refuse: bool = False

    def grant(self, role: str, policies: Any, access_key: str, secret_key: str) -> None:
        if self.refuse:
            raise IdentityError("weed shell failed: error: filer unavailable")
        self.calls.append(("grant", role, dict(policies), access_key, secret_key))

    def revoke(self, role: str, access_key: str) -> None:
        self.calls.append(("revoke", role, access_key))


@dataclass
class FakeSts:
    status: int
    body: bytes
    requests: list[bytes] = field(default_factory=list)

    def __call__(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        self.requests.append(body)
        return self.status, self.body


def bridge(identities: FakeIdentities, sts: FakeSts) -> Bridge:
    made = Bridge(
        "http://127.0.0.1:1",
        cast(Cloud, FakeCloud({ROLE: {"backup": POLICY}})),
        cast(Identities, identities),
    )
    made._forward = sts  # type: ignore[method-assign]
    return made


LATER = datetime.now(UTC) + timedelta(hours=1)


def test_an_assumed_role_session_is_given_to_seaweedfs_and_answered_without_its_token() -> None:
    identities = FakeIdentities()
    sts = FakeSts(200, answer("ASIA1", LATER))

    status, body = bridge(identities, sts).handle("/", {}, form("AssumeRole"))

    assert status == 200
    assert identities.calls == [("grant", ROLE, {"backup": POLICY}, "ASIA1", "secret-ASIA1")]
    assert b"<SessionToken></SessionToken>" in body
    assert b"<AccessKeyId>ASIA1</AccessKeyId>" in body
    assert b"token" not in body.replace(b"SessionToken", b"")


@dataclass
class PassCase:
    reason: str
    body: bytes
    sts: FakeSts
    status: int
    reaches_sts: bool


PASS_CASES = [
    PassCase(
        "a role IAM does not have is refused before STS is asked",
        form("AssumeRole", "arn:aws:iam::123456789012:role/nobody"),
        FakeSts(200, answer("ASIA2", LATER)),
        403,
        reaches_sts=False,
    ),
    PassCase(
        "another action passes through untouched",
        form("GetCallerIdentity"),
        FakeSts(200, b"<GetCallerIdentityResponse/>"),
        200,
        reaches_sts=True,
    ),
    PassCase(
        "an AssumeRole STS refuses is passed on and grants nothing",
        form("AssumeRole"),
        FakeSts(403, b"<ErrorResponse><Error><Code>AccessDenied</Code></Error></ErrorResponse>"),
        403,
        reaches_sts=True,
    ),
]


@pytest.mark.parametrize("case", PASS_CASES, ids=lambda case: case.reason)
def test_what_is_not_a_granted_session_grants_nothing(case: PassCase) -> None:
    identities = FakeIdentities()

    status, body = bridge(identities, case.sts).handle("/", {}, case.body)

    assert status == case.status
    assert identities.calls == []
    assert bool(case.sts.requests) is case.reaches_sts
    if case.reaches_sts:
        assert body == case.sts.body


def test_an_expired_session_is_revoked_at_the_next_assume_role() -> None:
    identities = FakeIdentities()
    expired = datetime.now(UTC) - timedelta(seconds=1)
    sts = FakeSts(200, answer("ASIAOLD", expired))
    made = bridge(identities, sts)
    made.handle("/", {}, form("AssumeRole"))
    sts.body = answer("ASIANEW", LATER)

    made.handle("/", {}, form("AssumeRole"))

    assert [call[0:3] for call in identities.calls] == [
        ("grant", ROLE, {"backup": POLICY}),
        ("revoke", ROLE, "ASIAOLD"),
        ("grant", ROLE, {"backup": POLICY}),
    ]


def test_a_session_seaweedfs_cannot_take_is_answered_so_the_client_retries() -> None:
    status, body = bridge(FakeIdentities(refuse=True), FakeSts(200, answer("A", LATER))).handle(
        "/", {}, form("AssumeRole")
    )

    # botocore's standard retry mode retries a 503 ServiceUnavailable.
    assert status == 503
    assert b"<Code>ServiceUnavailable</Code>" in body
    assert b"secret" not in body
