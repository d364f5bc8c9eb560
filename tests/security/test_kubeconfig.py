"""Kubeconfigs from team-writable Secrets: only the allow-list is honoured (issue 12, item 1;
the fields a Space writes: issue 26, item 4)."""

from __future__ import annotations

import asyncio
import base64
import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider import kubeconfig
from provider.kube import NAMESPACES, Cluster, KubeError
from sandbox.apiserver import APIServer

CA = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").decode()


def config(
    cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None, **top: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "c",
                "cluster": cluster
                if cluster is not None
                else {"server": "https://127.0.0.1:6443", "certificate-authority-data": CA},
            }
        ],
        "users": [{"name": "u", "user": user if user is not None else {"token": "t0k3n"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
        **top,
    }


@dataclass
class RefusedCase:
    reason: str
    document: dict[str, Any]
    named: str


REFUSED = [
    RefusedCase(
        "an exec plugin would run a command as the controller",
        config(user={"exec": {"command": "/bin/sh", "args": ["-c", "touch /tmp/pwned"]}}),
        "users[].user.exec",
    ),
    RefusedCase(
        "an auth-provider would run its cmd-path",
        config(user={"auth-provider": {"name": "gcp", "config": {"cmd-path": "/bin/sh"}}}),
        "users[].user.auth-provider",
    ),
    RefusedCase(
        "a tokenFile would send the pod's service-account token to the named server",
        config(user={"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}),
        "users[].user.tokenFile",
    ),
    RefusedCase(
        "a client-certificate path would read a file of the controller's",
        config(user={"client-certificate": "/etc/ssl/private/a.crt"}),
        "users[].user.client-certificate",
    ),
    RefusedCase(
        "a client-key path would read a file of the controller's",
        config(user={"client-key": "/etc/ssl/private/a.key"}),
        "users[].user.client-key",
    ),
    RefusedCase(
        "a certificate-authority path would read a file of the controller's",
        config(cluster={"server": "https://h", "certificate-authority": "/etc/passwd"}),
        "clusters[].cluster.certificate-authority",
    ),
    RefusedCase(
        "basic auth is not in the allow-list",
        config(user={"username": "a", "password": "b"}),
        "users[].user.password",
    ),
    RefusedCase(
        "turning TLS verification off is not allowed",
        config(cluster={"server": "https://h", "insecure-skip-tls-verify": True}),
        "clusters[].cluster.insecure-skip-tls-verify",
    ),
    RefusedCase(
        "a proxy would send the credentials elsewhere",
        config(cluster={"server": "https://h", "proxy-url": "http://evil"}),
        "clusters[].cluster.proxy-url",
    ),
    RefusedCase(
        "a plain http server would expose the credentials on the wire",
        config(cluster={"server": "http://127.0.0.1:8080"}),
        "server must be an https URL",
    ),
    RefusedCase(
        "an unused user with an exec plugin is refused too",
        {
            **config(),
            "users": [
                {"name": "u", "user": {"token": "t"}},
                {"name": "other", "user": {"exec": {"command": "id"}}},
            ],
        },
        "users[].user.exec",
    ),
    RefusedCase(
        "a context naming a missing user is refused",
        {**config(), "contexts": [{"name": "x", "context": {"cluster": "c", "user": "nobody"}}]},
        "names a user that is not in users",
    ),
    RefusedCase(
        "certificate data that is not base64 is refused",
        config(cluster={"server": "https://h", "certificate-authority-data": "not base64!"}),
        "certificate-authority-data is not base64",
    ),
]


@pytest.mark.parametrize("case", REFUSED, ids=lambda c: c.reason)
def test_a_kubeconfig_with_a_field_outside_the_allow_list_is_refused_naming_it(
    case: RefusedCase,
) -> None:
    with pytest.raises(kubeconfig.KubeconfigError) as raised:
        kubeconfig.parse(case.document)
    assert case.named in str(raised.value), case.reason
    for secret in ("/bin/sh", "t0k3n", "/etc/passwd", "evil"):
        assert secret not in str(raised.value), case.reason


# What `up ctx` writes into a context (github.com/upbound/up, internal/upbound/extension_types.go).
SPACE_EXTENSION = {
    "name": "spaces.upbound.io/space",
    "extension": {
        "apiVersion": "upbound.io/v1alpha1",
        "kind": "SpaceExtension",
        "spec": {"cloud": {"organization": "acme", "space": "upbound-aws-us-east-1"}},
    },
}


def with_extensions() -> dict[str, Any]:
    """A kubeconfig with extensions wherever a kubeconfig may carry them."""
    document = config(
        cluster={
            "server": "https://127.0.0.1:6443",
            "certificate-authority-data": CA,
            "extensions": [SPACE_EXTENSION],
        },
        user={"token": "t0k3n", "extensions": [SPACE_EXTENSION]},
        preferences={"extensions": [SPACE_EXTENSION]},
        extensions=[SPACE_EXTENSION],
    )
    document["contexts"][0]["context"]["extensions"] = [SPACE_EXTENSION]
    return document


@dataclass
class AcceptedCase:
    reason: str
    document: dict[str, Any]
    tls_server_name: str | None = None


SPACE_CLUSTER = {"server": "https://127.0.0.1:6443", "certificate-authority-data": CA}

ACCEPTED = [
    AcceptedCase(
        "extensions anywhere a kubeconfig may carry them are inert metadata, as up ctx writes",
        with_extensions(),
    ),
    AcceptedCase(
        "tls-server-name names the certificate's host, as a Space behind an ingress may",
        config(cluster={**SPACE_CLUSTER, "tls-server-name": "spaces-router.upbound-system"}),
        tls_server_name="spaces-router.upbound-system",
    ),
    AcceptedCase(
        "preferences with colors and extensions hold display settings only",
        config(preferences={"colors": True, "extensions": [SPACE_EXTENSION]}),
    ),
    AcceptedCase(
        "disable-compression only asks for uncompressed answers",
        config(cluster={**SPACE_CLUSTER, "disable-compression": True}),
    ),
    AcceptedCase(
        "a context's namespace and extensions are kept out of the credentials",
        {
            **config(),
            "contexts": [
                {
                    "name": "x",
                    "context": {
                        "cluster": "c",
                        "user": "u",
                        "namespace": "default",
                        "extensions": [SPACE_EXTENSION],
                    },
                }
            ],
        },
    ),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=lambda c: c.reason)
def test_a_kubeconfig_with_the_fields_a_space_writes_gives_its_server_and_credentials(
    case: AcceptedCase,
) -> None:
    parsed = kubeconfig.parse(case.document)
    assert parsed.server == "https://127.0.0.1:6443", case.reason
    assert parsed.token == "t0k3n", case.reason
    assert parsed.tls_server_name == case.tls_server_name, case.reason


BESIDE_SPACE_FIELDS = [
    RefusedCase(
        "an exec plugin is refused even beside extensions",
        {**with_extensions(), "users": [{"name": "u", "user": {"exec": {"command": "id"}}}]},
        "users[].user.exec",
    ),
    RefusedCase(
        "a tokenFile is refused even beside extensions",
        {**with_extensions(), "users": [{"name": "u", "user": {"tokenFile": "/etc/passwd"}}]},
        "users[].user.tokenFile",
    ),
    RefusedCase(
        "an http server is refused even beside extensions",
        {**with_extensions(), "clusters": [{"name": "c", "cluster": {"server": "http://h"}}]},
        "server must be an https URL",
    ),
    RefusedCase(
        "a tls-server-name that is no host name is refused",
        config(cluster={**SPACE_CLUSTER, "tls-server-name": "evil/../etc/passwd"}),
        "tls-server-name must be a DNS name or an IP address",
    ),
    RefusedCase(
        "an extension entry must have a name",
        config(extensions=[{"extension": {"a": 1}}]),
        "extensions[].name is required",
    ),
    RefusedCase(
        "preferences hold nothing but colors and extensions",
        config(preferences={"exec": {"command": "/bin/sh"}}),
        "preferences.exec is not allowed",
    ),
    RefusedCase(
        "impersonation is not something a Space writes",
        config(user={"token": "t0k3n", "as": "system:admin"}),
        "users[].user.as is not allowed",
    ),
]


@pytest.mark.parametrize("case", BESIDE_SPACE_FIELDS, ids=lambda c: c.reason)
def test_the_fields_a_space_writes_open_no_way_to_run_code_or_read_files(
    case: RefusedCase,
) -> None:
    with pytest.raises(kubeconfig.KubeconfigError) as raised:
        kubeconfig.parse(case.document)
    assert case.named in str(raised.value), case.reason
    for secret in ("/etc/passwd", "/bin/sh", "t0k3n", "system:admin"):
        assert secret not in str(raised.value), case.reason


def test_the_allow_listed_fields_give_the_server_and_inline_credentials() -> None:
    parsed = kubeconfig.parse(config())
    assert parsed.server == "https://127.0.0.1:6443"
    assert parsed.token == "t0k3n"
    assert parsed.ca_pem is not None and parsed.ca_pem.startswith("-----BEGIN CERTIFICATE")


def test_an_exec_kubeconfig_reaching_the_client_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    document = config(
        user={
            "exec": {
                "apiVersion": "client.authentication.k8s.io/v1",
                "command": "touch",
                "args": [str(marker)],
            }
        }
    )
    with pytest.raises(KubeError, match=r"users\[\]\.user\.exec is not allowed"):
        asyncio.run(Cluster.from_kubeconfig(document))
    assert not marker.exists()


def test_the_fixtures_inline_kubeconfig_reaches_a_real_api_server(apiserver: APIServer) -> None:
    async def namespaces() -> list[str]:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(apiserver.kubeconfig))
        try:
            items, _ = await cluster.list(NAMESPACES)
        finally:
            await cluster.close()
        return [item["metadata"]["name"] for item in items]

    assert "default" in asyncio.run(namespaces())


def test_a_bearer_token_kubeconfig_is_sent_to_the_real_api_server(apiserver: APIServer) -> None:
    """A token that is not known to the server is refused by it: the token was sent."""
    document = copy.deepcopy(yaml.safe_load(apiserver.kubeconfig))
    document["users"][0]["user"] = {"token": "not-a-real-token"}

    async def answer() -> str:
        cluster = await Cluster.from_kubeconfig(document)
        try:
            await cluster.list(NAMESPACES)
        except KubeError as error:
            return str(error)
        finally:
            await cluster.close()
        return "accepted"

    assert "401" in asyncio.run(answer())
