"""Upbound Cloud (``source: UpboundTokens``): the provider process against a Cloud-like Space.

The Space's API sits behind a front that takes only organisation tokens, which
expire within seconds here, refuses watches and exchanges a robot's token; the
Space writes no connection secrets, so the provider writes each kubeconfig.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from sandbox.spacefront import CloudAuth, SpaceFront
from sandbox.spaces import SPACES_CRD, Kube, SpacesSimulator, condition, wait_for
from tests.provider.conftest import PROVIDER_NAMESPACE, Env
from tests.provider.test_instance import fresh, instance

LIFETIME = 4.0
GROUP = "default"


@dataclass
class Cloud:
    space: Kube
    front: SpaceFront
    auth: CloudAuth


@pytest.fixture(scope="module")
def cloud(env: Env) -> Iterator[Cloud]:
    space = Kube(env.factory(name="cloud-space"))
    space.apply_crds(SPACES_CRD)
    space.namespace(GROUP)
    auth = CloudAuth(organization="acme", token_lifetime=LIFETIME)
    with (
        SpaceFront("127.0.0.3", cloud=auth) as front,
        SpacesSimulator(space, env.hosted, front=front),
    ):
        front.register_space(space.server)
        env.local.put_secret(PROVIDER_NAMESPACE, "robot", {"token": auth.robot_token.encode()})
        env.local.create(
            "clusterproviderconfigs",
            {
                "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
                "kind": "ClusterProviderConfig",
                "metadata": {"name": "cloud"},
                "spec": {
                    "spaces": {
                        "namespace": GROUP,
                        "credentials": {
                            "source": "UpboundTokens",
                            "secretRef": {
                                "namespace": PROVIDER_NAMESPACE,
                                "name": "robot",
                                "key": "token",
                            },
                            "upbound": {
                                "organization": "acme",
                                "spaceURL": front.url,
                                "tokenEndpoint": front.url,
                                "certificateAuthorityData": base64.b64encode(front.ca_pem).decode(),
                            },
                        },
                    }
                },
            },
        )
        yield Cloud(space, front, auth)


def kubeconfig_of(env: Env, namespace: str) -> dict[str, Any] | None:
    secret = env.local.secret(namespace, "myctp-kubeconfig")
    if secret is None:
        return None
    document: dict[str, Any] = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    return document


def namespaces(kubeconfig: dict[str, Any]) -> list[Any]:
    """The namespaces a kubeconfig lists, with the official client."""
    api = config.new_client_from_config_dict(kubeconfig)  # type: ignore[no-untyped-call]
    return list(client.CoreV1Api(api).list_namespace().items)


def ready(env: Env, namespace: str) -> dict[str, Any] | None:
    found = env.local.get("instances", namespace, "myctp")
    return found if condition(found, "Ready").get("status") == "True" else None


def test_an_instance_in_a_cloud_space_gets_a_kubeconfig_rewritten_before_each_token_expires(
    env: Env, cloud: Cloud
) -> None:
    namespace = fresh(env, "cloud")
    env.local.create(
        "instances",
        instance(namespace, provider_config={"kind": "ClusterProviderConfig", "name": "cloud"}),
    )
    found = wait_for("the Instance Ready", lambda: ready(env, namespace))
    assert condition(found, "Synced")["status"] == "True"
    external = found["metadata"]["annotations"]["crossplane.io/external-name"]
    control_plane = cloud.space.get(
        "controlplanes", GROUP, external, "spaces.upbound.io", "v1beta1"
    )
    assert control_plane is not None
    # Asked of a Cloud Space: no connection secret, and the Space wrote none.
    assert "writeConnectionSecretToRef" not in control_plane["spec"]
    assert not [
        s
        for s in cloud.space.core.list_namespaced_secret(GROUP).items
        if s.metadata.name.startswith("kubeconfig-")
    ]
    # The Space's API refused the provider's watches; it listed instead.
    assert cloud.auth.refused_watches > 0

    first = wait_for("the Instance's kubeconfig", lambda: kubeconfig_of(env, namespace))
    cluster = first["clusters"][0]["cluster"]
    assert cluster["server"] == (
        f"{cloud.front.url}/apis/spaces.upbound.io/v1beta1/namespaces/{GROUP}"
        f"/controlplanes/{external}/k8s"
    )
    assert base64.b64decode(cluster["certificate-authority-data"]) == cloud.front.ca_pem
    tokens = [first["users"][0]["user"]["token"]]
    started = time.monotonic()
    while time.monotonic() - started < 2 * LIFETIME:
        wait_for(
            "a new token in the kubeconfig",
            lambda: (
                (kubeconfig_of(env, namespace) or first)["users"][0]["user"]["token"] != tokens[-1]
            ),
            timeout=LIFETIME,
        )
        written = kubeconfig_of(env, namespace)
        assert written is not None
        token = written["users"][0]["user"]["token"]
        tokens.append(token)
        # Each kubeconfig reaches the control plane while it is written there.
        assert namespaces(written)
    assert not cloud.auth.admits(tokens[0])
    # The provider config records the ingress the Space publishes.
    recorded = env.local.get("clusterproviderconfigs", None, "cloud")
    assert (recorded or {}).get("status", {}).get("space", {}).get("ingressHost") == (
        cloud.front.host
    )


def test_a_robot_token_the_auth_service_refuses_is_said_on_the_instance(
    env: Env, cloud: Cloud
) -> None:
    env.local.put_secret(PROVIDER_NAMESPACE, "revoked-robot", {"token": b"revoked-token"})
    config = env.local.get("clusterproviderconfigs", None, "cloud")
    assert config is not None
    credentials = config["spec"]["spaces"]["credentials"]
    credentials["secretRef"]["name"] = "revoked-robot"
    env.local.create(
        "clusterproviderconfigs",
        {
            "apiVersion": config["apiVersion"],
            "kind": config["kind"],
            "metadata": {"name": "cloud-revoked"},
            "spec": config["spec"],
        },
    )
    namespace = fresh(env, "revoked")
    env.local.create(
        "instances",
        instance(
            namespace, provider_config={"kind": "ClusterProviderConfig", "name": "cloud-revoked"}
        ),
    )

    def refused() -> dict[str, Any] | None:
        synced = condition(env.local.get("instances", namespace, "myctp"), "Synced")
        return synced if synced.get("status") == "False" else None

    synced = wait_for("the Instance Synced=False", refused)
    assert "orgscopedtokens: 401 Unauthorized" in synced["message"], synced
    assert "revoked-token" not in synced["message"]
