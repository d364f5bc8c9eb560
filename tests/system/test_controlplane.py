"""A team's ControlPlane through real Crossplane core, our function and provider, and real Flux."""

from __future__ import annotations

import base64

import yaml

from function.names import AwsNames
from sandbox.platform import Platform
from sandbox.spacefront import server_url
from sandbox.spaces import wait_for

from .helpers import (
    APP_NAMESPACE,
    GIT_REPOSITORY,
    INSTANCE,
    KUSTOMIZATION,
    SPACE_CONTROLPLANE,
    SYNC_DEADLINE,
    XR,
    Team,
    app_files,
    configmap,
    configmap_value,
    get,
    is_true,
)


def test_a_controlplane_becomes_ready_with_its_instance_and_git_source_synced(
    platform: Platform, team: Team
) -> None:
    status = team.composite["status"]
    for type_ in ("InstanceReady", "SourceSynced", "BackupsReady", "Ready", "Synced"):
        assert is_true(team.composite, type_), (type_, status.get("conditions"))
    assert status["instance"]["ready"] is True
    # No version asked for: the Space's Stable release, as the Instance observed it.
    assert status["instance"]["crossplaneVersion"] == "2.1.4-up.2"
    assert status["instance"]["kubeconfigSecretRef"] == {
        "name": f"{team.name}-kubeconfig",
        "key": "kubeconfig",
    }
    revision = f"main@sha1:{team.first_commit}"
    assert status["source"] == {
        "ready": True,
        "revision": revision,
        "lastAttemptedRevision": revision,
    }
    # The provider made exactly one ControlPlane in the Space, and the simulator's
    # hosted API server behind it got what the git repository holds.
    space_controlplane = get(platform.space, SPACE_CONTROLPLANE, "default", team.hosted)
    assert space_controlplane is not None
    assert configmap_value(platform, team.hosted, "greeting") == "first"
    assert configmap_value(platform, team.hosted, "settings", APP_NAMESPACE) == "first"
    # The backups' bucket, prefix and role, made by the AWS stand-in.
    backup = status["backup"]
    assert backup["ready"] is True
    assert backup["prefix"] == f"{team.namespace}/{team.name}/"
    role = AwsNames.of("unused", team.namespace, team.name).role
    assert backup["roleArn"].endswith(f":role/{role}")


def test_the_kustomization_is_composed_only_once_the_instance_is_ready(
    platform: Platform, team: Team
) -> None:
    instance = get(platform.kube, INSTANCE, team.namespace, team.name)
    kustomization = get(platform.kube, KUSTOMIZATION, team.namespace, team.name)
    repository = get(platform.kube, GIT_REPOSITORY, team.namespace, team.name)
    assert instance is not None and kustomization is not None and repository is not None
    ready_since = next(
        c["lastTransitionTime"]
        for c in instance["status"]["conditions"]
        if c["type"] == "Ready" and c["status"] == "True"
    )
    # RFC 3339 UTC timestamps of one clock compare as strings.
    assert kustomization["metadata"]["creationTimestamp"] >= ready_since
    assert repository["metadata"]["creationTimestamp"] <= ready_since
    # Flux reaches the hosted control plane through the Instance's connection secret.
    assert kustomization["spec"]["kubeConfig"]["secretRef"] == {
        "name": f"{team.name}-kubeconfig",
        "key": "kubeconfig",
    }
    secret = platform.kube.secret(team.namespace, f"{team.name}-kubeconfig")
    assert secret is not None
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    server = kubeconfig["clusters"][0]["cluster"]["server"]
    # The Space's: its front, the control plane's path prefix, a bearer token.
    assert server == server_url(platform.front.url, "default", team.hosted)
    assert kubeconfig["users"][0]["user"].keys() == {"token"}


def test_a_push_to_the_git_repository_reaches_the_control_plane_and_the_composite_status(
    platform: Platform, team: Team
) -> None:
    sha = team.repository.commit(
        {
            **app_files("first"),
            "app/greeting.yaml": configmap("greeting", "second"),
            "app/added.yaml": configmap("added", "new"),
        },
        "second",
    )
    wait_for(
        "the pushed ConfigMaps in the hosted control plane",
        lambda: (
            configmap_value(platform, team.hosted, "greeting") == "second"
            and configmap_value(platform, team.hosted, "added") == "new"
        ),
        timeout=SYNC_DEADLINE,
    )
    wait_for(
        "the pushed revision in the composite's status",
        lambda: (
            (get(platform.kube, XR, team.namespace, team.name) or {})
            .get("status", {})
            .get("source")
            == {
                "ready": True,
                "revision": f"main@sha1:{sha}",
                "lastAttemptedRevision": f"main@sha1:{sha}",
            }
        ),
        timeout=SYNC_DEADLINE,
    )
