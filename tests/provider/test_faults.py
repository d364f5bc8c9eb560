"""Bad input and faults: each ends in Synced=False with a clear message, then recovers."""

from __future__ import annotations

import asyncio
import contextlib
import re
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
import yaml

from provider.instances import InstanceAPI
from provider.kube import Cluster
from provider.managed.reconciler import Reconciler
from provider.spaces.backend import SpacesClient, SpacesConnector
from sandbox.apiserver import free_port
from sandbox.spaces import PROVIDER_CRDS, Kube, condition, wait_for
from tests.provider.conftest import (
    PROVIDER_NAMESPACE,
    SPACE_GROUP,
    SPACE_SECRET,
    Env,
    cluster_provider_config,
    provider_config,
)
from tests.provider.test_instance import (
    control_planes,
    default_external_name,
    fresh,
    instance,
    ready,
    synced,
)

# A value that must never surface in a status, an event or a log.
CANARY = "canary-token-7f3e9a1c"


def unreachable_kubeconfig() -> str:
    port = free_port()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gone",
                    # No CA: nothing answers on the port, so no TLS is ever checked.
                    "cluster": {"server": f"https://127.0.0.1:{port}"},
                }
            ],
            "users": [{"name": "gone", "user": {"token": CANARY}}],
            "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone"}}],
            "current-context": "gone",
        }
    )


@dataclass
class FaultCase:
    reason: str
    secret: bytes | None  # None: the provider config names a secret that does not exist
    message: str
    stage: str = "connect failed"
    event: str = "CannotConnectToProvider"


FAULT_CASES = [
    FaultCase(
        "A missing kubeconfig secret is named, and nothing else is said.",
        None,
        "not found",
    ),
    FaultCase(
        "A malformed kubeconfig is refused without quoting it.",
        f"clusters: [{CANARY}\n  - not yaml: [".encode(),
        "is not a valid kubeconfig",
    ),
    FaultCase(
        "A kubeconfig that is YAML but no kubeconfig is refused without quoting it.",
        f"token: {CANARY}\n".encode(),
        "is not a valid kubeconfig",
    ),
    FaultCase(
        "An unreachable Space is reported as such, without the credentials.",
        unreachable_kubeconfig().encode(),
        "cannot reach",
        stage="observe failed",
        event="CannotObserveExternalResource",
    ),
]


@pytest.mark.parametrize("case", FAULT_CASES, ids=lambda case: case.reason)
def test_a_broken_provider_config_is_a_clear_error_and_recovers_once_fixed(
    env: Env, case: FaultCase
) -> None:
    namespace = fresh(env, "fault")
    config_name = f"config-{namespace}"
    secret_name = f"secret-{namespace}"
    env.local.create("clusterproviderconfigs", cluster_provider_config(config_name, secret_name))
    if case.secret is not None:
        env.local.put_secret(PROVIDER_NAMESPACE, secret_name, {"kubeconfig": case.secret})
    env.local.create(
        "instances",
        instance(namespace, provider_config={"kind": "ClusterProviderConfig", "name": config_name}),
    )
    found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
    message = condition(found, "Synced")["message"]
    assert message.startswith(f"{case.stage}: "), message
    assert case.message in message, message
    assert CANARY not in yaml.safe_dump(found)
    events = env.local.events(namespace, "myctp")
    assert any(e["reason"] == case.event for e in events)
    assert all(CANARY not in yaml.safe_dump(e) for e in events)
    assert env.provider.alive()

    env.local.put_secret(
        PROVIDER_NAMESPACE, secret_name, {"kubeconfig": env.space.server.kubeconfig.encode()}
    )
    wait_for("recovery once the secret is fixed", lambda: ready(env, namespace))
    assert len(control_planes(env, default_external_name(namespace))) == 1
    assert CANARY not in env.provider.log()


def test_a_missing_provider_config_is_a_clear_error_and_recovers_once_created(env: Env) -> None:
    namespace = fresh(env, "fault")
    name = f"later-{namespace}"
    env.local.create(
        "instances",
        instance(namespace, provider_config={"kind": "ClusterProviderConfig", "name": name}),
    )
    found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
    assert (
        condition(found, "Synced")["message"]
        == f"connect failed: cannot get ClusterProviderConfig {name}: not found"
    )
    env.local.create("clusterproviderconfigs", cluster_provider_config(name))
    wait_for("recovery once the config exists", lambda: ready(env, namespace))


def test_a_namespaced_provider_config_may_not_read_another_namespaces_secret(env: Env) -> None:
    namespace = fresh(env, "fault")
    # The Space's Secret is in the provider's namespace, not the config's.
    config = provider_config("borrowing", namespace, SPACE_SECRET, PROVIDER_NAMESPACE)
    env.local.create("providerconfigs", config)
    env.local.create(
        "instances",
        instance(namespace, provider_config={"kind": "ProviderConfig", "name": "borrowing"}),
    )
    found = wait_for("Synced=False", lambda: synced(env, namespace, status="False"))
    assert "must be" in condition(found, "Synced")["message"]
    assert control_planes(env, default_external_name(namespace)) == []


def test_failures_back_off_instead_of_hammering(env: Env) -> None:
    namespace = fresh(env, "fault")
    name = f"never-{namespace}"
    env.local.create(
        "instances",
        instance(namespace, provider_config={"kind": "ClusterProviderConfig", "name": name}),
    )
    wait_for("Synced=False", lambda: synced(env, namespace, status="False"))

    def count() -> int:
        events = [
            e
            for e in env.local.events(namespace, "myctp")
            if e["reason"] == "CannotConnectToProvider"
        ]
        return sum(int(e.get("count") or 1) for e in events)

    first = count()
    wait_for("a few retries", lambda: count() >= first + 3, timeout=30)
    # Backoff doubles from 1s: 3 more tries take at least 1+2+4 seconds, so
    # within that time there cannot have been dozens.
    assert count() < first + 10


RECOVERY_SECONDS = 240


def test_a_control_plane_deleted_behind_our_back_is_made_again_once(env: Env) -> None:
    namespace = fresh(env, "fault")
    env.local.create("instances", instance(namespace))
    wait_for("Ready", lambda: ready(env, namespace))
    external = default_external_name(namespace)
    [deleted] = control_planes(env, external)
    env.space.delete("controlplanes", SPACE_GROUP, external, "spaces.upbound.io", "v1beta1")

    def made_again() -> bool:
        found = control_planes(env, external)
        # The Space deletes behind its finalizer: the old one may linger a moment.
        return [cp["metadata"]["uid"] != deleted["metadata"]["uid"] for cp in found] == [True]

    # It was created moments ago, so the reconciler first waits out its creation
    # grace period (30 s, crossplane-runtime's: a fresh create may not be observable
    # yet) before it believes the ControlPlane gone; loaded machines add to that.
    wait_for("the ControlPlane made again", made_again, timeout=RECOVERY_SECONDS)
    wait_for("Ready again", lambda: ready(env, namespace), timeout=RECOVERY_SECONDS)
    assert made_again()


def test_the_provider_survives_an_api_server_restart(env: Env) -> None:
    namespace = fresh(env, "fault")
    env.local.create("instances", instance(namespace, "before"))
    wait_for("Ready", lambda: ready(env, namespace, "before"))
    env.local.server.stop()
    env.local.server.start()
    env.local.create("instances", instance(namespace, "after"))
    wait_for("the new Instance Ready", lambda: ready(env, namespace, "after"), timeout=120)
    assert env.provider.alive()
    assert len(control_planes(env, default_external_name(namespace, "before"))) == 1
    assert len(control_planes(env, default_external_name(namespace, "after"))) == 1


def test_the_provider_killed_at_any_moment_never_makes_two_control_planes(env: Env) -> None:
    namespace = fresh(env, "kill")
    env.simulator.ready.clear()
    try:
        for index in range(3):
            env.local.create("instances", instance(namespace, f"ctp-{index}"))
        # Kill the provider as soon as the first ControlPlane exists: its
        # creates are in flight, some recorded and some not.
        wait_for(
            "a ControlPlane",
            lambda: control_planes(env, default_external_name(namespace, "ctp-0")),
            timeout=60,
        )
        env.provider.kill()
    finally:
        env.simulator.ready.set()
    env.provider.start()
    for index in range(3):
        wait_for(f"ctp-{index} Ready", partial(ready, env, namespace, f"ctp-{index}"))
        assert len(control_planes(env, default_external_name(namespace, f"ctp-{index}"))) == 1


class _DiesAfterCreate(SpacesConnector):
    """Connects as usual, but the process 'dies' right after a create reaches the Space."""

    async def connect(self, managed: dict[str, Any]) -> SpacesClient:
        real = await super().connect(managed)

        class Dying(SpacesClient):
            async def create(self, managed: dict[str, Any]) -> Any:
                await super().create(managed)
                raise asyncio.CancelledError  # nothing after the call runs

        return Dying(real.space, real.group)


def test_a_crash_between_create_and_its_record_never_creates_twice(env: Env) -> None:
    local = Kube(env.factory(name="crash"))
    local.apply_crds(PROVIDER_CRDS)
    local.namespace(PROVIDER_NAMESPACE)
    local.namespace("team-crash")
    local.put_secret(
        PROVIDER_NAMESPACE, SPACE_SECRET, {"kubeconfig": env.space.server.kubeconfig.encode()}
    )
    local.create("clusterproviderconfigs", cluster_provider_config())
    local.create("instances", instance("team-crash"))

    async def reconcile(connector_type: type[SpacesConnector]) -> Any:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
        connector = connector_type(cluster)
        reconciler = Reconciler(InstanceAPI(cluster), connector, deterministic_external_name=True)
        try:
            return await reconciler.reconcile("team-crash", "myctp")
        finally:
            await connector.close()
            await cluster.close()

    with contextlib.suppress(asyncio.CancelledError):
        asyncio.run(reconcile(_DiesAfterCreate))
    found = local.get("instances", "team-crash", "myctp")
    annotations = (found or {})["metadata"]["annotations"]
    assert "crossplane.io/external-create-pending" in annotations
    assert "crossplane.io/external-create-succeeded" not in annotations
    assert len(control_planes(env, default_external_name("team-crash"))) == 1

    for _ in range(3):
        asyncio.run(reconcile(SpacesConnector))
    assert len(control_planes(env, default_external_name("team-crash"))) == 1
    found = wait_for("Ready", lambda: _ready_after(local, env))
    assert condition(found, "Synced")["reason"] == "ReconcileSuccess"


def _ready_after(local: Kube, env: Env) -> dict[str, Any] | None:
    """Reconcile once more (the simulator marks the ControlPlane Ready meanwhile)."""
    found = local.get("instances", "team-crash", "myctp")
    if condition(found, "Ready").get("status") == "True":
        return found
    cluster_kubeconfig = yaml.safe_load(local.server.kubeconfig)

    async def again() -> None:
        cluster = await Cluster.from_kubeconfig(cluster_kubeconfig)
        connector = SpacesConnector(cluster)
        try:
            await Reconciler(
                InstanceAPI(cluster), connector, deterministic_external_name=True
            ).reconcile("team-crash", "myctp")
        finally:
            await connector.close()
            await cluster.close()

    asyncio.run(again())
    return None


def test_a_provider_config_in_use_is_kept_until_its_users_are_gone(env: Env) -> None:
    namespace = fresh(env, "pc")
    name = f"shared-{namespace}"
    env.local.create("clusterproviderconfigs", cluster_provider_config(name))
    env.local.create(
        "instances",
        instance(namespace, provider_config={"kind": "ClusterProviderConfig", "name": name}),
    )
    wait_for("Ready", lambda: ready(env, namespace))
    wait_for(
        "one user counted",
        lambda: (
            (env.local.get("clusterproviderconfigs", None, name) or {})
            .get("status", {})
            .get("users")
            == 1
        ),
    )
    env.local.delete("clusterproviderconfigs", None, name)
    config = env.local.get("clusterproviderconfigs", None, name)
    assert config is not None and config["metadata"].get("deletionTimestamp")
    assert "in-use.crossplane.io" in config["metadata"]["finalizers"]
    env.local.delete("instances", namespace, "myctp")
    wait_for(
        "the config gone with its last user",
        lambda: env.local.get("clusterproviderconfigs", None, name) is None,
    )


def test_no_secret_reaches_the_provider_log(env: Env) -> None:
    log = env.provider.log()
    assert log, "the provider logs something"
    for line in log.splitlines():
        assert "BEGIN" not in line
        assert CANARY not in line
    key = yaml.safe_load(env.hosted.kubeconfig)["users"][0]["user"]["client-key-data"]
    assert key not in log
    assert not re.search(r"client-key-data", log)
