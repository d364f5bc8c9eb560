"""What a Space publishes of its ingress, and the kubeconfigs written on it: pure."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import yaml

from provider import kubeconfig
from provider.spaces import ingress

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


@dataclass(frozen=True)
class PublishedCase:
    reason: str
    data: dict[str, str] | None
    host: str | None
    error: str = ""


PUBLISHED_CASES = [
    PublishedCase(
        "A host and port, as a Space writes ingress-host.",
        {"ingress-host": "proxy.spaces.example.com:8443", "ingress-ca": CA},
        "proxy.spaces.example.com:8443",
    ),
    PublishedCase(
        "An https:// prefix is dropped, as up ctx drops it.",
        {"ingress-host": "https://spaces.example.com"},
        "spaces.example.com",
    ),
    PublishedCase("No ConfigMap data publishes nothing.", None, None, "has no ingress-host"),
    PublishedCase(
        "A path is no host.",
        {"ingress-host": "spaces.example.com/evil"},
        None,
        "is not a host with an optional port",
    ),
    PublishedCase(
        "A wildcard is no host.",
        {"ingress-host": "*.example.com"},
        None,
        "is a wildcard, not a host",
    ),
]


@pytest.mark.parametrize("case", PUBLISHED_CASES, ids=lambda case: case.reason)
def test_the_published_ingress_is_a_host_with_an_optional_port(case: PublishedCase) -> None:
    if case.host is None:
        with pytest.raises(ingress.IngressError, match=case.error):
            ingress.published(case.data)
        return
    found = ingress.published(case.data)
    assert found.host == case.host, case.reason
    assert found.pattern.host == case.host.split(":")[0]


def test_a_written_kubeconfig_names_the_ingress_and_passes_the_allow_list() -> None:
    published = ingress.published({"ingress-host": "spaces.example.com:8443", "ingress-ca": CA})
    server = ingress.control_plane_server(published, "team-a", "ctp-1")
    text = ingress.control_plane_kubeconfig(server, published.ca_pem, "t0k3n", "team-a-ctp-1")
    parsed = kubeconfig.parse(yaml.safe_load(text))
    assert parsed.server == (
        "https://spaces.example.com:8443/apis/spaces.upbound.io/v1beta1/namespaces/team-a"
        "/controlplanes/ctp-1/k8s"
    )
    assert parsed.token == "t0k3n"
    assert (parsed.ca_pem or "").strip() == CA.strip()
    kubeconfig.ControlPlaneHosts().check(server, space_server=None, published=published.pattern)


def test_a_written_kubeconfig_without_a_ca_trusts_the_public_cas() -> None:
    found = ingress.from_url("https://upbound-aws-us-east-1.spaces.upbound.io")
    server = ingress.control_plane_server(found, "default", "c")
    document = yaml.safe_load(ingress.control_plane_kubeconfig(server, None, "t", "default-c"))
    assert "certificate-authority-data" not in document["clusters"][0]["cluster"]
    assert "exec" not in document["users"][0]["user"]
