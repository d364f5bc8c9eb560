"""A Space's TLS front: one HTTPS address that routes each control plane's path to its API server.

What a real Upbound Space does, and so what this stand-in does:

- A ControlPlane's connection secret (by default ``kubeconfig-<name>`` in the
  group's namespace: ``kubeconfigFmt = "kubeconfig-%s"`` in upbound/up
  ``internal/controlplane/space/space.go``) holds the key ``kubeconfig``, and the
  key ``kubeconfig-incluster`` "to be used by running pods in the cluster"
  (``ResourceCredentialsSecretInClusterKubeconfigKey`` in upbound/up-sdk-go
  ``apis/spaces/v1beta1/controlplane_types.go``).
- That kubeconfig's server is the Space's ingress with the control plane's path
  prefix, ``https://<ingress>/apis/spaces.upbound.io/v1beta1/namespaces/<group>/
  controlplanes/<name>/k8s`` (``ToSpacesK8sURL`` and ``controlPlaneRE`` in upbound/up
  ``internal/profile/urls.go``; the cluster entries of ``cmd/up/ctx/actions_test.go``
  carry the ingress CA as ``certificate-authority-data``).
- Its user is a bearer ``token`` next to ``server`` and ``certificate-authority-data``
  (upbound/docs ``self-hosted-spaces-docs/howtos/gitops.md`` reads exactly those
  three fields out of ``kubeconfig-ctp1`` for Argo CD).
- One router, ``spaces-router``, is "the entry point for all endpoints" and
  "dynamically builds routes to control plane API servers" (upbound/docs
  ``self-hosted-spaces-docs/howtos/configure-ha.md``); it terminates TLS with the
  Space's own certificate and CA bundle (``externalTLS.tlsSecret`` and
  ``caBundleSecret`` in ``howtos/certs.md``), reached in the cluster as the Service
  ``spaces-router.upbound-system.svc.cluster.local:8443``.
- The Space's own API is served at the root of the same ingress: ``up ctx`` points a
  Space context at ``https://<ingress>`` and a control plane's at the prefix above on
  the same host (``ToSpacesK8sURL`` in upbound/up ``internal/profile/urls.go``). So
  ``register_space`` routes every other path to the Space's API server with a token
  of its own, and the operator's Space kubeconfig names this front: the provider's
  default allow-list (the Space's own host) then admits the control planes'
  kubeconfigs for the reason it would in a real Space, the same ingress host.
- The cluster, user and context names in that kubeconfig are not a contract
  (upbound/up issue #407: "arbitrary cluster, auth and context names"); clients
  follow ``current-context``. Here all three are ``<group>-<name>``.

Token and CA rotation are what the sandbox needs to test that readers of the
secret follow it; the sources above do not describe how a Space rotates, so
`rotate_token` and `rotate_ca` model only the outcome: the old credential is
refused from then on and the caller rewrites the secret with what they return.

The front is an aiohttp server on 127.0.0.1 in a thread with its own event loop
(synchronous tests and the Spaces simulator call it). It offers only HTTP/1.1 by
ALPN: client-go asks for h2 and falls back, which is all it needs, and Python's
clients speak HTTP/1.1 only. Requests and responses are streamed both ways
(watches stay open, chunk by chunk); status, headers and bodies pass through
unchanged, compressed ones too. The caller's token is checked and dropped; the
front talks to the API server as its admin (the client certificate of
`APIServer.kubeconfig`), and to a hosted control plane as the token's user
(`CONTROLPLANE_USER`, impersonated by that admin): the control plane's RBAC
binds it to a controlplane-admin equivalent (`sandbox.token_role`), so a request
the token's role does not allow is refused by the API server itself.
Connection upgrades (``kubectl exec``, ``port-forward``) are not proxied. In
the sandbox the in-cluster kubeconfig names the same loopback URL as the other
one: the sandbox's "pods" are processes on this host.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import re
import secrets
import shutil
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, TypeVar

import aiohttp
import yaml
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from sandbox.apiserver import APIServer
from sandbox.pki import KeyPair, certificate_authority, issue
from sandbox.token_role import CONTROLPLANE_GROUP, CONTROLPLANE_USER, grant

LOOPBACK = "127.0.0.1"
API_GROUP_PATH = "/apis/spaces.upbound.io/v1beta1"
# Upbound's token exchange (up-sdk-go service/auth: client.go, tokenexchange_types.go).
TOKEN_EXCHANGE_PATH = "/apis/tokenexchange.upbound.io/v1alpha1/orgscopedtokens"
_AUDIENCES = frozenset({"upbound:spaces:api", "upbound:spaces:controlplanes"})
_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:token-exchange"
_SUBJECT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:id_token"
_ROUTE = re.compile(
    r"^/apis/spaces\.upbound\.io/v1beta1/namespaces/(?P<group>[^/]+)"
    r"/controlplanes/(?P<name>[^/]+)/k8s(?P<rest>/.*)?$"
)
# RFC 9110 7.6.1: meant for one connection, never forwarded; Host is each hop's own.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
# The caller's Authorization is the front's alone (the API server sees the front's
# admin certificate), and aiohttp's server has already answered an Expect: 100-continue.
_NOT_FORWARDED_UPSTREAM = _HOP_BY_HOP | {"authorization", "expect"}
_CALL_TIMEOUT = 30.0
_UPSTREAM_CONNECT_TIMEOUT = 10.0

T = TypeVar("T")


@dataclass(frozen=True)
class Route:
    """Where a request path of the front goes: one control plane, and the path below it."""

    group: str
    name: str
    rest: str


def parse_route(path: str) -> Route | None:
    """The control plane and the API path a (still percent-encoded) request path names.

    ``/apis/spaces.upbound.io/v1beta1/namespaces/g/controlplanes/c/k8s/api/v1`` is
    control plane ``g/c`` and path ``/api/v1``; the bare prefix is ``/``. None for any
    other path.
    """
    found = _ROUTE.match(path)
    if found is None:
        return None
    return Route(found["group"], found["name"], found["rest"] or "/")


def server_url(base: str, group: str, name: str) -> str:
    """A control plane's server URL on a Space front at ``base`` (``https://host:port``)."""
    return f"{base}{API_GROUP_PATH}/namespaces/{group}/controlplanes/{name}/k8s"


def kubeconfig_text(server: str, ca_pem: bytes, token: str, context: str) -> str:
    """A kubeconfig as a Space writes it: the server, the front's CA and a bearer token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode("ascii"),
                },
            }
        ],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
        "preferences": {},
    }
    return yaml.safe_dump(config, sort_keys=False)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def forwarded_headers(headers: Iterable[tuple[str, str]], drop: frozenset[str]) -> CIMultiDict[str]:
    """The headers without those in ``drop`` (lower case) and those ``Connection`` names."""
    pairs = list(headers)
    named_by_connection = {
        option.strip().lower()
        for key, value in pairs
        if key.lower() == "connection"
        for option in value.split(",")
    }
    return CIMultiDict(
        (key, value)
        for key, value in pairs
        if key.lower() not in drop and key.lower() not in named_by_connection
    )


def status_body(code: int, reason: str, message: str) -> bytes:
    """A Kubernetes ``Status`` failure, as the API server answers one."""
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


@dataclass
class CloudAuth:
    """Upbound Cloud's side of a Space front: organisation tokens instead of static ones.

    ``robot_token`` is a robot's token of ``organization``; POSTed to
    ``TOKEN_EXCHANGE_PATH`` as up-sdk-go's ``GetOrgScopedToken`` sends it, it is
    exchanged for an access token that expires after ``token_lifetime`` seconds
    (settable; the answer's ``expires_in``). The Space's API and every control plane
    take any unexpired access token of the organisation and refuse the rest (401).
    The Space's API refuses watches (405 ``MethodNotAllowed``, as kube-apiserver
    answers for a storage without watch), and the Space writes no connection
    secrets (``SpacesSimulator``).
    """

    organization: str = "acme"
    token_lifetime: float = 3600.0
    robot_token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    # access token -> when it expires (monotonic)
    issued: dict[str, float] = field(default_factory=dict)
    exchanges: int = 0
    refused_watches: int = 0

    def exchange(self, form: dict[str, list[str]], authorization: str | None) -> web.Response:
        """An access token for a well-formed exchange of the robot's token; else an error."""
        subject = (form.get("subject_token") or [""])[0]
        if (
            bearer_token(authorization) != subject
            or not subject
            or not hmac.compare_digest(subject.encode(), self.robot_token.encode())
        ):
            return _upbound_error(401, "Unauthorized", "invalid subject token")
        scope = (form.get("scope") or [""])[0]
        if scope != f"upbound:org:{self.organization}":
            return _upbound_error(403, "Forbidden", "the token has no access to that organization")
        if (
            set(form.get("audience") or []) != _AUDIENCES
            or form.get("grant_type") != [_GRANT_TYPE]
            or form.get("subject_token_type") != [_SUBJECT_TOKEN_TYPE]
        ):
            return _upbound_error(400, "Bad Request", "not an organization token exchange")
        access = secrets.token_urlsafe(32)
        now = time.monotonic()
        self.issued = {t: e for t, e in self.issued.items() if e > now}
        self.issued[access] = now + self.token_lifetime
        self.exchanges += 1
        body = {
            "access_token": access,
            "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            "token_type": "Bearer",
            "expires_in": int(self.token_lifetime),
        }
        return web.json_response(body)

    def admits(self, token: str) -> bool:
        """Whether ``token`` is an access token of the organisation that has not expired."""
        expires = self.issued.get(token)
        return expires is not None and time.monotonic() < expires


def _upbound_error(status: int, title: str, detail: str) -> web.Response:
    """An error as Upbound's APIs answer one (up-sdk-go ``errors.Error``)."""
    return web.json_response({"status": status, "title": title, "detail": detail}, status=status)


def _watch_refused(path: str) -> web.Response:
    """kube-apiserver's answer to a watch of a storage without one (``NewMethodNotSupported``)."""
    parts = path.strip("/").split("/")
    resource = parts[-1] if parts else ""
    group = parts[1] if len(parts) > 2 and parts[0] == "apis" else ""
    kind = f"{resource}.{group}" if group else resource
    body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": f"watch is not supported on resources of kind {kind!r}".replace("'", '"'),
            "reason": "MethodNotAllowed",
            "details": {"group": group, "kind": resource},
            "code": 405,
        }
    ).encode()
    return web.Response(status=405, body=body, content_type="application/json")


@dataclass
class _Upstream:
    """An API server behind the front, and the token that reaches it."""

    server: APIServer
    token: str
    session: aiohttp.ClientSession
    # A hosted control plane's: requests go on as CONTROLPLANE_USER, not as its admin,
    # so the control plane's own RBAC and admission answer them.
    as_token_user: bool = False


# Headers asking the API server to impersonate: the token's role grants none.
_IMPERSONATION = "impersonate-"


class SpaceFront:
    """The Space's TLS front on a loopback port; use it as a context manager.

    ``register`` gives each control plane a path prefix and a token and returns its
    kubeconfig; the Spaces simulator writes it, and ``kubeconfig_incluster``, into
    the connection secret as ``kubeconfig`` and ``kubeconfig-incluster``. After
    ``rotate_token`` or ``rotate_ca`` it writes the kubeconfigs they return.
    """

    def __init__(self, address: str = LOOPBACK, *, cloud: CloudAuth | None = None) -> None:
        """Serve on ``address`` (a loopback address); Upbound Cloud's way with ``cloud``."""
        self.address = address
        self.cloud = cloud
        self._folder = Path(tempfile.mkdtemp(prefix="spacefront-"))
        self._ca, serving = self._new_certificates()
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.set_alpn_protocols(["http/1.1"])
        self._tls.load_cert_chain(*self._write_serving(serving))
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind((address, 0))
        port: int = self._socket.getsockname()[1]
        self.host = f"{address}:{port}"
        self.url = f"https://{self.host}"
        self._control_planes: dict[tuple[str, str], _Upstream] = {}
        # Control planes being deleted: their prefix answers 503 until unregistered.
        self._draining: set[tuple[str, str]] = set()
        self._space: _Upstream | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="space-front", daemon=True
        )
        self._runner: web.AppRunner | None = None

    # --- life cycle ---------------------------------------------------------

    def __enter__(self) -> Self:
        """Start serving."""
        self._thread.start()
        try:
            self._call(self._start())
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop serving."""
        self.close()

    def close(self) -> None:
        """Stop serving, close every upstream connection, remove the certificates' folder."""
        if self._thread.is_alive():
            with contextlib.suppress(TimeoutError, RuntimeError):
                self._call(self._stop())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=_CALL_TIMEOUT)
        if not self._thread.is_alive():
            self._loop.close()
        self._socket.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # A client that goes away cancels its handler, and so its upstream watch.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.SockSite(self._runner, self._socket, ssl_context=self._tls)
        await site.start()

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        for upstream in (*self._control_planes.values(), *([self._space] if self._space else [])):
            await upstream.session.close()
        self._control_planes.clear()
        self._space = None

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` on the front's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_CALL_TIMEOUT)

    # --- the public API -----------------------------------------------------

    @property
    def ca_pem(self) -> bytes:
        """The front's CA certificate (PEM): what a client must trust to reach it."""
        return self._ca.cert

    def register(self, group: str, name: str, server: APIServer) -> str:
        """Route ``group/name``'s prefix to ``server`` with a new token; its kubeconfig.

        Registering a control plane again replaces its API server and its token.
        The control plane's RBAC holds the token to its role first
        (`sandbox.token_role`): the front sends its requests on as that user.
        """
        grant(server)

        async def add() -> None:
            old = self._control_planes.get((group, name))
            if old is not None:
                await old.session.close()
            self._control_planes[group, name] = _Upstream(
                server=server,
                token=secrets.token_urlsafe(32),
                session=_upstream_session(server),
                as_token_user=True,
            )

        self._call(add())
        return self.kubeconfig(group, name)

    def register_space(self, server: APIServer) -> str:
        """Route every path that is no control plane's to ``server`` with a new token.

        Returns the Space's kubeconfig: ``https://<front>`` and that token, what an
        operator gives the provider (a robot's static token; see the module's notes).
        """

        async def add() -> None:
            if self._space is not None:
                await self._space.session.close()
            self._space = _Upstream(
                server=server, token=secrets.token_urlsafe(32), session=_upstream_session(server)
            )

        self._call(add())
        return self.space_kubeconfig()

    def space_kubeconfig(self) -> str:
        """The current kubeconfig of the Space's own API (after ``register_space``)."""

        async def read() -> str:
            if self._space is None:
                msg = "no Space API is registered with the Space front"
                raise KeyError(msg)
            return self._space.token

        return kubeconfig_text(self.url, self._ca.cert, self._call(read()), "space")

    def kubeconfig(self, group: str, name: str) -> str:
        """The current kubeconfig of a registered control plane (its secret's ``kubeconfig``)."""
        return kubeconfig_text(
            server_url(self.url, group, name),
            self._ca.cert,
            self._token(group, name),
            _context(group, name),
        )

    def kubeconfig_incluster(self, group: str, name: str) -> str:
        """Its secret's ``kubeconfig-incluster``.

        A Space names its router's in-cluster Service there; the sandbox's pods are
        processes on this host, so it is the same loopback URL as ``kubeconfig``.
        """
        return self.kubeconfig(group, name)

    def connection_secret(self, group: str, name: str) -> dict[str, str]:
        """The connection secret's data, as a Space writes it."""
        return {
            "kubeconfig": self.kubeconfig(group, name),
            "kubeconfig-incluster": self.kubeconfig_incluster(group, name),
        }

    def rotate_token(self, group: str, name: str) -> str:
        """Give ``group/name`` a new token (the old one is refused from now on); its kubeconfig."""

        async def rotate() -> None:
            self._control_plane(group, name).token = secrets.token_urlsafe(32)

        self._call(rotate())
        return self.kubeconfig(group, name)

    def rotate_ca(self) -> dict[tuple[str, str], str]:
        """A new CA and serving certificate for new connections; every new kubeconfig.

        Kubeconfigs that carry the old CA no longer verify the front; the result maps
        each registered ``(group, name)`` to its kubeconfig with the new CA.
        """
        ca, serving = self._new_certificates()

        async def swap() -> list[tuple[str, str]]:
            # Handshakes from now on present the new certificate.
            self._tls.load_cert_chain(*self._write_serving(serving))
            self._ca = ca
            return list(self._control_planes)

        return {key: self.kubeconfig(*key) for key in self._call(swap())}

    def drain(self, group: str, name: str) -> None:
        """``group/name`` is being deleted: its prefix answers 503 until it is unregistered."""

        async def mark() -> None:
            self._draining.add((group, name))

        self._call(mark())

    def unregister(self, group: str, name: str) -> None:
        """Stop routing ``group/name``: its prefix answers 404 from now on."""

        async def remove() -> None:
            self._draining.discard((group, name))
            found = self._control_planes.pop((group, name), None)
            if found is not None:
                await found.session.close()

        self._call(remove())

    # --- internals ----------------------------------------------------------

    def _token(self, group: str, name: str) -> str:
        async def read() -> str:
            return self._control_plane(group, name).token

        return self._call(read())

    def _control_plane(self, group: str, name: str) -> _Upstream:
        found = self._control_planes.get((group, name))
        if found is None:
            msg = f"control plane {group}/{name} is not registered with the Space front"
            raise KeyError(msg)
        return found

    def _new_certificates(self) -> tuple[KeyPair, KeyPair]:
        ca = certificate_authority("space-front-ca")
        return ca, issue(ca, "space-front", names=(self.address, "localhost"))

    def ingress_public(self) -> dict[str, str]:
        """What the Space publishes of this ingress: ``upbound-system/ingress-public``'s data.

        ``ingress-host`` and ``ingress-ca``, the keys ``up ctx`` reads (upbound/up
        ``internal/profile/kubeconfig.go``, ``internal/spaces/ingress.go``).
        """
        return {"ingress-host": self.host, "ingress-ca": self.ca_pem.decode()}

    def _write_serving(self, serving: KeyPair) -> tuple[str, str]:
        """The serving pair as private files: ``ssl`` loads a certificate from files only."""
        folder = Path(tempfile.mkdtemp(dir=self._folder))
        cert, key = folder / "tls.crt", folder / "tls.key"
        for path, data in ((cert, serving.cert), (key, serving.key)):
            path.touch(mode=0o600)
            path.write_bytes(data)
        return str(cert), str(key)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path = request.rel_url.raw_path
        if self.cloud is not None and path == TOKEN_EXCHANGE_PATH and request.method == "POST":
            form = urllib.parse.parse_qs((await request.read()).decode(errors="replace"))
            return self.cloud.exchange(form, request.headers.get("Authorization"))
        route = parse_route(path)
        if route is not None:
            upstream = self._control_planes.get((route.group, route.name))
            path = route.rest
        else:
            upstream = self._space
        if upstream is None:
            return _status(404, "NotFound", "the page you requested does not exist")
        token = bearer_token(request.headers.get("Authorization"))
        if self.cloud is not None:
            admitted = token is not None and self.cloud.admits(token)
        else:
            admitted = token is not None and hmac.compare_digest(
                token.encode(errors="replace"), upstream.token.encode()
            )
        if not admitted:
            return _status(401, "Unauthorized", "Unauthorized")
        if route is not None and (route.group, route.name) in self._draining:
            return _status(503, "ServiceUnavailable", "the control plane is being deleted")
        if (
            self.cloud is not None
            and route is None
            and request.rel_url.query.get("watch", "").lower() in {"1", "true"}
        ):
            self.cloud.refused_watches += 1
            return _watch_refused(path)
        return await _forward(request, upstream, path)


def _context(group: str, name: str) -> str:
    return f"{group}-{name}"


def _upstream_session(server: APIServer) -> aiohttp.ClientSession:
    """Connections to one API server as its admin, passing bodies through undecoded."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(ssl=server.ssl_context()),
        auto_decompress=False,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=_UPSTREAM_CONNECT_TIMEOUT),
        # Large lists pass in fewer, larger chunks than with aiohttp's 64 KiB default.
        read_bufsize=2**21,
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
    )


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.Response(
        status=code, body=status_body(code, reason, message), content_type="application/json"
    )


async def _forward(request: web.Request, backend: _Upstream, path: str) -> web.StreamResponse:
    """Send the request on to the API server and stream its answer back."""
    target = backend.server.url + path
    if request.rel_url.raw_query_string:
        target += "?" + request.rel_url.raw_query_string
    headers = forwarded_headers(request.headers.items(), _NOT_FORWARDED_UPSTREAM)
    if backend.as_token_user:
        # The token's role grants no impersonation: a client asking for it (Flux's
        # --default-service-account, kubectl --as) is refused as the API server would.
        asked = [key for key in headers if key.lower().startswith(_IMPERSONATION)]
        if asked:
            return _status(
                403,
                "Forbidden",
                f'users is forbidden: User "{CONTROLPLANE_USER}" cannot impersonate resource '
                '"users" in API group "" at the cluster scope',
            )
        headers["Impersonate-User"] = CONTROLPLANE_USER
        headers["Impersonate-Group"] = CONTROLPLANE_GROUP
    try:
        upstream = await backend.session.request(
            request.method,
            # Already percent-encoded: sent on as the client wrote it.
            URL(target, encoded=True),
            headers=headers,
            data=request.content if request.body_exists else None,
            allow_redirects=False,
        )
    except (aiohttp.ClientError, OSError):
        return _status(503, "ServiceUnavailable", "the control plane's API server is unreachable")
    async with upstream:
        response = web.StreamResponse(
            status=upstream.status,
            reason=upstream.reason,
            headers=forwarded_headers(upstream.headers.items(), _HOP_BY_HOP),
        )
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
    return response
