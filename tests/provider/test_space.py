"""The provider against a Space that behaves as Upbound's does (``sandbox.spaces``).

A Space upgrades control planes on their channels, refuses versions it does
not offer, reports provisioning errors, ill health and its own refusals, and
writes kubeconfigs the provider must hold to the allow-list. Each test here
has a module's own Space, so a release published in one is seen by the
others of this module only.
"""

from __future__ import annotations

import base64
import threading
from functools import partial
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from provider.spaces import desired
from sandbox.spaces import SPACES_GROUP, SPACES_VERSION, Fault, condition, wait_for
from tests.provider.conftest import SPACE_GROUP, Env
from tests.provider.test_instance import (
    control_planes,
    default_external_name,
    fresh,
    get,
    instance,
    ready,
    synced,
)
from tests.provider.test_watches import polls, total


def control_plane(env: Env, namespace: str, name: str = "myctp") -> dict[str, Any]:
    [found] = control_planes(env, default_external_name(namespace, name))
    return found


def running(env: Env, namespace: str, name: str = "myctp") -> str:
    return str(control_plane(env, namespace, name)["spec"]["crossplane"]["version"])


def reported(env: Env, namespace: str, name: str = "myctp") -> str | None:
    found = get(env, namespace, name) or {}
    version = found.get("status", {}).get("atProvider", {}).get("crossplaneVersion")
    return str(version) if version else None


def ready_reason(env: Env, namespace: str, reason: str) -> dict[str, Any] | None:
    found = get(env, namespace)
    return found if condition(found, "Ready").get("reason") == reason else None


def control_plane_patches(env: Env) -> float:
    return total(
        env.provider.metrics(),
        "controlplane_provider_api_requests_total",
        verb="patch",
        resource="controlplanes",
    )


def test_an_upgrade_the_space_makes_is_reported_and_never_reverted(env: Env) -> None:
    namespace = fresh(env, "upgrade")
    env.local.create("instances", instance(namespace, "follows", version="2.1.4-up.2"))
    env.local.create(
        "instances", instance(namespace, "pinned", version="2.1.4-up.2", channel="None")
    )
    for name in ("follows", "pinned"):
        wait_for(f"{name} Ready", partial(ready, env, namespace, name))
    before = control_plane_patches(env)

    upgraded = env.simulator.publish_release("2.1.5-up.1")

    external = default_external_name(namespace, "follows")
    assert (SPACE_GROUP, external, "2.1.5-up.1") in upgraded
    wait_for(
        "the upgrade reported",
        lambda: reported(env, namespace, "follows") == "2.1.5-up.1",
    )
    settled = polls(env.provider.metrics())
    wait_for("two more polls of each", lambda: polls(env.provider.metrics()) >= settled + 4)
    assert running(env, namespace, "follows") == "2.1.5-up.1", "the upgrade stands"
    assert control_plane_patches(env) == before, "no patch was sent: nothing was reverted"
    follows = get(env, namespace, "follows")
    assert follows is not None
    assert follows["spec"]["forProvider"]["crossplane"]["version"] == "2.1.4-up.2"
    assert condition(follows, "Ready")["status"] == "True"
    # Channel None is a pin: the Space leaves it, and so it stays.
    assert running(env, namespace, "pinned") == "2.1.4-up.2"
    assert reported(env, namespace, "pinned") == "2.1.4-up.2"


def test_a_version_the_space_does_not_offer_is_refused_in_its_words(env: Env) -> None:
    namespace = fresh(env, "refused")
    env.local.create("instances", instance(namespace, version="1.18.3-up.1"))

    found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
    message = condition(found, "Synced")["message"]
    assert message.startswith("create failed: "), message
    assert "1.18.3-up.1 is not a supported Crossplane version" in message
    assert control_planes(env, default_external_name(namespace)) == []

    env.local.patch(
        "instances",
        namespace,
        "myctp",
        {"spec": {"forProvider": {"crossplane": {"version": "2.1.4-up.2"}}}},
    )
    wait_for("Ready once the version is one the Space offers", lambda: ready(env, namespace))


def test_the_space_refuses_a_minor_skip_in_its_words(env: Env) -> None:
    namespace = fresh(env, "skip")
    env.local.create("instances", instance(namespace, version="2.0.2-up.3", channel="None"))
    wait_for("Ready", lambda: ready(env, namespace))
    name = default_external_name(namespace)

    with pytest.raises(ApiException) as refused:
        env.space.patch(
            "controlplanes",
            SPACE_GROUP,
            name,
            {"spec": {"crossplane": {"version": "2.2.1-up.1"}}},
            SPACES_GROUP,
            SPACES_VERSION,
        )

    assert refused.value.status == 422
    assert (
        "cannot upgrade from 2.0.2-up.3 to 2.2.1-up.1: upgrades move minor-by-minor through "
        "supported releases (version skips are rejected); upgrade to 2.1 first"
    ) in str(refused.value.body)
    assert running(env, namespace) == "2.0.2-up.3"


def test_an_upgrade_of_two_minors_steps_through_the_one_between_once_healthy(env: Env) -> None:
    namespace = fresh(env, "steps")
    env.local.create("instances", instance(namespace, version="2.0.2-up.3", channel="None"))
    wait_for("Ready", lambda: ready(env, namespace))
    name = default_external_name(namespace)
    written: list[str] = []
    stop = threading.Event()
    watching = threading.Thread(
        target=_record_versions, args=(env, name, written, stop), daemon=True
    )
    watching.start()
    wait_for("the version history's first event", lambda: written)
    # Unhealthy: the provider must not start the upgrade, nor go on with it.
    env.simulator.inject(SPACE_GROUP, name, Fault("unhealthy", "etcd is compacting"))
    wait_for(
        "the Instance unhealthy",
        partial(ready_reason, env, namespace, "UnhealthyControlPlane"),
    )
    env.local.patch(
        "instances",
        namespace,
        "myctp",
        {"spec": {"forProvider": {"crossplane": {"version": "2.2.1-up.1"}}}},
    )

    waiting = wait_for(
        "the Instance saying it waits for health",
        lambda: (
            upgrade
            if "waiting for the control plane to be healthy on 2.0.2-up.3"
            in str(upgrade := upgrade_of(env, namespace))
            else None
        ),
    )
    assert waiting["target"] == "2.2.1-up.1", waiting
    assert running(env, namespace) == "2.0.2-up.3"
    env.simulator.clear(SPACE_GROUP, name)

    wait_for("2.2.1-up.1 running", lambda: running(env, namespace) == "2.2.1-up.1")
    wait_for("Ready on 2.2.1-up.1", lambda: reported(env, namespace) == "2.2.1-up.1")
    wait_for("the upgrade no longer reported", lambda: upgrade_of(env, namespace) is None)
    wait_for("the last write seen", lambda: written[-1] == "2.2.1-up.1")
    stop.set()
    watching.join(timeout=10)
    assert written == ["2.0.2-up.3", "2.1.4-up.2", "2.2.1-up.1"], written
    assert condition(get(env, namespace), "Synced")["status"] == "True"


def upgrade_of(env: Env, namespace: str) -> dict[str, Any] | None:
    found = get(env, namespace) or {}
    upgrade = found.get("status", {}).get("atProvider", {}).get("upgrade")
    return dict(upgrade) if upgrade else None


def _record_versions(env: Env, name: str, written: list[str], stop: threading.Event) -> None:
    """Append each new ``spec.crossplane.version`` of the ControlPlane ``name``, from a watch."""
    resource_version = "0"  # from the start: one ADDED, then every write
    while not stop.is_set():
        try:
            for event in watch.Watch().stream(  # type: ignore[no-untyped-call]
                env.space.custom.list_namespaced_custom_object,
                SPACES_GROUP,
                SPACES_VERSION,
                SPACE_GROUP,
                "controlplanes",
                field_selector=f"metadata.name={name}",
                resource_version=resource_version,
                timeout_seconds=1,
            ):
                obj = event["object"]
                resource_version = obj["metadata"]["resourceVersion"]
                version = (obj["spec"].get("crossplane") or {}).get("version", "")
                if not written or written[-1] != version:
                    written.append(version)
        except (ApiException, OSError, urllib3.exceptions.HTTPError):
            stop.wait(0.1)


def test_a_pinned_downgrade_is_refused_and_the_running_version_kept(env: Env) -> None:
    namespace = fresh(env, "downgrade")
    env.local.create("instances", instance(namespace, version="2.1.4-up.2", channel="None"))
    wait_for("Ready", lambda: ready(env, namespace))

    env.local.patch(
        "instances",
        namespace,
        "myctp",
        {"spec": {"forProvider": {"crossplane": {"version": "2.0.2-up.3"}}}},
    )

    found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
    assert "cannot downgrade from 2.1.4-up.2 to 2.0.2-up.3" in condition(found, "Synced")["message"]
    assert running(env, namespace) == "2.1.4-up.2"
    assert reported(env, namespace) == "2.1.4-up.2"


def test_a_provisioning_error_reaches_the_instance_and_clears_with_the_space(env: Env) -> None:
    namespace = fresh(env, "provisioning")
    external = default_external_name(namespace)
    env.simulator.inject(
        SPACE_GROUP, external, Fault("provisioning", "no capacity left for control planes")
    )
    try:
        env.local.create("instances", instance(namespace))
        found = wait_for(
            "Ready=False ProvisioningError",
            partial(ready_reason, env, namespace, "ProvisioningError"),
        )
        assert condition(found, "Ready")["message"] == "no capacity left for control planes"
        assert control_plane(env, namespace)["status"]["message"] == (
            "no capacity left for control planes"
        )
        assert env.local.secret(namespace, "myctp-kubeconfig") is None, "no kubeconfig yet"
    finally:
        env.simulator.clear(SPACE_GROUP, external)
    found = wait_for("Ready once the Space provisions it", lambda: ready(env, namespace))
    assert condition(found, "Ready")["reason"] == "Available"
    assert env.local.secret(namespace, "myctp-kubeconfig") is not None


def test_an_unhealthy_control_plane_is_not_available_while_the_space_says_so(env: Env) -> None:
    namespace = fresh(env, "unhealthy")
    env.local.create("instances", instance(namespace))
    wait_for("Ready", lambda: ready(env, namespace))
    external = default_external_name(namespace)

    env.simulator.inject(SPACE_GROUP, external, Fault("unhealthy", "etcd has no leader"))
    try:
        found = wait_for(
            "Ready=False UnhealthyControlPlane",
            partial(ready_reason, env, namespace, "UnhealthyControlPlane"),
        )
        assert condition(found, "Ready")["message"] == "etcd has no leader"
    finally:
        env.simulator.clear(SPACE_GROUP, external)
    wait_for("Ready once healthy", lambda: ready(env, namespace))


def test_a_space_refusing_the_control_plane_is_synced_false_in_its_words(env: Env) -> None:
    namespace = fresh(env, "space-synced")
    env.local.create("instances", instance(namespace))
    wait_for("Ready", lambda: ready(env, namespace))
    external = default_external_name(namespace)

    env.simulator.inject(SPACE_GROUP, external, Fault("reconcile", "class huge is not offered"))
    try:
        found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
        assert condition(found, "Synced")["message"] == (
            "the Space refused the ControlPlane: class huge is not offered"
        )
    finally:
        env.simulator.clear(SPACE_GROUP, external)
    wait_for("Synced again", lambda: ready(env, namespace))


def test_a_kubeconfig_outside_the_allow_list_never_makes_the_instance_available(
    env: Env,
) -> None:
    namespace = fresh(env, "kubeconfig")
    env.local.create("instances", instance(namespace))
    wait_for("Ready", lambda: ready(env, namespace))
    secret_name = f"kubeconfig-{default_external_name(namespace)}"
    good = env.space.secret(SPACE_GROUP, secret_name)
    assert good is not None
    document = yaml.safe_load(base64.b64decode(good["data"]["kubeconfig"]))
    document["users"][0]["user"] = {"exec": {"command": "/bin/sh", "args": ["-c", "id"]}}

    env.space.put_secret(
        SPACE_GROUP, secret_name, {"kubeconfig": yaml.safe_dump(document).encode()}
    )
    try:
        found = wait_for("Ready=False", partial(ready_reason, env, namespace, "Unavailable"))
        message = condition(found, "Ready")["message"]
        assert "users[].user.exec is not allowed" in message, message
        assert "/bin/sh" not in message
        copied = env.local.secret(namespace, "myctp-kubeconfig")
        assert copied is not None
        assert b"exec" not in base64.b64decode(copied["data"]["kubeconfig"]), "never handed on"
    finally:
        env.space.put_secret(
            SPACE_GROUP, secret_name, {"kubeconfig": base64.b64decode(good["data"]["kubeconfig"])}
        )
    wait_for("Ready with a kubeconfig the allow-list passes", lambda: ready(env, namespace))


def test_a_composed_instance_labels_its_control_plane_with_the_team_and_composite(
    env: Env,
) -> None:
    namespace = fresh(env, "labels")
    body = instance(namespace, "myctp-x7k2p")
    body["metadata"]["labels"] = {"crossplane.io/composite": "myctp"}
    env.local.create("instances", body)
    wait_for("Ready", partial(ready, env, namespace, "myctp-x7k2p"))

    labels = control_plane(env, namespace, "myctp-x7k2p")["metadata"]["labels"]
    assert labels[desired.NAMESPACE_LABEL] == namespace
    assert labels[desired.NAME_LABEL] == "myctp"
    selected = env.space.custom.list_namespaced_custom_object(
        "spaces.upbound.io",
        "v1beta1",
        SPACE_GROUP,
        "controlplanes",
        label_selector=f"{desired.NAMESPACE_LABEL}={namespace},{desired.NAME_LABEL}=myctp",
    )
    assert [cp["metadata"]["name"] for cp in selected["items"]] == [
        default_external_name(namespace, "myctp-x7k2p")
    ]
