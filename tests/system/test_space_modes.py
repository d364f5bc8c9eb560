"""Spaces as operators run them, each with the provider's and backup controller's default flags.

- Upbound Cloud (``Platform.cloud_space``): the operator gives a robot's token;
  the Space's API refuses watches, takes only organisation tokens that expire
  every minute, and writes no connection secrets.
- Self-hosted (``Platform.self_hosted_group``): the operator gives a kubeconfig of
  the host cluster's API server with a ServiceAccount token whose Role grants
  ``list`` but not ``watch``; control planes are served by the router, on
  another host, which the Space publishes in ``upbound-system/ingress-public``.
"""

from __future__ import annotations

import base64
import time
from functools import partial
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from sandbox.platform import CloudSpace, Platform
from sandbox.spaces import SPACES_GROUP, SPACES_VERSION, Fault, condition, wait_for

from .helpers import (
    BACKUP,
    SYNC_DEADLINE,
    UP_DEADLINE,
    XR,
    app_files,
    completed_backup_after,
    configmap,
    configmap_value,
    controlplane,
    create,
    get,
    hosted_name,
    is_true,
    unique,
    wait_ready,
)

SPACE_GROUP = "default"
TOKEN_LIFETIME = 60.0
LIFETIMES = 3
# A Backup fires every minute; one made after a token expired completes within two.
BACKUP_DEADLINE = 210.0
# The provider's poll in the system tests, and what may come on top before a composite shows it.
PROVIDER_POLL = 5.0
COMPOSE_SLACK = 25.0


def kubeconfig_of(platform: Platform, namespace: str, name: str) -> dict[str, Any]:
    secret = platform.kube.secret(namespace, f"{name}-kubeconfig")
    assert secret is not None, f"no connection secret {namespace}/{name}-kubeconfig"
    document: dict[str, Any] = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    return document


def token_of(document: dict[str, Any]) -> str:
    return str(document["users"][0]["user"]["token"])


def synced(platform: Platform, hosted: str, value: str) -> bool:
    return configmap_value(platform, hosted, "greeting") == value


def composite_on(composition: str, namespace: str, name: str, url: str) -> dict[str, Any]:
    return controlplane(
        namespace,
        name,
        url,
        backup={"schedule": "* * * * *"},
        crossplane={"compositionRef": {"name": composition}},
    )


@pytest.fixture(scope="module")
def cloud(platform: Platform) -> CloudSpace:
    return platform.cloud_space(token_lifetime=TOKEN_LIFETIME)


def test_a_controlplane_in_a_cloud_space_syncs_backs_up_and_goes_across_three_token_lifetimes(
    platform: Platform, cloud: CloudSpace
) -> None:
    namespace, name = unique("cloud"), "ctp"
    repository = platform.git.repository(namespace)
    repository.commit(app_files("first"), "first")
    platform.kube.namespace(namespace)
    create(platform.kube, XR, composite_on(cloud.composition, namespace, name, repository.url))
    wait_ready(platform, XR, namespace, name)
    hosted = hosted_name(platform, namespace, name)
    wait_for(
        "the first sync in the Cloud control plane",
        lambda: configmap_value(platform, hosted, "greeting") == "first",
        timeout=SYNC_DEADLINE,
    )
    # The Space wrote no connection secret; the provider wrote the kubeconfig itself:
    # the control plane's path on the Space's ingress, the Space's CA, a token, no exec.
    assert not [
        s
        for s in cloud.kube.core.list_namespaced_secret(SPACE_GROUP).items
        if s.metadata.name.startswith("kubeconfig-")
    ]
    first = kubeconfig_of(platform, namespace, name)
    cluster = first["clusters"][0]["cluster"]
    assert cluster["server"] == (
        f"{cloud.front.url}/apis/spaces.upbound.io/v1beta1/namespaces/{SPACE_GROUP}"
        f"/controlplanes/{hosted}/k8s"
    )
    assert base64.b64decode(cluster["certificate-authority-data"]) == cloud.front.ca_pem
    assert set(first["users"][0]["user"]) == {"token"}
    # The provider could not watch the Space and listed it instead.
    assert cloud.auth.refused_watches > 0

    started, started_wall = time.monotonic(), time.time()
    tokens = [token_of(first)]
    rounds = 0
    while time.monotonic() - started < LIFETIMES * TOKEN_LIFETIME:
        rounds += 1
        # The provider writes a new token into the kubeconfig before the one it carries expires.
        wait_for(
            "a new token in the Instance's kubeconfig",
            lambda: token_of(kubeconfig_of(platform, namespace, name)) != tokens[-1],
            timeout=TOKEN_LIFETIME,
        )
        tokens.append(token_of(kubeconfig_of(platform, namespace, name)))
        assert cloud.auth.admits(tokens[-1])
        value = f"round-{rounds}"
        repository.commit(
            {**app_files("first"), "app/greeting.yaml": configmap("greeting", value)}, value
        )
        wait_for(
            f"Flux applying {value} with the kubeconfig of that moment",
            partial(synced, platform, hosted, value),
            timeout=SYNC_DEADLINE,
        )
    # The first tokens have long expired: the syncs above went through with later ones.
    assert not cloud.auth.admits(tokens[0])
    assert len(set(tokens)) >= LIFETIMES + 1, tokens

    expired_at = started_wall + TOKEN_LIFETIME

    backup = completed_backup_after(
        platform,
        namespace,
        expired_at,
        "a Completed Backup made after the first token expired",
        BACKUP_DEADLINE,
    )
    assert backup["status"]["objects"] > 0

    group, version, plural = XR
    platform.kube.delete(plural, namespace, name, group, version)
    wait_for(
        "the Cloud Space's ControlPlane gone",
        lambda: (
            cloud.kube.get("controlplanes", SPACE_GROUP, hosted, SPACES_GROUP, SPACES_VERSION)
            is None
        ),
        timeout=UP_DEADLINE,
    )
    wait_for(
        "the composite gone",
        lambda: get(platform.kube, XR, namespace, name) is None,
        timeout=UP_DEADLINE,
    )
    assert cloud.auth.exchanges >= LIFETIMES


@pytest.fixture(scope="module")
def self_hosted(platform: Platform) -> tuple[str, str]:
    """The watch-less group's provider config and the composition whose Instances use it."""
    config = platform.self_hosted_group("watchless", watch=False)
    return config, platform.composition_for(config)


def test_a_self_hosted_space_read_with_a_watchless_role_through_the_host_cluster(
    platform: Platform, self_hosted: tuple[str, str]
) -> None:
    config, composition = self_hosted
    group = config
    namespace, name = unique("selfhosted"), "ctp"
    repository = platform.git.repository(namespace)
    repository.commit(app_files("first"), "first")
    platform.kube.namespace(namespace)
    create(platform.kube, XR, composite_on(composition, namespace, name, repository.url))
    wait_ready(platform, XR, namespace, name)
    hosted = hosted_name(platform, namespace, name)
    wait_for(
        "the first sync in the self-hosted control plane",
        lambda: configmap_value(platform, hosted, "greeting") == "first",
        timeout=SYNC_DEADLINE,
    )
    # The provider reaches the host cluster's API server; the control plane is on the
    # router's host, allowed because the Space publishes it (no flag says so).
    server = kubeconfig_of(platform, namespace, name)["clusters"][0]["cluster"]["server"]
    assert urlsplit(server).hostname != urlsplit(platform.space.server.url).hostname
    assert urlsplit(server).netloc == platform.front.host
    recorded = platform.kube.get("clusterproviderconfigs", None, config)
    assert (recorded or {}).get("status", {}).get("space", {}).get("ingressHost") == (
        platform.front.host
    )

    # Without watch, what the Space says reaches the composite within a poll or two.
    platform.simulator.inject(group, hosted, Fault("unhealthy", "etcd quorum lost"))
    said = time.monotonic()
    wait_for(
        "the Space's unhealthy message on the composite",
        lambda: (
            "etcd quorum lost"
            in condition(get(platform.kube, XR, namespace, name), "InstanceReady").get(
                "message", ""
            )
        ),
        timeout=2 * PROVIDER_POLL + COMPOSE_SLACK,
    )
    assert time.monotonic() - said <= 2 * PROVIDER_POLL + COMPOSE_SLACK
    platform.simulator.clear(group, hosted)
    wait_ready(platform, XR, namespace, name)

    # A Backup reads the control plane through the router's host with default flags too.
    group_, version, plural = BACKUP
    wait_for(
        "a Completed Backup of the self-hosted control plane",
        lambda: any(
            is_true(b, "Completed")
            for b in platform.kube.list_of(plural, namespace, group_, version)
        ),
        timeout=BACKUP_DEADLINE,
    )

    xr_group, xr_version, xr_plural = XR
    platform.kube.delete(xr_plural, namespace, name, xr_group, xr_version)
    wait_for(
        "the self-hosted ControlPlane gone",
        lambda: (
            platform.space.get("controlplanes", group, hosted, SPACES_GROUP, SPACES_VERSION) is None
        ),
        timeout=UP_DEADLINE,
    )
