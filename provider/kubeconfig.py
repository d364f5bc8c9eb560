"""Kubeconfigs from Secrets a team can write: an allow-list, nothing else.

A kubeconfig handed to the official client's loader can run commands
(``users[].user.exec``, ``auth-provider``), read files (``tokenFile``, every
``*file`` path) and talk plain http. The connection secret of an Instance and
the Secret of a namespaced ProviderConfig are written by teams, so the
controllers parse those kubeconfigs here instead: a cluster has only ``server``
(https) and ``certificate-authority-data``; a user only
``client-certificate-data``, ``client-key-data`` and ``token``. Anything else is
refused with an error that names the field, and no value is ever quoted.

The Space kubeconfig of a ClusterProviderConfig is the operator's (in a
Secret teams cannot write), often written by ``up ctx``, which records its
Space in a context extension (``spaces.upbound.io/space``, a
``SpaceExtension``: ``internal/upbound/extension_types.go`` of
github.com/upbound/up). Extensions are inert metadata that no client acts
on, so ``parse(..., ignore_extensions=True)`` drops every ``extensions``
list (top level, clusters, users, contexts, ``preferences``) before the same
allow-list; everything else is refused as for a team's kubeconfig.

Pure: no files, no network. The operator's own kubeconfig (``--kubeconfig``,
in-cluster config) is trusted and goes through the client's loader in
``provider.kube`` instead.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class KubeconfigError(ValueError):
    """A kubeconfig that is refused; the message names the field, never a value."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _ClusterFields(_Strict):
    server: str
    certificate_authority_data: str | None = Field(default=None, alias="certificate-authority-data")


class _NamedCluster(_Strict):
    name: str
    cluster: _ClusterFields


class _UserFields(_Strict):
    client_certificate_data: str | None = Field(default=None, alias="client-certificate-data")
    client_key_data: str | None = Field(default=None, alias="client-key-data")
    token: str | None = None


class _NamedUser(_Strict):
    name: str
    user: _UserFields


class _ContextFields(_Strict):
    cluster: str
    user: str
    namespace: str | None = None


class _NamedContext(_Strict):
    name: str
    context: _ContextFields


class _Kubeconfig(_Strict):
    api_version: str | None = Field(default=None, alias="apiVersion")
    kind: str | None = None
    clusters: list[_NamedCluster]
    users: list[_NamedUser] = []
    contexts: list[_NamedContext]
    current_context: str | None = Field(default=None, alias="current-context")
    # kubectl writes an empty one; it holds display settings only.
    preferences: dict[str, Any] = {}


@dataclass(frozen=True)
class Credentials:
    """What a client needs to reach one API server: all of it inline, nothing to read."""

    server: str
    ca_pem: str | None = None
    client_certificate_pem: bytes | None = None
    client_key_pem: bytes | None = None
    token: str | None = None


def parse(document: object, *, ignore_extensions: bool = False) -> Credentials:
    """The current context's server and credentials, if every field is allowed.

    Args:
        document: the kubeconfig, parsed from YAML.
        ignore_extensions: drop every ``extensions`` list first (an operator's kubeconfig).

    Returns:
        The server and credentials of the current context (or of the only context).

    Raises:
        KubeconfigError: a field outside the allow-list (``exec``, ``auth-provider``,
            ``tokenFile``, any file path, ``insecure-skip-tls-verify``, ...), an http
            server, data that is not base64, or a context that names nothing.
    """
    if ignore_extensions:
        document = _without_extensions(document)
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
    )


def _without_extensions(document: object) -> object:
    """``document`` without the ``extensions`` of itself, its preferences and named entries."""
    if not isinstance(document, dict):
        return document
    result = {key: value for key, value in document.items() if key != "extensions"}
    preferences = result.get("preferences")
    if isinstance(preferences, dict):
        result["preferences"] = {k: v for k, v in preferences.items() if k != "extensions"}
    for entries, field in (("clusters", "cluster"), ("users", "user"), ("contexts", "context")):
        listed = result.get(entries)
        if isinstance(listed, list):
            result[entries] = [_entry_without_extensions(entry, field) for entry in listed]
    return result


def _entry_without_extensions(entry: object, field: str) -> object:
    if not isinstance(entry, dict) or not isinstance(entry.get(field), dict):
        return entry
    inner = {key: value for key, value in entry[field].items() if key != "extensions"}
    return {**entry, field: inner}


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
