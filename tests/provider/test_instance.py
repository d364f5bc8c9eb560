"""The Instance managed resource against real API servers: the local cluster and a Space."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest
import yaml
from kubernetes import client, config

from provider.managed import meta
from provider.spaces import desired
from provider.spaces.backend import OWNER_NAME, OWNER_NAMESPACE
from sandbox.spaces import condition, wait_for
from tests.provider.conftest import SPACE_GROUP, Env

_names = itertools.count()


def fresh(env: Env, prefix: str = "team") -> str:
    """A namespace of the local cluster no other test uses."""
    name = f"{prefix}-{next(_names)}"
    env.local.namespace(name)
    return name


def instance(
    namespace: str,
    name: str = "myctp",
    *,
    version: str | None = "2.1.4-up.2",
    channel: str = "Stable",
    class_: str | None = None,
    policies: list[str] | None = None,
    annotations: dict[str, str] | None = None,
    provider_config: dict[str, str] | None = None,
) -> dict[str, Any]:
    crossplane: dict[str, Any] = {"autoUpgrade": {"channel": channel}}
    if version:
        crossplane["version"] = version
    for_provider: dict[str, Any] = {"crossplane": crossplane}
    if class_:
        for_provider["class"] = class_
    spec: dict[str, Any] = {
        "forProvider": for_provider,
        "writeConnectionSecretToRef": {"name": f"{name}-kubeconfig"},
        "providerConfigRef": provider_config
        or {"kind": "ClusterProviderConfig", "name": "default"},
    }
    if policies is not None:
        spec["managementPolicies"] = policies
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "Instance",
        "metadata": metadata,
        "spec": spec,
    }


def control_planes(env: Env, external_name: str) -> list[dict[str, Any]]:
    return [
        cp
        for cp in env.space.list_of("controlplanes", SPACE_GROUP, "spaces.upbound.io", "v1beta1")
        if cp["metadata"]["name"] == external_name
    ]


def default_external_name(namespace: str, name: str = "myctp") -> str:
    """The name the provider gives an Instance's ControlPlane (pinned in test_reconciler)."""
    return meta.default_external_name({"metadata": {"namespace": namespace, "name": name}})


def existing_control_plane(
    env: Env,
    name: str,
    owner_namespace: str,
    class_: str | None = None,
    *,
    connection_secret: bool = False,
) -> None:
    """A ControlPlane made in the Space before any Instance names it (Crossplane 2.0.2-up.3).

    An operator adopts it for ``<owner_namespace>/myctp`` by annotating it with its owner.
    """
    spec: dict[str, Any] = {
        "crossplane": {"version": "2.0.2-up.3", "autoUpgrade": {"channel": "Stable"}}
    }
    if class_:
        spec["class"] = class_
    if connection_secret:
        spec["writeConnectionSecretToRef"] = {"name": f"{name}-own", "namespace": SPACE_GROUP}
    env.space.create(
        "controlplanes",
        {
            "apiVersion": "spaces.upbound.io/v1beta1",
            "kind": "ControlPlane",
            "metadata": {
                "name": name,
                "namespace": SPACE_GROUP,
                "annotations": {
                    OWNER_NAMESPACE: name.removesuffix("-imported"),
                    OWNER_NAME: "myctp",
                },
            },
            "spec": spec,
        },
        "spaces.upbound.io",
        "v1beta1",
    )


def get(env: Env, namespace: str, name: str = "myctp") -> dict[str, Any] | None:
    return env.local.get("instances", namespace, name)


def synced(
    env: Env, namespace: str, name: str = "myctp", status: str = "True"
) -> dict[str, Any] | None:
    found = get(env, namespace, name)
    if condition(found, "Synced").get("status") == status:
        return found
    return None


def ready(env: Env, namespace: str, name: str = "myctp") -> dict[str, Any] | None:
    found = synced(env, namespace, name)
    return found if condition(found, "Ready").get("status") == "True" else None


def test_an_instance_becomes_one_ready_control_plane_with_a_working_kubeconfig(env: Env) -> None:
    namespace = fresh(env)
    env.local.create("instances", instance(namespace))
    found = wait_for("the Instance Ready and Synced", lambda: ready(env, namespace))

    external = default_external_name(namespace)
    assert found["metadata"]["annotations"]["crossplane.io/external-name"] == external
    assert "finalizer.managedresource.crossplane.io" in found["metadata"]["finalizers"]
    assert condition(found, "Ready")["reason"] == "Available"
    assert condition(found, "Synced")["reason"] == "ReconcileSuccess"
    assert condition(found, "Synced")["observedGeneration"] == found["metadata"]["generation"]
    assert len(control_planes(env, external)) == 1
    control_plane = control_planes(env, external)[0]
    assert control_plane["spec"]["crossplane"]["version"] == "2.1.4-up.2"
    assert control_plane["spec"]["crossplane"]["autoUpgrade"] == {"channel": "Stable"}
    assert "class" not in control_plane["spec"], "no class: the Space's default"
    labels = control_plane["metadata"]["labels"]
    assert (labels[desired.NAMESPACE_LABEL], labels[desired.NAME_LABEL]) == (namespace, "myctp")
    assert found["status"]["atProvider"]["id"] == control_plane["status"]["controlPlaneID"]
    assert found["status"]["atProvider"]["crossplaneVersion"] == "2.1.4-up.2"

    secret = wait_for(
        "the connection secret", lambda: env.local.secret(namespace, "myctp-kubeconfig")
    )
    assert secret["type"] == "connection.crossplane.io/v1alpha1"
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"]) == (
        "Instance",
        "myctp",
        found["metadata"]["uid"],
    )
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    hosted: Any = client.CoreV1Api(config.new_client_from_config_dict(kubeconfig))  # type: ignore[no-untyped-call]
    names = {ns.metadata.name for ns in hosted.list_namespace().items}
    assert "default" in names


def test_version_channel_and_class_updates_reach_the_control_plane(env: Env) -> None:
    namespace = fresh(env)
    env.local.create("instances", instance(namespace))
    wait_for("the Instance Ready", lambda: ready(env, namespace))
    env.local.patch(
        "instances",
        namespace,
        "myctp",
        {
            "spec": {
                "forProvider": {
                    "crossplane": {"version": "2.2.1-up.1", "autoUpgrade": {"channel": "Rapid"}},
                    "class": "large",
                }
            }
        },
    )

    def updated() -> dict[str, Any] | None:
        cp = control_planes(env, default_external_name(namespace))[0]
        return cp if cp["spec"].get("class") == "large" else None

    cp = wait_for("the ControlPlane updated", updated)
    assert cp["spec"]["crossplane"]["version"] == "2.2.1-up.1"
    assert cp["spec"]["crossplane"]["autoUpgrade"] == {"channel": "Rapid"}
    assert len(control_planes(env, default_external_name(namespace))) == 1


def test_an_unset_class_is_late_initialised_and_the_running_version_only_reported(
    env: Env,
) -> None:
    namespace = fresh(env)
    external = f"{namespace}-imported"
    existing_control_plane(env, external, namespace, class_="small")
    env.local.create(
        "instances",
        instance(namespace, version=None, annotations={"crossplane.io/external-name": external}),
    )

    found = wait_for("the adopted Instance Ready", lambda: ready(env, namespace))
    assert found["spec"]["forProvider"]["class"] == "small"
    # Copied into the spec it would read as where the control plane starts (or a pin).
    assert "version" not in found["spec"]["forProvider"]["crossplane"]
    assert found["status"]["atProvider"]["crossplaneVersion"] == "2.0.2-up.3"
    cp = control_planes(env, external)[0]
    assert cp["spec"]["writeConnectionSecretToRef"]["name"] == f"kubeconfig-{external}", (
        "an adopted ControlPlane without a connection secret is given one"
    )
    assert env.local.secret(namespace, "myctp-kubeconfig") is not None


def test_observe_only_on_a_missing_control_plane_is_a_reconcile_error(env: Env) -> None:
    namespace = fresh(env)
    env.local.create("instances", instance(namespace, policies=["Observe"]))
    found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
    assert condition(found, "Synced")["reason"] == "ReconcileError"
    assert "external resource does not exist" in condition(found, "Synced")["message"]
    assert control_planes(env, default_external_name(namespace)) == []


def test_observe_only_on_an_existing_control_plane_fills_the_status_only(env: Env) -> None:
    namespace = fresh(env)
    external = f"{namespace}-imported"
    existing_control_plane(env, external, namespace, connection_secret=True)
    env.local.create(
        "instances",
        instance(
            namespace,
            version="2.1.4-up.2",
            policies=["Observe"],
            annotations={"crossplane.io/external-name": external},
        ),
    )
    found = wait_for("the Instance Ready", lambda: ready(env, namespace))
    assert found["status"]["atProvider"]["crossplaneVersion"] == "2.0.2-up.3"
    cp = control_planes(env, external)[0]
    assert cp["spec"]["crossplane"]["version"] == "2.0.2-up.3", "Observe never updates"
    assert cp["metadata"].get("labels") is None, "nor labels"
    assert found["spec"]["forProvider"]["crossplane"]["version"] == "2.1.4-up.2", (
        "nor late-initialises"
    )


def test_deleting_without_the_delete_policy_orphans_the_control_plane(env: Env) -> None:
    namespace = fresh(env)
    env.local.create(
        "instances", instance(namespace, policies=["Observe", "Create", "Update", "LateInitialize"])
    )
    wait_for("the Instance Ready", lambda: ready(env, namespace))
    env.local.delete("instances", namespace, "myctp")
    wait_for("the Instance gone", lambda: get(env, namespace) is None)
    assert len(control_planes(env, default_external_name(namespace))) == 1


def test_deleting_removes_the_control_plane_and_then_the_finalizer(env: Env) -> None:
    namespace = fresh(env)
    env.local.create("instances", instance(namespace))
    wait_for("the Instance Ready", lambda: ready(env, namespace))
    env.local.delete("instances", namespace, "myctp")
    wait_for("the Instance gone", lambda: get(env, namespace) is None)
    assert control_planes(env, default_external_name(namespace)) == []


def test_a_paused_instance_is_left_alone(env: Env) -> None:
    namespace = fresh(env)
    env.local.create("instances", instance(namespace, annotations={"crossplane.io/paused": "true"}))
    found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
    assert condition(found, "Synced")["reason"] == "ReconcilePaused"
    assert control_planes(env, default_external_name(namespace)) == []
    env.local.patch(
        "instances",
        namespace,
        "myctp",
        {"metadata": {"annotations": {"crossplane.io/paused": None}}},
    )
    wait_for("the Instance Ready once unpaused", lambda: ready(env, namespace))


@pytest.mark.parametrize(
    ("policies", "reason"),
    [
        (["Create"], "a set crossplane-runtime does not support is refused"),
        (["Observe", "Create", "Bogus"], "an unknown action is refused"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_unsupported_management_policies_are_a_reconcile_error(
    env: Env, policies: list[str], reason: str
) -> None:
    namespace = fresh(env)
    body = instance(namespace, policies=policies)
    try:
        env.local.create("instances", body)
    except client.ApiException as error:
        # The CRD's enum refuses unknown actions before the provider sees them.
        assert error.status == 422, reason
        return
    found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
    assert "spec.managementPolicies" in condition(found, "Synced")["message"], reason
    assert control_planes(env, default_external_name(namespace)) == []


def test_the_restore_source_cannot_be_changed_after_creation(env: Env) -> None:
    namespace = fresh(env)
    body = instance(namespace)
    body["spec"]["forProvider"]["initialRestorationFrom"] = {"backupRef": {"name": "first"}}
    env.local.create("instances", body)
    for change in ({"backupRef": {"name": "second"}}, None):
        with pytest.raises(client.ApiException) as refused:
            env.local.patch(
                "instances",
                namespace,
                "myctp",
                {"spec": {"forProvider": {"initialRestorationFrom": change}}},
            )
        assert refused.value.status == 422
        assert "initialRestorationFrom" in str(refused.value.body)
    found = get(env, namespace)
    assert found is not None
    restore = found["spec"]["forProvider"]["initialRestorationFrom"]
    assert restore == {"backupRef": {"name": "first"}}
