"""Role trust policies, evaluated as IAM does for the subset the platform renders.

moto's STS hands out credentials for any role to anyone: it evaluates no trust
policy, no ExternalId, no web identity token. The stand-in's STS bridge asks
``evaluate`` first, so a writer whose calls do not match the trust policy the
composition function rendered is refused, as AWS would refuse it.

What is evaluated:

- ``Effect`` Allow and Deny (an explicit Deny wins; nothing allowed is denied);
- ``Principal``: ``"*"``, ``AWS`` (a user's or role's ARN, a session of that
  role, the account's root or its bare id), ``Federated`` (an OIDC provider's
  ARN), ``Service``; ``NotPrincipal`` is refused as unsupported;
- ``Action``: names and ``*`` wildcards, case-insensitively; an AssumeRole that
  brings session tags (its own or transitive ones of the caller's session) needs
  ``sts:TagSession`` as well, as IAM asks;
- ``Condition``: ``StringEquals`` and ``StringLike`` (with their
  ``ForAnyValue:`` form), keys case-insensitive: ``sts:ExternalId``,
  ``<issuer>:aud``, ``<issuer>:sub``, ``aws:RequestTag/<key>``. A key the
  request lacks does not match. Any other operator makes the policy
  unsupported, and an unsupported policy refuses (never allows) the call.

A web identity token's claims are read, not its signature: the stand-in has no
OIDC provider keys to check it against (AWS does). Its ``exp`` is honoured.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

ASSUME_ROLE = "sts:AssumeRole"
ASSUME_ROLE_WITH_WEB_IDENTITY = "sts:AssumeRoleWithWebIdentity"
TAG_SESSION = "sts:TagSession"
EXTERNAL_ID = "sts:ExternalId"

_SUPPORTED_OPERATORS = ("stringequals", "stringlike")
_ARN = re.compile(
    r"^arn:(?P<partition>[^:]+):(?P<service>[^:]+):[^:]*:(?P<account>\d{12}):(?P<rest>.+)$"
)


class PrincipalKind(StrEnum):
    """The kinds of principal a trust policy names."""

    AWS = "AWS"
    FEDERATED = "Federated"
    SERVICE = "Service"


@dataclass(frozen=True)
class Caller:
    """Who asks: the ARN the request was signed as, an OIDC provider's ARN, or a service."""

    kind: PrincipalKind
    name: str


@dataclass(frozen=True)
class Request:
    """One call into a role, as a trust policy sees it.

    Attributes:
        action: ``sts:AssumeRole`` or ``sts:AssumeRoleWithWebIdentity``.
        caller: Who asks.
        context: Condition keys (lowercase) and their values.
        tagged: Session tags come along (passed, or transitive from the caller's session).
    """

    action: str
    caller: Caller
    context: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    tagged: bool = False

    @property
    def actions(self) -> tuple[str, ...]:
        """Every action the call needs allowed."""
        return (self.action, TAG_SESSION) if self.tagged else (self.action,)


@dataclass(frozen=True)
class Decision:
    """Whether a trust policy lets the request in, and why (safe to show: no secret)."""

    allowed: bool
    reason: str


class TokenError(ValueError):
    """A web identity token that cannot be used; the message holds no token."""


class UnsupportedPolicyError(ValueError):
    """A policy element this evaluator does not implement."""


def assume_role_request(
    caller_arn: str,
    *,
    external_id: str = "",
    tags: Mapping[str, str] | None = None,
    transitive_tags: Mapping[str, str] | None = None,
) -> Request:
    """An sts:AssumeRole signed as ``caller_arn``.

    Args:
        caller_arn: The user's ARN, or ``arn:...:sts::<account>:assumed-role/<role>/<session>``.
        external_id: The ExternalId passed, if any.
        tags: Session tags passed with the call.
        transitive_tags: Transitive tags of the caller's own session, which go along.
    """
    context: dict[str, tuple[str, ...]] = {}
    if external_id:
        context[EXTERNAL_ID.lower()] = (external_id,)
    every_tag = {**(transitive_tags or {}), **(tags or {})}
    for key, value in every_tag.items():
        context[f"aws:requesttag/{key}".lower()] = (value,)
    return Request(ASSUME_ROLE, Caller(PrincipalKind.AWS, caller_arn), context, bool(every_tag))


def web_identity_request(token: str, role_arn: str, now: datetime | None = None) -> Request:
    """An sts:AssumeRoleWithWebIdentity of ``role_arn`` with ``token``.

    The caller is the OIDC provider of the token's issuer in the role's account;
    the context holds ``<issuer>:aud`` and ``<issuer>:sub``.

    Raises:
        TokenError: The token is malformed, lacks iss, sub or aud, or has expired.
    """
    claims = token_claims(token)
    for claim in ("iss", "sub", "aud"):
        if not claims.get(claim):
            raise TokenError(f"the web identity token has no {claim} claim")
    expires = claims.get("exp")
    if expires is not None:
        moment = now or datetime.now(UTC)
        if not isinstance(expires, int | float) or expires <= moment.timestamp():
            raise TokenError("the web identity token has expired")
    role = _ARN.match(role_arn)
    if role is None:
        raise TokenError(f"{role_arn} is not a role ARN")
    issuer = str(claims["iss"]).removeprefix("https://")
    provider = f"arn:{role['partition']}:iam::{role['account']}:oidc-provider/{issuer}"
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    context = {
        f"{issuer}:aud".lower(): tuple(str(a) for a in audiences),
        f"{issuer}:sub".lower(): (str(claims["sub"]),),
    }
    return Request(
        ASSUME_ROLE_WITH_WEB_IDENTITY, Caller(PrincipalKind.FEDERATED, provider), context
    )


def token_claims(token: str) -> dict[str, Any]:
    """The claims of a JWT (header.payload.signature), without checking its signature.

    Raises:
        TokenError: It is not a JWT with a JSON object as payload.
    """
    parts = token.strip().split(".")
    if len(parts) != 3:
        raise TokenError("the web identity token is not a JWT")
    try:
        payload = base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4))
        claims = json.loads(payload)
    except (binascii.Error, ValueError) as error:
        raise TokenError("the web identity token's claims cannot be read") from error
    if not isinstance(claims, dict):
        raise TokenError("the web identity token's claims are not an object")
    return claims


def evaluate(policy: Mapping[str, Any], request: Request) -> Decision:
    """Whether the trust ``policy`` lets ``request`` assume the role."""
    try:
        statements = _statements(policy)
        for action in request.actions:
            matching = [s for s in statements if _applies(s, request, action)]
            if any(_effect(s) == "Deny" for s in matching):
                return Decision(
                    False, f"an explicit Deny matches {action} by {request.caller.name}"
                )
            if not any(_effect(s) == "Allow" for s in matching):
                return Decision(False, _why_not(statements, request, action))
    except UnsupportedPolicyError as error:
        return Decision(False, f"the trust policy is not supported here: {error}")
    return Decision(True, f"{', '.join(request.actions)} allowed for {request.caller.name}")


def _statements(policy: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    statements = policy.get("Statement")
    if isinstance(statements, Mapping):
        return [statements]
    if not isinstance(statements, list) or not all(isinstance(s, Mapping) for s in statements):
        raise UnsupportedPolicyError("Statement must be an object or a list of objects")
    return statements


def _effect(statement: Mapping[str, Any]) -> str:
    effect = statement.get("Effect")
    if effect not in ("Allow", "Deny"):
        raise UnsupportedPolicyError(f"Effect {effect!r}")
    return str(effect)


def _applies(statement: Mapping[str, Any], request: Request, action: str) -> bool:
    for unsupported in ("NotPrincipal", "NotAction"):
        if unsupported in statement:
            raise UnsupportedPolicyError(unsupported)
    return (
        _principal_matches(statement.get("Principal"), request.caller)
        and _action_matches(statement.get("Action"), action)
        and _conditions_hold(statement.get("Condition") or {}, request.context)
    )


def _why_not(statements: list[Mapping[str, Any]], request: Request, action: str) -> str:
    """The first reason, in IAM's order of elements, no statement allows ``action``."""
    caller = request.caller
    allows = [s for s in statements if s.get("Effect") == "Allow"]
    trusted = [s for s in allows if _principal_matches(s.get("Principal"), caller)]
    if not trusted:
        return f"no statement trusts {caller.kind} {caller.name}"
    acting = [s for s in trusted if _action_matches(s.get("Action"), action)]
    if not acting:
        return f"no statement allows {action} for {caller.name}"
    return f"the conditions of the statements allowing {action} for {caller.name} do not hold"


def _values(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    raise UnsupportedPolicyError(f"{value!r} is neither a string nor a list of strings")


def _principal_matches(principal: Any, caller: Caller) -> bool:
    if principal == "*":
        return True
    if not isinstance(principal, Mapping):
        raise UnsupportedPolicyError(f"Principal {principal!r}")
    named = principal.get(str(caller.kind))
    if named is None:
        return False
    if caller.kind is PrincipalKind.AWS:
        return any(_aws_principal_matches(p, caller.name) for p in _values(named))
    return caller.name in _values(named)


def _aws_principal_matches(principal: str, caller_arn: str) -> bool:
    """A user or role ARN, a session of that role, the account's root or bare id, or "*"."""
    if principal in ("*", caller_arn):
        return True
    caller = _ARN.match(caller_arn)
    if caller is None:
        return False
    if principal == caller["account"]:
        return True
    trusted = _ARN.match(principal)
    if trusted is None or (trusted["partition"], trusted["account"]) != (
        caller["partition"],
        caller["account"],
    ):
        return False
    if trusted["service"] == "iam" and trusted["rest"] == "root":
        return True
    # A role's ARN may carry a path (role/a/b/name); its sessions' ARNs never do.
    if trusted["service"] == "iam" and trusted["rest"].startswith("role/"):
        role_name = trusted["rest"].rpartition("/")[2]
        session = caller["rest"].split("/")
        return caller["service"] == "sts" and session[:2] == ["assumed-role", role_name]
    return False


def _like(value: str, pattern: str) -> bool:
    """IAM's wildcards: ``*`` any run of characters, ``?`` any one; nothing else is special."""
    expression = re.escape(pattern).replace(r"\*", ".*").replace(r"\?", ".")
    return re.fullmatch(expression, value, re.DOTALL) is not None


def _action_matches(action: Any, wanted: str) -> bool:
    return any(_like(wanted.lower(), a.lower()) for a in _values(action))


def _conditions_hold(conditions: Mapping[str, Any], context: Mapping[str, tuple[str, ...]]) -> bool:
    if not isinstance(conditions, Mapping):
        raise UnsupportedPolicyError(f"Condition {conditions!r}")
    for operator, keys in conditions.items():
        base = operator.lower().removeprefix("foranyvalue:")
        if base not in _SUPPORTED_OPERATORS or not isinstance(keys, Mapping):
            raise UnsupportedPolicyError(f"condition operator {operator}")
        for key, expected in keys.items():
            present = context.get(key.lower(), ())
            if not _any_matches(present, _values(expected), like=base == "stringlike"):
                return False
    return True


def _any_matches(present: Iterable[str], expected: list[str], *, like: bool) -> bool:
    if like:
        return any(_like(value, pattern) for value in present for pattern in expected)
    return any(value in expected for value in present)
