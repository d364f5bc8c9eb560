"""Against a Space that behaves as Upbound's does: slow starts, upgrades, errors, rotated tokens.

The platform's Space (``sandbox.spaces`` behind ``sandbox.spacefront``) takes
seconds to provision, upgrades control planes on their channels, fails on
demand and rotates the tokens of the kubeconfigs it writes.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from provider.managed import meta
from sandbox.platform import Platform
from sandbox.spaces import SPACES_GROUP, SPACES_VERSION, Fault, condition, wait_for

from .helpers import (
    INSTANCE,
    SYNC_DEADLINE,
    UP_DEADLINE,
    XR,
    app_files,
    bare,
    completed_backup_after,
    configmap,
    configmap_value,
    controlplane,
    create,
    get,
    hosted_name,
    is_true,
    metric_total,
    unique,
    wait_ready,
)

SPACE_GROUP = "default"
STABLE = "2.1.4-up.2"
# A patch release of the Stable line (2.1), newer than any the Space offers at start.
PUBLISHED = "2.1.5-up.1"
PROVIDER_POLL = 5.0
# What may come on top of one provider poll before the composite shows what the
# Space said: the Instance's status write and core's composing, on 2 shared cores.
COMPOSE_SLACK = 25.0
FIRST_BACKUP_DEADLINE = 210.0


def space_name(namespace: str, name: str) -> str:
    """The Space ControlPlane the provider makes for the composite ``namespace/name``."""
    return meta.default_external_name({"metadata": {"namespace": namespace, "name": name}})


def instance_condition(platform: Platform, namespace: str, name: str) -> dict[str, Any]:
    return condition(get(platform.kube, XR, namespace, name), "InstanceReady")


class VersionHistory:
    """Every ``spec.crossplane.version`` written to one Space ControlPlane, from a watch."""

    def __init__(self, platform: Platform, name: str) -> None:
        self.platform = platform
        self.name = name
        self.versions: list[tuple[str, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> VersionHistory:
        self._thread.start()
        wait_for("the version history's first event", lambda: self.versions)
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def written(self) -> list[str]:
        """The version after each write, in order (one entry per resourceVersion)."""
        return [version for _, version in self.versions]

    def _watch(self) -> None:
        version = "0"  # from the start: one ADDED, then every write
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(  # type: ignore[no-untyped-call]
                    self.platform.space.custom.list_namespaced_custom_object,
                    SPACES_GROUP,
                    SPACES_VERSION,
                    SPACE_GROUP,
                    "controlplanes",
                    field_selector=f"metadata.name={self.name}",
                    resource_version=version,
                    timeout_seconds=2,
                ):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    written = (obj["spec"].get("crossplane") or {}).get("version", "")
                    if not self.versions or self.versions[-1][1] != written:
                        self.versions.append((version, written))
                    if self._stop.is_set():
                        return
            except (ApiException, OSError, urllib3.exceptions.HTTPError):
                self._stop.wait(0.1)


def controlplane_patches(platform: Platform) -> float:
    return metric_total(
        platform.provider.metrics_port,
        "controlplane_provider_api_requests_total",
        verb="patch",
        resource="controlplanes",
    )


def instance_polls(platform: Platform) -> float:
    return metric_total(
        platform.provider.metrics_port,
        "controlplane_provider_reconcile_total",
        controller="instance",
    )


def instances(platform: Platform) -> int:
    group, version, plural = INSTANCE
    found = platform.kube.custom.list_cluster_custom_object(group, version, plural)
    return len(found["items"])


def test_a_stable_controlplane_comes_up_through_creating_and_keeps_the_spaces_upgrade(
    platform: Platform,
) -> None:
    namespace, name = unique("upgraded"), "ctp"
    platform.kube.namespace(namespace)
    create(platform.kube, XR, bare(namespace, name, channel="Stable"))
    creating = wait_for(
        "the composite's InstanceReady saying the Space is Creating",
        lambda: (
            instance_condition(platform, namespace, name)
            if "Creating" in str(instance_condition(platform, namespace, name))
            else None
        ),
        timeout=UP_DEADLINE,
    )
    assert creating["status"] == "False", creating
    composite = wait_ready(platform, XR, namespace, name)
    assert composite["status"]["instance"]["crossplaneVersion"] == STABLE
    hosted = hosted_name(platform, namespace, name)

    with VersionHistory(platform, hosted) as history:
        patches_before = controlplane_patches(platform)
        upgraded = platform.simulator.publish_release(PUBLISHED)
        assert (SPACE_GROUP, hosted, PUBLISHED) in upgraded
        wait_for(
            "the new version in the composite's status",
            lambda: (
                (get(platform.kube, XR, namespace, name) or {})
                .get("status", {})
                .get("instance", {})
                .get("crossplaneVersion")
                == PUBLISHED
            ),
            timeout=SYNC_DEADLINE,
        )
        # Every Instance polled at least twice more, each poll a chance to revert.
        polls = instance_polls(platform)
        enough = polls + 2 * instances(platform)
        wait_for(
            "two more polls of every Instance",
            lambda: instance_polls(platform) >= enough,
            timeout=SYNC_DEADLINE,
        )
        assert controlplane_patches(platform) == patches_before
    # The Space wrote the upgrade, and nobody wrote another version after it.
    assert history.written()[-2:] == [STABLE, PUBLISHED], history.versions
    found = get(platform.kube, INSTANCE, namespace, name)
    assert found["status"]["atProvider"]["crossplaneVersion"] == PUBLISHED
    assert is_true(get(platform.kube, XR, namespace, name), "Ready")


def test_a_controlplane_asked_from_2_0_to_2_2_steps_through_2_1_once_healthy(
    platform: Platform,
) -> None:
    namespace, name = unique("steps"), "ctp"
    platform.kube.namespace(namespace)
    create(platform.kube, XR, bare(namespace, name, channel="None", crossplaneVersion="2.0.2-up.3"))
    wait_ready(platform, XR, namespace, name)
    hosted = hosted_name(platform, namespace, name)

    with VersionHistory(platform, hosted) as history:
        # Unhealthy first: the composite shows the upgrade waiting, and nothing is written.
        platform.simulator.inject(SPACE_GROUP, hosted, Fault("unhealthy", "etcd is compacting"))
        wait_for(
            "the composite's InstanceReady saying the control plane is unhealthy",
            lambda: "UnhealthyControlPlane" in str(instance_condition(platform, namespace, name)),
            timeout=SYNC_DEADLINE,
        )
        platform.kube.patch(
            XR[2], namespace, name, {"spec": {"crossplaneVersion": "2.2.1-up.1"}}, XR[0], XR[1]
        )
        waiting = wait_for(
            "the composite's status.instance.upgrade waiting for health",
            lambda: (
                upgrade
                if "waiting for the control plane to be healthy on 2.0.2-up.3"
                in str(upgrade := instance_status(platform, namespace, name).get("upgrade"))
                else None
            ),
            timeout=SYNC_DEADLINE,
        )
        assert waiting["target"] == "2.2.1-up.1", waiting
        assert history.written()[-1] == "2.0.2-up.3"
        platform.simulator.clear(SPACE_GROUP, hosted)
        wait_for(
            "2.2.1-up.1 in the composite's status, the upgrade done",
            lambda: (
                instance_status(platform, namespace, name).get("crossplaneVersion") == "2.2.1-up.1"
                and "upgrade" not in instance_status(platform, namespace, name)
            ),
            timeout=SYNC_DEADLINE,
        )
    assert history.written() == ["2.0.2-up.3", "2.1.4-up.2", "2.2.1-up.1"], history.versions
    assert is_true(get(platform.kube, XR, namespace, name), "Ready")


def instance_status(platform: Platform, namespace: str, name: str) -> dict[str, Any]:
    found = get(platform.kube, XR, namespace, name) or {}
    return dict(found.get("status", {}).get("instance") or {})


@pytest.fixture
def failing(platform: Platform) -> Iterator[tuple[str, str, str]]:
    """A composite's coordinates and Space name, the Space failing to provision it."""
    namespace, name = unique("failing"), "ctp"
    hosted = space_name(namespace, name)
    platform.simulator.inject(
        SPACE_GROUP, hosted, Fault("provisioning", "no capacity left in region eu-west-9")
    )
    try:
        yield namespace, name, hosted
    finally:
        platform.simulator.clear(SPACE_GROUP, hosted)


def test_a_controlplane_the_space_fails_to_provision_says_why_and_converges_once_it_clears(
    platform: Platform, failing: tuple[str, str, str]
) -> None:
    namespace, name, hosted = failing
    platform.kube.namespace(namespace)
    create(platform.kube, XR, bare(namespace, name))

    def space_says() -> float | None:
        cp = platform.space.get("controlplanes", SPACE_GROUP, hosted, SPACES_GROUP, SPACES_VERSION)
        provisioned = condition(cp, "ControlPlaneProvisioned")
        return time.monotonic() if provisioned.get("reason") == "ProvisioningError" else None

    said_at = wait_for("the Space's ProvisioningError", space_says, timeout=UP_DEADLINE)
    reported = wait_for(
        "the Space's message in the composite's InstanceReady",
        lambda: (
            instance_condition(platform, namespace, name)
            if "no capacity left in region eu-west-9"
            in instance_condition(platform, namespace, name).get("message", "")
            else None
        ),
        timeout=PROVIDER_POLL + COMPOSE_SLACK,
    )
    assert time.monotonic() - said_at <= PROVIDER_POLL + COMPOSE_SLACK
    assert reported["status"] == "False", reported
    assert not is_true(get(platform.kube, XR, namespace, name), "Ready")

    platform.simulator.clear(SPACE_GROUP, hosted)
    composite = wait_ready(platform, XR, namespace, name)
    assert is_true(composite, "InstanceReady")
    assert "eu-west-9" not in str(composite["status"]["conditions"])


def instance_kubeconfig(platform: Platform, namespace: str, name: str) -> dict[str, Any]:
    secret = platform.kube.secret(namespace, f"{name}-kubeconfig")
    assert secret is not None
    document: dict[str, Any] = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    return document


def token_of(kubeconfig: dict[str, Any]) -> str:
    return str(kubeconfig["users"][0]["user"]["token"])


def test_after_the_space_rotates_the_token_flux_and_the_next_backup_still_succeed(
    platform: Platform,
) -> None:
    namespace, name = unique("rotated"), "ctp"
    repository = platform.git.repository(namespace)
    repository.commit(app_files("first"), "first")
    platform.kube.namespace(namespace)
    create(
        platform.kube,
        XR,
        controlplane(namespace, name, repository.url, backup={"schedule": "* * * * *"}),
    )
    wait_ready(platform, XR, namespace, name)
    hosted = hosted_name(platform, namespace, name)
    wait_for(
        "the first sync in the hosted control plane",
        lambda: configmap_value(platform, hosted, "greeting") == "first",
        timeout=SYNC_DEADLINE,
    )
    old = token_of(instance_kubeconfig(platform, namespace, name))

    rotated_at = time.time()
    platform.simulator.rotate_token(SPACE_GROUP, hosted)
    wait_for(
        "the Instance's connection secret with the new token",
        lambda: token_of(instance_kubeconfig(platform, namespace, name)) != old,
        timeout=PROVIDER_POLL + COMPOSE_SLACK,
    )

    # Flux's next sync goes through the front with the new token (the old one is refused).
    repository.commit(
        {**app_files("first"), "app/greeting.yaml": configmap("greeting", "after-rotation")},
        "after the rotation",
    )
    wait_for(
        "the pushed ConfigMap in the hosted control plane",
        lambda: configmap_value(platform, hosted, "greeting") == "after-rotation",
        timeout=SYNC_DEADLINE,
    )

    # The next Backup, made after the rotation, completes.
    backup = completed_backup_after(
        platform,
        namespace,
        rotated_at,
        "a Completed Backup made after the rotation",
        FIRST_BACKUP_DEADLINE,
    )
    assert backup["status"]["objects"] > 0


def ca_of(kubeconfig: dict[str, Any]) -> str:
    return str(kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])


def test_after_the_spaces_ca_rotates_the_provider_and_flux_follow(platform: Platform) -> None:
    namespace, name = unique("recertified"), "ctp"
    repository = platform.git.repository(namespace)
    repository.commit(app_files("first"), "first")
    platform.kube.namespace(namespace)
    create(platform.kube, XR, controlplane(namespace, name, repository.url))
    wait_ready(platform, XR, namespace, name)
    hosted = hosted_name(platform, namespace, name)
    old = ca_of(instance_kubeconfig(platform, namespace, name))

    # Every kubeconfig the Space wrote, and the operator's Space kubeconfig, change.
    platform.rotate_space_ca()
    wait_for(
        "the Instance's connection secret with the new CA",
        lambda: ca_of(instance_kubeconfig(platform, namespace, name)) != old,
        timeout=PROVIDER_POLL + COMPOSE_SLACK,
    )
    repository.commit(
        {**app_files("first"), "app/greeting.yaml": configmap("greeting", "after-new-ca")},
        "after the new CA",
    )
    wait_for(
        "the pushed ConfigMap in the hosted control plane",
        lambda: configmap_value(platform, hosted, "greeting") == "after-new-ca",
        timeout=SYNC_DEADLINE,
    )
    # The provider reaches the Space with the operator's new kubeconfig: a new
    # composite gets its control plane.
    create(platform.kube, XR, bare(namespace, "after"))
    wait_ready(platform, XR, namespace, "after")
