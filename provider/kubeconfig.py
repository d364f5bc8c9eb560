"""Kubeconfigs from Secrets a team can write: an allow-list, nothing else.

A kubeconfig handed to the official client's loader can run commands
(``users[].user.exec``, ``auth-provider``), read files (``tokenFile``, every
``*file`` path) and talk plain http. The connection secret of an Instance and
the Secret of a namespaced ProviderConfig are written by teams, so the
controllers parse those kubeconfigs here instead. Allowed (client-go's
``clientcmd/api/v1`` names):

- a cluster's ``server`` (https), ``certificate-authority-data``,
  ``tls-server-name`` (the name its certificate is checked against) and
  ``disable-compression``;
- a user's ``client-certificate-data``, ``client-key-data`` and ``token``;
- a context's ``cluster``, ``user`` and ``namespace``;
- ``extensions`` of the file, a cluster, a user or a context, and
  ``preferences`` (``colors``, ``extensions``): inert metadata no client acts
  on, which a Space and ``up ctx`` write (``spaces.upbound.io/space``, a
  ``SpaceExtension``: ``internal/upbound/extension_types.go`` of
  github.com/upbound/up). client-go hands a cluster's extension
  ``client.authentication.k8s.io/exec`` to exec plugins only, and those are
  refused.

Anything that may run code, read a file, send the credentials elsewhere or turn
TLS off (``exec``, ``auth-provider``, ``tokenFile``, ``certificate-authority``,
``client-certificate``, ``client-key``, ``proxy-url``,
``insecure-skip-tls-verify``, basic auth, impersonation) is refused with an
error that names the field, and no value is ever quoted.

A kubeconfig that parses may still name any https host: ``ControlPlaneHosts``
holds a hosted control plane's server to the hosts the operator allows
(``--allowed-controlplane-host``), by default what the Space publishes.

Pure: no files, no network. The operator's own kubeconfig (``--kubeconfig``,
in-cluster config) is trusted and goes through the client's loader in
``provider.kube`` instead.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from provider.runtime import dns


class KubeconfigError(ValueError):
    """A kubeconfig that is refused; the message names the field, never a value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _NamedExtension(_Strict):
    """An entry of an ``extensions`` list: a name and any value, which nothing reads."""

    name: str
    extension: object = None


class _ClusterFields(_Strict):
    server: str
    certificate_authority_data: str | None = Field(default=None, alias="certificate-authority-data")
    tls_server_name: str | None = Field(default=None, alias="tls-server-name")
    disable_compression: bool = Field(default=False, alias="disable-compression")
    extensions: list[_NamedExtension] = []


class _NamedCluster(_Strict):
    name: str
    cluster: _ClusterFields


class _UserFields(_Strict):
    client_certificate_data: str | None = Field(default=None, alias="client-certificate-data")
    client_key_data: str | None = Field(default=None, alias="client-key-data")
    token: str | None = None
    extensions: list[_NamedExtension] = []


class _NamedUser(_Strict):
    name: str
    user: _UserFields


class _ContextFields(_Strict):
    cluster: str
    user: str
    namespace: str | None = None
    extensions: list[_NamedExtension] = []


class _NamedContext(_Strict):
    name: str
    context: _ContextFields


class _Preferences(_Strict):
    colors: bool | None = None
    extensions: list[_NamedExtension] = []


class _Kubeconfig(_Strict):
    api_version: str | None = Field(default=None, alias="apiVersion")
    kind: str | None = None
    clusters: list[_NamedCluster]
    users: list[_NamedUser] = []
    contexts: list[_NamedContext]
    current_context: str | None = Field(default=None, alias="current-context")
    # kubectl writes an empty one; it holds display settings only.
    preferences: _Preferences = _Preferences()
    extensions: list[_NamedExtension] = []


@dataclass(frozen=True)
class Credentials:
    """What a client needs to reach one API server: all of it inline, nothing to read."""

    server: str
    ca_pem: str | None = None
    client_certificate_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None
    # The name the server's certificate must carry, when it is not the URL's host.
    tls_server_name: str | None = None
    disable_compression: bool = False


def parse(document: object) -> Credentials:
    """The current context's server and credentials, if every field is allowed.

    Args:
        document: the kubeconfig, parsed from YAML.

    Returns:
        The server and credentials of the current context (or of the only context).

    Raises:
        KubeconfigError: a field outside the allow-list (``exec``, ``auth-provider``,
            ``tokenFile``, any file path, ``insecure-skip-tls-verify``, ...), an http
            server, data that is not base64, or a context that names nothing.
    """
    try:
        config = _Kubeconfig.model_validate(document)
    except ValidationError as error:
        raise KubeconfigError(_describe(error)) from None
    context = _current(config)
    cluster = next((c.cluster for c in config.clusters if c.name == context.cluster), None)
    if cluster is None:
        msg = "kubeconfig: the current context names a cluster that is not in clusters"
        raise KubeconfigError(msg)
    user = next((u.user for u in config.users if u.name == context.user), None)
    if user is None:
        msg = "kubeconfig: the current context names a user that is not in users"
        raise KubeconfigError(msg)
    parts = urlsplit(cluster.server)
    if parts.scheme != "https" or not parts.hostname:
        msg = "kubeconfig: clusters[].cluster.server must be an https URL"
        raise KubeconfigError(msg)
    if cluster.tls_server_name is not None and not _is_host(cluster.tls_server_name):
        msg = "kubeconfig: clusters[].cluster.tls-server-name must be a DNS name or an IP address"
        raise KubeconfigError(msg)
    if (user.client_certificate_data is None) != (user.client_key_data is None):
        msg = "kubeconfig: client-certificate-data and client-key-data go together"
        raise KubeconfigError(msg)
    ca = _decoded(
        cluster.certificate_authority_data, "clusters[].cluster.certificate-authority-data"
    )
    return Credentials(
        server=cluster.server.rstrip("/"),
        ca_pem=ca.decode("ascii", errors="replace") if ca is not None else None,
        client_certificate_pem=_decoded(
            user.client_certificate_data, "users[].user.client-certificate-data"
        ),
        client_key_pem=_decoded(user.client_key_data, "users[].user.client-key-data"),
        token=user.token,
        tls_server_name=cluster.tls_server_name,
        disable_compression=cluster.disable_compression,
    )


def _current(config: _Kubeconfig) -> _ContextFields:
    if config.current_context is None:
        if len(config.contexts) == 1:
            return config.contexts[0].context
        msg = "kubeconfig: current-context is required when there is not exactly one context"
        raise KubeconfigError(msg)
    found = next((c.context for c in config.contexts if c.name == config.current_context), None)
    if found is None:
        msg = "kubeconfig: current-context names a context that is not in contexts"
        raise KubeconfigError(msg)
    return found


def _decoded(value: str | None, field: str) -> bytes | None:
    if value is None:
        return None
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        msg = f"kubeconfig: {field} is not base64"
        raise KubeconfigError(msg) from None


def _describe(error: ValidationError) -> str:
    problems = []
    for item in error.errors(include_url=False):
        path = ".".join("[]" if isinstance(p, int) else str(p) for p in item["loc"])
        path = path.replace(".[]", "[]")
        if item["type"] == "extra_forbidden":
            problems.append(f"kubeconfig: {path} is not allowed")
        elif item["type"] == "missing":
            problems.append(f"kubeconfig: {path} is required")
        else:
            problems.append(f"kubeconfig: {path} is not valid ({item['type']})")
    return "; ".join(sorted(set(problems)))


class HostPatternError(ValueError):
    """An operator's host pattern that is not ``host``, ``*.domain`` or either with ``:port``."""


@dataclass(frozen=True)
class HostPattern:
    """A host a hosted control plane's kubeconfig may name: exact, or ``*.`` one label deep.

    Without a port, any port of the host matches.
    """

    host: str
    port: int | None = None

    @classmethod
    def parse(cls, text: str) -> HostPattern:
        """``spaces.example.com``, ``*.example.com``, ``10.0.0.1``, ``[::1]``, each with ``:port``.

        Raises:
            HostPatternError: anything else (a scheme, a path, a user, a bad name or port).
        """
        parts = urlsplit(f"//{text.strip()}")
        try:
            port = parts.port
        except ValueError:
            port = -1
        host = (parts.hostname or "").rstrip(".")
        wildcard = host.startswith("*.")
        name = host.removeprefix("*.")
        valid_name = (dns.is_subdomain(name) and "." in name) if wildcard else _is_host(name)
        if (
            not valid_name
            or port in (-1, 0)
            or parts.username is not None
            or parts.path
            or parts.query
            or parts.fragment
        ):
            msg = (
                f"{text!r} is not a host pattern: host, *.domain (one label deep) or an IP "
                "address, each with an optional :port"
            )
            raise HostPatternError(msg)
        return cls(host, port)

    def matches(self, host: str, port: int) -> bool:
        """Whether ``host`` (lower case, no trailing dot) and ``port`` are allowed by this."""
        if self.port is not None and self.port != port:
            return False
        if self.host.startswith("*."):
            label, dot, rest = host.partition(".")
            return bool(label) and bool(dot) and rest == self.host.removeprefix("*.")
        return host == self.host


def _is_host(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return dns.is_subdomain(name)
    return True


def _host_and_port(server: str) -> tuple[str, int] | None:
    """The lower-case host (no trailing dot) and port of an https URL; None when it is not one."""
    parts = urlsplit(server)
    try:
        port = parts.port
    except ValueError:
        return None
    if parts.scheme != "https" or not parts.hostname:
        return None
    return parts.hostname.rstrip("."), port or 443


@dataclass(frozen=True)
class ControlPlaneHosts:
    """The hosts the operator allows a hosted control plane's kubeconfig to name.

    ``--allowed-controlplane-host`` patterns when the operator gave any; otherwise
    the ingress host the Space publishes for its control planes, or, when it
    publishes none the provider can read, the host (any port) of the Space's API.
    """

    patterns: tuple[HostPattern, ...] = ()

    @classmethod
    def of(cls, values: Iterable[str]) -> ControlPlaneHosts:
        """The operator's patterns, each value one or more separated by spaces or commas.

        Raises:
            HostPatternError: naming the pattern that is not one.
        """
        items = (item for value in values for item in value.replace(",", " ").split())
        return cls(tuple(HostPattern.parse(item) for item in items))

    def check(
        self, server: str, *, space_server: str | None, published: HostPattern | None = None
    ) -> None:
        """Refuse a control plane ``server`` on a host that is not allowed.

        Args:
            server: the ``clusters[].cluster.server`` of the control plane's kubeconfig.
            space_server: the URL of the Space's API; its host is the default when the
                Space publishes no ingress; None when it is not known.
            published: the ingress host (and port) the Space publishes, the default.

        Raises:
            KubeconfigError: naming the rule, never the host.
        """
        allowed = self.patterns
        rule = "--allowed-controlplane-host"
        if not allowed and published is not None:
            allowed, rule = (published,), "the ingress host the Space publishes"
        space = _host_and_port(space_server) if space_server else None
        if not allowed and space is not None:
            allowed, rule = (HostPattern(space[0]),), "the Space's own host"
        if not allowed:
            msg = (
                "kubeconfig: no control plane host is allowed: the Space publishes no ingress "
                "host, its own host is not known, and the operator set no "
                "--allowed-controlplane-host"
            )
            raise KubeconfigError(msg)
        target = _host_and_port(server)
        if target is None:
            msg = "kubeconfig: clusters[].cluster.server must be an https URL"
            raise KubeconfigError(msg)
        if not any(pattern.matches(*target) for pattern in allowed):
            msg = (
                "kubeconfig: clusters[].cluster.server names a host the operator does not "
                f"allow (allowed: {rule})"
            )
            raise KubeconfigError(msg)
