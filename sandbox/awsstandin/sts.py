"""The STS endpoint the backup writer is given: moto's STS, bridged to SeaweedFS.

Every request is passed to moto's STS unchanged, and moto's answer back. For a
successful AssumeRole the bridge first makes the session real in SeaweedFS
(``identities``): the key moto issued becomes a key of the role's SeaweedFS
identity, under the role's managed policies as IAM holds them (``refresh``
follows a later attachment, detachment or new policy version); once the S3
gateway knows the key, the answer goes back with an empty session token, since
SeaweedFS 4.48 refuses a session token it did not issue. Expired sessions' keys
are removed at the next AssumeRole. AssumeRole of a role IAM does not have is
refused (moto would hand out credentials for it).
"""

from __future__ import annotations

import http.server
import logging
import re
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sandbox.awsstandin.cloud import Cloud, CloudError
from sandbox.awsstandin.identities import Identities, IdentityError

log = logging.getLogger(__name__)

LOOPBACK: Final = "127.0.0.1"
_KEY_DEADLINE = 15.0
_KEY_POLL = 0.1
_FORWARD_TIMEOUT = 30.0
_PASSED_HEADERS = ("Content-Type", "Authorization", "X-Amz-Date", "X-Amz-Security-Token")
# Loopback only: a proxy from the environment never sees these requests.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Session:
    """A session the bridge gave to SeaweedFS."""

    role: str
    access_key: str
    expires: datetime


class Bridge:
    """Makes moto's STS sessions usable against SeaweedFS."""

    def __init__(self, sts_endpoint: str, cloud: Cloud, identities: Identities) -> None:
        """Pass requests to ``sts_endpoint``; read roles with ``cloud``."""
        self.sts_endpoint = sts_endpoint.rstrip("/")
        self.cloud = cloud
        self.identities = identities
        self._sessions: list[Session] = []
        self._lock = threading.Lock()

    def handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes]:
        """Answer one STS request: (HTTP status, body)."""
        form = urllib.parse.parse_qs(body.decode(errors="replace"))
        action = (form.get("Action") or [""])[0]
        role_arn = (form.get("RoleArn") or [""])[0]
        role = role_arn.rpartition("/")[2]
        if action == "AssumeRole" and self.cloud.role_policies(role) is None:
            return 403, _error("Sender", "AccessDenied", f"not authorized to assume {role_arn}")
        status, answer = self._forward(path, headers, body)
        if action != "AssumeRole" or status != 200:
            return status, answer
        try:
            return 200, self._granted(role, answer)
        except (CloudError, IdentityError) as error:
            log.warning(
                "session not bridged", extra={"fields": {"role": role, "error": str(error)}}
            )
            return 503, _error("Receiver", "ServiceUnavailable", "the session is not usable yet")

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
        handler = _handler(bridge)
        self._server = http.server.ThreadingHTTPServer((LOOPBACK, port), handler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="standin-sts", daemon=True
        )

    @property
    def endpoint(self) -> str:
        """The URL to give as AWS_ENDPOINT_URL_STS."""
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def start(self) -> None:
        """Listen in a thread of its own."""
        self._thread.start()

    def stop(self) -> None:
        """Stop listening."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def _handler(bridge: Bridge) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            status, body = bridge.handle(
                self.path, dict(self.headers.items()), self.rfile.read(length)
            )
            self.send_response(status)
            self.send_header("Content-Type", "text/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet: requests carry signed credentials in their headers."""

    return Handler
