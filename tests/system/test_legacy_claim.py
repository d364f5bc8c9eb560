"""A legacy claim: Crossplane makes the composite, and the claim gets the kubeconfig."""

from __future__ import annotations

import base64

import yaml

from sandbox.platform import Platform
from sandbox.spacefront import server_url
from sandbox.spaces import wait_for

from .helpers import CLAIM, INSTANCE, SYNC_DEADLINE, create, hosted_name, unique, wait_ready


def test_a_legacy_claims_connection_secret_receives_the_control_planes_kubeconfig(
    platform: Platform,
) -> None:
    namespace, name, secret_name = unique("legacy"), "ctp", "ctp-connection"
    platform.kube.namespace(namespace)
    create(
        platform.kube,
        CLAIM,
        {
            "apiVersion": "legacy.platform.acme.io/v1alpha1",
            "kind": "ControlPlane",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"writeConnectionSecretToRef": {"name": secret_name}},
        },
    )
    claim = wait_ready(platform, CLAIM, namespace, name)
    composite_name = claim["spec"]["resourceRef"]["name"]
    # The claim's composite composes its Instance in the claim's namespace.
    group, version, plural = INSTANCE
    instances = platform.kube.list_of(plural, namespace, group, version)
    assert [i["metadata"]["name"] for i in instances] == [composite_name]
    hosted = hosted_name(platform, namespace, composite_name)

    def kubeconfig_server() -> str | None:
        secret = platform.kube.secret(namespace, secret_name)
        if secret is None or "kubeconfig" not in (secret.get("data") or {}):
            return None
        config = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
        return str(config["clusters"][0]["cluster"]["server"])

    server = wait_for("the claim's connection secret", kubeconfig_server, timeout=SYNC_DEADLINE)
    # The Space's front, and the control plane's path prefix on it.
    assert server == server_url(platform.front.url, "default", hosted)
