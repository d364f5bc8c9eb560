"""What a Space publishes about its ingress, and the control plane kubeconfigs built on it.

A Space's control planes are served by one ingress, ``spaces-router``, at
``https://<ingress-host>/apis/spaces.upbound.io/v1beta1/namespaces/<group>/controlplanes/<name>/k8s``
(``ToSpacesK8sURL`` in github.com/upbound/up ``internal/profile/urls.go``). The
Space publishes that host and its CA in the ConfigMap ``upbound-system/ingress-public``
(keys ``ingress-host``, which may start with ``https://``, and ``ingress-ca``, PEM):
``up ctx`` reads exactly those (``GetIngressHost`` in ``internal/profile/kubeconfig.go``,
``internal/spaces/ingress.go``). That ConfigMap lives in the Space, where no team
writes, so its host is the default of the hosts a control plane's kubeconfig may
name, and the ingress of the kubeconfigs the provider writes itself (Upbound Cloud,
whose Spaces write no connection secrets).

Pure: ``provider.spaces.backend`` reads the ConfigMap.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

import yaml

from provider.kubeconfig import HostPattern, HostPatternError

INGRESS_NAMESPACE = "upbound-system"
INGRESS_CONFIGMAP = "ingress-public"
HOST_KEY = "ingress-host"
CA_KEY = "ingress-ca"
WHERE = f"ConfigMap {INGRESS_NAMESPACE}/{INGRESS_CONFIGMAP}"


class IngressError(ValueError):
    """What the Space publishes cannot be used; the message names the key."""


@dataclass(frozen=True)
class Ingress:
    """The Space's ingress: ``host`` (``name`` or ``name:port``) and its CA (PEM), if given."""

    host: str
    ca_pem: str | None = None

    @property
    def pattern(self) -> HostPattern:
        """The host (and port, when published) a control plane's kubeconfig may name."""
        return HostPattern.parse(self.host)

    @property
    def url(self) -> str:
        """``https://<host>``: the Space's own API at the ingress root."""
        return f"https://{self.host}"


def published(data: Mapping[str, Any] | None) -> Ingress:
    """The ingress a ``ingress-public`` ConfigMap's ``data`` publishes.

    Raises:
        IngressError: no ``ingress-host``, or one that is not a host with an optional port.
    """
    raw = str((data or {}).get(HOST_KEY) or "").strip()
    host = raw.removeprefix("https://").rstrip("/")
    if not host:
        msg = f"{WHERE} has no {HOST_KEY}"
        raise IngressError(msg)
    try:
        HostPattern.parse(host)
    except HostPatternError:
        msg = f"{WHERE}: {HOST_KEY} is not a host with an optional port"
        raise IngressError(msg) from None
    if host.startswith("*."):
        msg = f"{WHERE}: {HOST_KEY} is a wildcard, not a host"
        raise IngressError(msg)
    ca = str((data or {}).get(CA_KEY) or "")
    return Ingress(host, ca if ca.strip() else None)


def from_url(url: str, ca_pem: str | None = None) -> Ingress:
    """The ingress of a Space whose URL is ``url`` (what ``up ctx`` names for a Cloud Space)."""
    parts = urlsplit(url)
    return Ingress(parts.netloc, ca_pem)


def control_plane_server(ingress: Ingress, group: str, name: str) -> str:
    """A control plane's API URL on the ingress (``ToSpacesK8sURL``)."""
    return (
        f"{ingress.url}/apis/spaces.upbound.io/v1beta1/namespaces/{quote(group)}"
        f"/controlplanes/{quote(name)}/k8s"
    )


def control_plane_kubeconfig(server: str, ca_pem: str | None, token: str, context: str) -> bytes:
    """A kubeconfig of ``server`` with ``token``: what a Space writes, without exec or files.

    The cluster carries ``certificate-authority-data`` only when ``ca_pem`` is given
    (else the client's public CAs verify the ingress).
    """
    cluster: dict[str, Any] = {"server": server}
    if ca_pem:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem.encode()).decode()
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": context, "cluster": cluster}],
        "users": [{"name": context, "user": {"token": token}}],
        "contexts": [{"name": context, "context": {"cluster": context, "user": context}}],
        "current-context": context,
    }
    return yaml.safe_dump(document, sort_keys=False).encode()
