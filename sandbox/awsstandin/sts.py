"""The STS endpoint the backup writer is given: moto's STS, trust-checked, bridged to SeaweedFS.

Every request is passed to moto's STS unchanged, and moto's answer back. An
AssumeRole or AssumeRoleWithWebIdentity is first held to the role's trust
policy as IAM holds it (``trust``), which moto does not do: the caller an
AssumeRole was signed as (moto's GetCallerIdentity for its access key), its
ExternalId and session tags (passed, or transitive from the caller's session),
or the web identity token's issuer, ``aud`` and ``sub``. A call the policy
does not allow is refused with AccessDenied and never reaches moto.
``assume_for_service`` is how a service principal (EKS Pod Identity's agent)
assumes a role, held to the same policy. For a successful assumption the
bridge first makes the session real in SeaweedFS (``identities``): the key
moto issued becomes a key of the role's SeaweedFS identity, under the role's
managed policies as IAM holds them (``refresh`` follows a later attachment,
detachment or new policy version); once the S3 gateway knows the key, the
answer goes back with an empty session token, since SeaweedFS 4.48 refuses a
session token it did not issue. Expired sessions' keys are removed at the next
assumption. A role IAM does not have is refused (moto would hand out
credentials for it).

What is not checked: request signatures (moto checks none), the web identity
token's signature and whether IAM holds its OIDC provider (the token's claims
are read as they are).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from sandbox.awsstandin import trust
from sandbox.awsstandin.cloud import Cloud, CloudError
from sandbox.awsstandin.identities import Identities, IdentityError
from sandbox.awsstandin.loopback import LoopbackServer

log = logging.getLogger(__name__)

_KEY_DEADLINE = 15.0
_KEY_POLL = 0.1
_FORWARD_TIMEOUT = 30.0
_PASSED_HEADERS = ("Content-Type", "Authorization", "X-Amz-Date", "X-Amz-Security-Token")
_ASSUMING = ("AssumeRole", "AssumeRoleWithWebIdentity")
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/")
_FORM = "application/x-www-form-urlencoded; charset=utf-8"

# Loopback only: a proxy from the environment never sees these requests.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class AccessRefusedError(Exception):
    """A trust policy does not let the caller in; the message says why (no secret)."""


@dataclass(frozen=True)
class Session:
    """A session the bridge gave to SeaweedFS."""

    role: str
    access_key: str
    expires: datetime


class Bridge:
    """Holds assumptions to the roles' trust policies; makes moto's sessions usable in SeaweedFS."""

    def __init__(self, sts_endpoint: str, cloud: Cloud, identities: Identities) -> None:
        """Pass requests to ``sts_endpoint``; read roles with ``cloud``."""
        self.sts_endpoint = sts_endpoint.rstrip("/")
        self.cloud = cloud
        self.identities = identities
        self._sessions: list[Session] = []
        # The transitive session tags of the sessions handed out, by access key.
        self._transitive: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        """Answer one STS request: (HTTP status, body)."""
        form = urllib.parse.parse_qs(body.decode(errors="replace"))
        action = _first(form, "Action")
        role_arn = _first(form, "RoleArn")
        role = role_arn.rpartition("/")[2]
        if action not in _ASSUMING:
            return self._forward(path, headers, body)
        caller_key = _access_key(headers)
        try:
            request = self._request(action, form, caller_key)
            self._check(role_arn, request)
        except AccessRefusedError as refused:
            return 403, _error("Sender", "AccessDenied", str(refused))
        status, answer = self._forward(path, headers, body)
        if status != 200:
            return status, answer
        try:
            granted = self._granted(role, answer)
        except (CloudError, IdentityError) as error:
            log.warning(
                "session not bridged", extra={"fields": {"role": role, "error": str(error)}}
            )
            return 503, _error("Receiver", "ServiceUnavailable", "the session is not usable yet")
        carried = {**self._transitive.get(caller_key, {}), **_transitive_tags(form)}
        if carried:
            self._transitive[_text(ET.fromstring(answer), "AccessKeyId")] = carried
        return 200, granted

    def assume_for_service(
        self,
        service: str,
        role_arn: str,
        session_name: str,
        transitive_tags: Mapping[str, str],
    ) -> dict[str, str]:
        """Assume ``role_arn`` as the service principal ``service``, with transitive session tags.

        What EKS Pod Identity does for a pod: its trust policy must trust the
        service for sts:AssumeRole and sts:TagSession. The session is not given to
        SeaweedFS: it is for chaining, not for S3.

        Returns:
            AccessKeyId, SecretAccessKey, SessionToken and Expiration (ISO 8601).

        Raises:
            AccessRefusedError: The role's trust policy does not allow it, or STS refused.
        """
        context = {f"aws:requesttag/{k}".lower(): (v,) for k, v in transitive_tags.items()}
        caller = trust.Caller(trust.PrincipalKind.SERVICE, service)
        self._check(
            role_arn, trust.Request(trust.ASSUME_ROLE, caller, context, bool(transitive_tags))
        )
        fields = {"Action": "AssumeRole", "Version": "2011-06-15", "RoleArn": role_arn}
        fields["RoleSessionName"] = session_name
        for number, (key, value) in enumerate(sorted(transitive_tags.items()), start=1):
            fields[f"Tags.member.{number}.Key"] = key
            fields[f"Tags.member.{number}.Value"] = value
            fields[f"TransitiveTagKeys.member.{number}"] = key
        status, answer = self._forward(
            "/",
            {"Content-Type": _FORM, "Authorization": _routing(service)},
            urllib.parse.urlencode(fields).encode(),
        )
        if status != 200:
            raise AccessRefusedError(f"STS answered {status} to assuming {role_arn}")
        root = ET.fromstring(answer)
        credentials = {
            tag: _text(root, tag)
            for tag in ("AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration")
        }
        self._transitive[credentials["AccessKeyId"]] = dict(transitive_tags)
        return credentials

    def _request(
        self, action: str, form: Mapping[str, list[str]], caller_key: str
    ) -> trust.Request:
        """The call as the trust policy sees it."""
        if action == "AssumeRoleWithWebIdentity":
            try:
                return trust.web_identity_request(
                    _first(form, "WebIdentityToken"), _first(form, "RoleArn")
                )
            except trust.TokenError as error:
                raise _refusal(_first(form, "RoleArn"), str(error)) from None
        return trust.assume_role_request(
            self._caller_arn(caller_key),
            external_id=_first(form, "ExternalId"),
            tags=_tags(form),
            transitive_tags=self._transitive.get(caller_key, {}),
        )

    def _check(self, role_arn: str, request: trust.Request) -> None:
        """Refuse the request unless the role exists and its trust policy allows it."""
        role = role_arn.rpartition("/")[2]
        policy = self.cloud.trust_policy(role) if role else None
        if policy is None:
            raise AccessRefusedError(f"not authorized to assume {role_arn}")
        decision = trust.evaluate(policy, request)
        if not decision.allowed:
            raise _refusal(role_arn, decision.reason)

    def _caller_arn(self, access_key: str) -> str:
        """Whom the access key belongs to, as moto's STS knows it (a user or a role session)."""
        if not access_key:
            return ""
        status, answer = self._forward(
            "/",
            {"Content-Type": _FORM, "Authorization": _routing(access_key)},
            b"Action=GetCallerIdentity&Version=2011-06-15",
        )
        try:
            return _text(ET.fromstring(answer), "Arn") if status == 200 else ""
        except (CloudError, ET.ParseError):
            return ""

    def _forward(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        request = urllib.request.Request(
            self.sts_endpoint + path,
            data=body,
            method="POST",
            headers={k: v for k, v in headers.items() if k in _PASSED_HEADERS},
        )
        try:
            with _OPENER.open(request, timeout=_FORWARD_TIMEOUT) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def _granted(self, role: str, answer: bytes) -> bytes:
        """Give the answer's session to SeaweedFS; the answer without its session token."""
        root = ET.fromstring(answer)
        access_key = _text(root, "AccessKeyId")
        secret_key = _text(root, "SecretAccessKey")
        expires = datetime.fromisoformat(_text(root, "Expiration").replace("Z", "+00:00"))
        with self._lock:
            self._revoke_expired()
            policies = self.cloud.role_policies(role) or {}
            self.identities.grant(role, policies, access_key, secret_key)
            self._sessions.append(Session(role, access_key, expires))
        deadline = time.monotonic() + _KEY_DEADLINE
        while not self.cloud.key_is_known(access_key, secret_key):
            if time.monotonic() > deadline:
                raise IdentityError("the S3 gateway did not load the session's key in time")
            time.sleep(_KEY_POLL)
        # The token element stays, empty: boto3 then signs without a token.
        return re.sub(
            rb"<SessionToken>[^<]*</SessionToken>", b"<SessionToken></SessionToken>", answer
        )

    def refresh(self, role: str) -> None:
        """Give the role's sessions in SeaweedFS the role's policies as IAM holds them now.

        Raises:
            CloudError: IAM cannot be read.
            IdentityError: SeaweedFS refused a step.
        """
        with self._lock:
            self.identities.refresh(role, self.cloud.role_policies(role) or {})

    def _revoke_expired(self) -> None:
        now = datetime.now(UTC)
        for session in [s for s in self._sessions if s.expires <= now]:
            self.identities.revoke(session.role, session.access_key)
            self._sessions.remove(session)


def _refusal(role_arn: str, why: str) -> AccessRefusedError:
    """The refusal of an assumption, logged with its reason (the caller sees it too)."""
    log.warning(
        "assumption refused by the trust policy", extra={"fields": {"role": role_arn, "why": why}}
    )
    return AccessRefusedError(f"not authorized to assume {role_arn}: {why}")


def _first(form: Mapping[str, list[str]], name: str) -> str:
    return (form.get(name) or [""])[0]


def _access_key(headers: Mapping[str, str]) -> str:
    """The access key a SigV4 request was signed with; empty for an unsigned one."""
    authorization = next((v for k, v in headers.items() if k.lower() == "authorization"), "")
    found = _CREDENTIAL.search(authorization)
    return found.group(1) if found else ""


def _routing(access_key: str) -> str:
    """An Authorization header that routes a request to moto's STS as ``access_key``.

    moto reads the caller and the service from the credential scope and checks
    no signature.
    """
    scope = f"{access_key}/20250101/us-east-1/sts/aws4_request"
    return f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host, Signature=0"


def _tags(form: Mapping[str, list[str]]) -> dict[str, str]:
    """The session tags a request passes (Tags.member.N.Key and .Value)."""
    tags = {}
    number = 1
    while key := _first(form, f"Tags.member.{number}.Key"):
        tags[key] = _first(form, f"Tags.member.{number}.Value")
        number += 1
    return tags


def _transitive_tags(form: Mapping[str, list[str]]) -> dict[str, str]:
    """The passed session tags the request marks transitive."""
    tags = _tags(form)
    keys = set()
    number = 1
    while key := _first(form, f"TransitiveTagKeys.member.{number}"):
        keys.add(key)
        number += 1
    return {key: value for key, value in tags.items() if key in keys}


def _text(root: ET.Element, tag: str) -> str:
    for element in root.iter():
        if element.tag.rpartition("}")[2] == tag and element.text:
            return element.text
    raise CloudError(f"the STS answer has no {tag}")


def _error(kind: str, code: str, message: str) -> bytes:
    return (
        '<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/"><Error>'
        f"<Type>{kind}</Type><Code>{code}</Code><Message>{message}</Message>"
        "</Error><RequestId>standin</RequestId></ErrorResponse>"
    ).encode()


class StsServer:
    """The bridge served over HTTP on loopback."""

    def __init__(self, bridge: Bridge, port: int = 0) -> None:
        """Serve ``bridge`` on ``port`` of loopback (0: any free one); ``start`` listens."""
        self.bridge = bridge
        self._server = LoopbackServer(self._answer, "standin-sts", port)

    @property
    def endpoint(self) -> str:
        """The URL to give as AWS_ENDPOINT_URL_STS."""
        return self._server.url

    def start(self) -> None:
        """Listen in a thread of its own."""
        self._server.start()

    def stop(self) -> None:
        """Stop listening."""
        self._server.stop()

    def _answer(
        self, _: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        status, payload = self.bridge.handle(path, dict(headers), body)
        return status, "text/xml", payload
