"""The stand-in's trust-policy evaluator, on the policies the function renders and a few more."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from function.model import Trust
from function.resources.iam import trust_policy
from sandbox.awsstandin.trust import (
    Request,
    TokenError,
    assume_role_request,
    evaluate,
    token_claims,
    web_identity_request,
)
from tests.tokens import service_account_token

ACCOUNT = "123456789012"
CONTROLLER = f"arn:aws:iam::{ACCOUNT}:role/controlplane-backup-controller"
SESSION = f"arn:aws:sts::{ACCOUNT}:assumed-role/controlplane-backup-controller/controlplane-backup"
TEAM_ROLE = f"arn:aws:iam::{ACCOUNT}:role/team-a-myctp-backup"
ISSUER = "oidc.eks.eu-west-1.amazonaws.com/id/ABC"
OIDC_PROVIDER = f"arn:aws:iam::{ACCOUNT}:oidc-provider/{ISSUER}"
POD_IDENTITY_TAGS = {"kubernetes-namespace": "controlplane-system", "eks-cluster-name": "platform"}


def rendered(trust: dict[str, Any]) -> dict[str, Any]:
    """The trust policy the function renders for team-a with this input trust."""
    return trust_policy(Trust.model_validate(trust, by_alias=True), "team-a")


ROLE_ARN = rendered({"roleArn": CONTROLLER})
POD_IDENTITY = rendered({"podIdentity": {"controllerRoleArn": CONTROLLER}})
IRSA = rendered(
    {
        "irsa": {
            "oidcProviderArn": OIDC_PROVIDER,
            "serviceAccount": {"namespace": "controlplane-system", "name": "backup"},
        }
    }
)


def token(**changes: Any) -> Request:
    issuer = changes.pop("issuer", f"https://{ISSUER}")
    account = changes.pop("account", "backup")
    return web_identity_request(
        service_account_token(issuer, "controlplane-system", account, **changes), TEAM_ROLE
    )


def policy(*statements: dict[str, Any]) -> dict[str, Any]:
    return {"Version": "2012-10-17", "Statement": list(statements)}


@dataclass(frozen=True)
class TrustCase:
    reason: str
    policy: dict[str, Any]
    request: Request
    allowed: bool
    # Part of the decision's reason.
    why: str


CASES = [
    TrustCase(
        "roleArn: the controller role's session with the namespace as ExternalId gets in",
        ROLE_ARN,
        assume_role_request(SESSION, external_id="team-a"),
        True,
        "sts:AssumeRole allowed",
    ),
    TrustCase(
        "roleArn: a role with a path is matched by its sessions, which carry no path",
        rendered(
            {"roleArn": f"arn:aws:iam::{ACCOUNT}:role/platform/controlplane-backup-controller"}
        ),
        assume_role_request(SESSION, external_id="team-a"),
        True,
        "allowed",
    ),
    TrustCase(
        "roleArn: another namespace's ExternalId is refused",
        ROLE_ARN,
        assume_role_request(SESSION, external_id="team-b"),
        False,
        "the conditions of the statements allowing sts:AssumeRole",
    ),
    TrustCase(
        "roleArn: no ExternalId at all is refused",
        ROLE_ARN,
        assume_role_request(SESSION),
        False,
        "conditions",
    ),
    TrustCase(
        "roleArn: another role's session is refused",
        ROLE_ARN,
        assume_role_request(
            f"arn:aws:sts::{ACCOUNT}:assumed-role/someone-else/s", external_id="team-a"
        ),
        False,
        "no statement trusts AWS",
    ),
    TrustCase(
        "roleArn: a role of the same name in another account is refused",
        ROLE_ARN,
        assume_role_request(
            "arn:aws:sts::210987654321:assumed-role/controlplane-backup-controller/s",
            external_id="team-a",
        ),
        False,
        "no statement trusts AWS",
    ),
    TrustCase(
        "roleArn: a session carrying transitive tags needs sts:TagSession, which it lacks",
        ROLE_ARN,
        assume_role_request(SESSION, external_id="team-a", transitive_tags=POD_IDENTITY_TAGS),
        False,
        "no statement allows sts:TagSession",
    ),
    TrustCase(
        "podIdentity: the controller's Pod Identity session, tags and all, gets in",
        POD_IDENTITY,
        assume_role_request(SESSION, external_id="team-a", transitive_tags=POD_IDENTITY_TAGS),
        True,
        "sts:AssumeRole, sts:TagSession allowed",
    ),
    TrustCase(
        "podIdentity: another namespace's ExternalId is refused",
        POD_IDENTITY,
        assume_role_request(SESSION, external_id="team-b", transitive_tags=POD_IDENTITY_TAGS),
        False,
        "conditions",
    ),
    TrustCase(
        "irsa: the trusted service account's token gets in",
        IRSA,
        token(),
        True,
        "sts:AssumeRoleWithWebIdentity allowed",
    ),
    TrustCase(
        "irsa: a token of another service account is refused by sub",
        IRSA,
        token(account="default"),
        False,
        "the conditions of the statements allowing sts:AssumeRoleWithWebIdentity",
    ),
    TrustCase(
        "irsa: one of several audiences matching is enough, as for a multi-valued claim",
        IRSA,
        token(aud=["https://kubernetes.default.svc", "sts.amazonaws.com"]),
        True,
        "allowed",
    ),
    TrustCase(
        "irsa: another issuer's token is refused",
        IRSA,
        token(issuer="https://oidc.eks.eu-west-1.amazonaws.com/id/OTHER"),
        False,
        "no statement trusts Federated",
    ),
    TrustCase(
        "irsa: a token cannot be used for AssumeRole's trust",
        ROLE_ARN,
        token(),
        False,
        "no statement trusts Federated",
    ),
    TrustCase(
        "an explicit Deny wins over an Allow",
        policy(
            {"Effect": "Allow", "Principal": {"AWS": CONTROLLER}, "Action": "sts:AssumeRole"},
            {"Effect": "Deny", "Principal": "*", "Action": "sts:*"},
        ),
        assume_role_request(SESSION),
        False,
        "an explicit Deny",
    ),
    TrustCase(
        "the account's root trusts every principal of the account; sts:* covers AssumeRole",
        policy(
            {
                "Effect": "Allow",
                "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
                "Action": "sts:*",
            }
        ),
        assume_role_request(SESSION),
        True,
        "allowed",
    ),
    TrustCase(
        "StringLike matches IAM's wildcards only: * and ?",
        policy(
            {
                "Effect": "Allow",
                "Principal": {"Federated": OIDC_PROVIDER},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {
                    "StringLike": {f"{ISSUER}:sub": "system:serviceaccount:control*:?ackup"}
                },
            }
        ),
        token(),
        True,
        "allowed",
    ),
    TrustCase(
        "StringLike takes [ literally, not as a character class",
        policy(
            {
                "Effect": "Allow",
                "Principal": {"Federated": OIDC_PROVIDER},
                "Action": "sts:AssumeRoleWithWebIdentity",
                "Condition": {"StringLike": {f"{ISSUER}:sub": "system:serviceaccount:*:[b]ackup"}},
            }
        ),
        token(),
        False,
        "conditions",
    ),
    TrustCase(
        "a condition operator the evaluator does not know refuses rather than allows",
        policy(
            {
                "Effect": "Allow",
                "Principal": {"AWS": CONTROLLER},
                "Action": "sts:AssumeRole",
                "Condition": {"ArnLike": {"aws:SourceArn": "*"}},
            }
        ),
        assume_role_request(SESSION),
        False,
        "not supported here: condition operator ArnLike",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_a_trust_policy_lets_in_exactly_what_iam_would(case: TrustCase) -> None:
    decision = evaluate(case.policy, case.request)

    assert decision.allowed is case.allowed
    assert case.why in decision.reason


@dataclass(frozen=True)
class TokenCase:
    reason: str
    token: str
    message: str


def _token(**changes: Any) -> str:
    return service_account_token(f"https://{ISSUER}", "controlplane-system", "backup", **changes)


TOKEN_CASES = [
    TokenCase("a token that is not a JWT is refused", "not-a-jwt", "not a JWT"),
    TokenCase("a JWT whose claims are not JSON is refused", "a.b%%%.c", "cannot be read"),
    TokenCase("an expired token is refused", _token(lifetime=-1), "has expired"),
    TokenCase("a token without a subject is refused", _token(sub=""), "no sub claim"),
    TokenCase("a token without an audience is refused", _token(aud=[]), "no aud claim"),
]


@pytest.mark.parametrize("case", TOKEN_CASES, ids=lambda case: case.reason)
def test_a_web_identity_token_that_cannot_be_used_is_refused_with_the_reason(
    case: TokenCase,
) -> None:
    with pytest.raises(TokenError, match=case.message) as refused:
        web_identity_request(case.token, TEAM_ROLE)
    assert case.token not in str(refused.value)


def test_a_token_is_read_for_its_claims_and_judged_against_the_clock_given() -> None:
    expires = datetime.now(UTC) + timedelta(minutes=5)
    claims = token_claims(_token(lifetime=300))
    assert claims["sub"] == "system:serviceaccount:controlplane-system:backup"

    web_identity_request(_token(lifetime=300), TEAM_ROLE, now=expires - timedelta(minutes=1))
    with pytest.raises(TokenError, match="expired"):
        web_identity_request(_token(lifetime=300), TEAM_ROLE, now=expires + timedelta(minutes=1))
