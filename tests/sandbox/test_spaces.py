"""The Spaces simulator with its front: connection secrets, rotation, deletion, CrossplaneRunning.

One Space API server and one hosted API server for the module, one simulator
with a front over them; each test has ControlPlanes of its own names.
"""

from __future__ import annotations

import base64
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from provider import kubeconfig as kubeconfig_allowlist
from sandbox.apiserver import APIServer, APIServerFactory, Etcd
from sandbox.spacefront import SpaceFront, server_url
from sandbox.spaces import (
    FINALIZER,
    SPACES_CRD,
    SPACES_GROUP,
    SPACES_VERSION,
    Kube,
    SpacesSimulator,
    condition,
    wait_for,
)

GROUP = "team-group"
DELETION_DELAY = 2.0
_names = itertools.count(1)


@dataclass
class World:
    space: Kube
    hosted: APIServer
    front: SpaceFront
    simulator: SpacesSimulator
    running: set[str] = field(default_factory=set)


@pytest.fixture(scope="module")
def world(kube_etcd: Etcd) -> Iterator[World]:
    with APIServerFactory(kube_etcd) as factory:
        space = Kube(factory(name="space"))
        space.apply_crds(SPACES_CRD)
        space.namespace(GROUP)
        hosted = factory(name="hosted")
        running: set[str] = set()
        with (
            SpaceFront() as front,
            SpacesSimulator(
                space,
                hosted,
                front=front,
                deletion_delay=DELETION_DELAY,
                crossplane_running=running.__contains__,
            ) as simulator,
        ):
            yield World(space, hosted, front, simulator, running)


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def create(space: Kube, name: str, secret: str | None) -> None:
    spec: dict[str, Any] = {"crossplane": {"autoUpgrade": {"channel": "Stable"}}}
    if secret is not None:
        # No namespace: a Space defaults it to the ControlPlane's.
        spec["writeConnectionSecretToRef"] = {"name": secret}
    space.create(
        "controlplanes",
        {
            "apiVersion": f"{SPACES_GROUP}/{SPACES_VERSION}",
            "kind": "ControlPlane",
            "metadata": {"name": name, "namespace": GROUP},
            "spec": spec,
        },
        SPACES_GROUP,
        SPACES_VERSION,
    )


def control_plane(space: Kube, name: str) -> dict[str, Any] | None:
    return space.get("controlplanes", GROUP, name, SPACES_GROUP, SPACES_VERSION)


def ready(space: Kube, name: str) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = control_plane(space, name)
        return found if condition(found, "Ready").get("status") == "True" else None

    return wait_for(f"ControlPlane {name} Ready", probe)


def kubeconfig_in(world: World, secret: str, key: str = "kubeconfig") -> str | None:
    found = world.space.secret(GROUP, secret)
    if found is None:
        return None
    return base64.b64decode(found["data"][key]).decode()


def namespaces_through(kubeconfig: str) -> set[str]:
    api: Any = config.new_client_from_config_dict(yaml.safe_load(kubeconfig))  # type: ignore[no-untyped-call]
    core: Any = client.CoreV1Api(api)
    return {str(ns.metadata.name) for ns in core.list_namespace().items}


def status_through(kubeconfig: str) -> int:
    """The HTTP status of listing namespaces with ``kubeconfig``."""
    try:
        namespaces_through(kubeconfig)
    except ApiException as error:
        return int(error.status)
    return 200


def test_the_connection_secret_is_the_fronts_bearer_token_kubeconfig_under_both_keys(
    world: World,
) -> None:
    name = unique("ctp")
    create(world.space, name, f"kubeconfig-{name}")
    ready(world.space, name)
    secret = world.space.secret(GROUP, f"kubeconfig-{name}")
    assert secret is not None
    assert set(secret["data"]) == {"kubeconfig", "kubeconfig-incluster"}
    for key in secret["data"]:
        text = kubeconfig_in(world, f"kubeconfig-{name}", key)
        assert text is not None
        found = kubeconfig_allowlist.parse(yaml.safe_load(text))
        assert found.server == server_url(world.front.url, GROUP, name)
        assert found.token
        assert found.client_certificate_pem is None
        assert found.ca_pem == world.front.ca_pem.decode()
    mark = unique("only-in-hosted")
    Kube(world.hosted).namespace(mark)
    text = kubeconfig_in(world, f"kubeconfig-{name}")
    assert text is not None
    assert mark in namespaces_through(text)


def test_a_control_plane_that_names_no_secret_gets_none(world: World) -> None:
    name = unique("ctp")
    create(world.space, name, None)
    ready(world.space, name)
    assert world.space.secret(GROUP, f"kubeconfig-{name}") is None


def test_a_rotated_token_rewrites_the_secret_and_the_old_one_is_refused(world: World) -> None:
    name = unique("ctp")
    create(world.space, name, f"kubeconfig-{name}")
    ready(world.space, name)
    old = kubeconfig_in(world, f"kubeconfig-{name}")
    assert old is not None
    assert world.simulator.rotate_token(GROUP, name) == (GROUP, f"kubeconfig-{name}")
    new = kubeconfig_in(world, f"kubeconfig-{name}")
    assert new is not None
    assert kubeconfig_allowlist.parse(yaml.safe_load(new)).token != (
        kubeconfig_allowlist.parse(yaml.safe_load(old)).token
    )
    assert status_through(old) == 401
    assert status_through(new) == 200


def test_a_rotated_ca_rewrites_every_secret(world: World) -> None:
    names = [unique("ctp"), unique("ctp")]
    for name in names:
        create(world.space, name, f"kubeconfig-{name}")
    for name in names:
        ready(world.space, name)
    rewritten = world.simulator.rotate_ca()
    for name in names:
        assert (GROUP, f"kubeconfig-{name}") in rewritten
        text = kubeconfig_in(world, f"kubeconfig-{name}")
        assert text is not None
        assert kubeconfig_allowlist.parse(yaml.safe_load(text)).ca_pem == (
            world.front.ca_pem.decode()
        )
        assert status_through(text) == 200


def test_deletion_says_deleting_answers_503_then_removes_the_secret_the_route_and_itself(
    world: World,
) -> None:
    name = unique("ctp")
    create(world.space, name, f"kubeconfig-{name}")
    found = ready(world.space, name)
    assert FINALIZER in found["metadata"]["finalizers"]
    kubeconfig = kubeconfig_in(world, f"kubeconfig-{name}")
    assert kubeconfig is not None
    started = time.monotonic()
    world.space.delete("controlplanes", GROUP, name, SPACES_GROUP, SPACES_VERSION)
    held = control_plane(world.space, name)
    assert held is not None
    assert held["metadata"].get("deletionTimestamp")
    deleting = wait_for(
        f"ControlPlane {name} Ready=False, Deleting",
        lambda: (
            condition(control_plane(world.space, name), "Ready").get("reason") == "Deleting"
            and control_plane(world.space, name)
        ),
    )
    assert condition(deleting, "Ready")["status"] == "False"
    assert world.space.secret(GROUP, f"kubeconfig-{name}") is not None
    # Its API answers 503 before the finalizer goes, as a control plane being torn down.
    assert status_through(kubeconfig) == 503
    wait_for(f"ControlPlane {name} gone", lambda: control_plane(world.space, name) is None)
    assert time.monotonic() - started >= DELETION_DELAY
    assert world.space.secret(GROUP, f"kubeconfig-{name}") is None
    assert status_through(kubeconfig) == 404


def test_crossplane_running_is_true_only_once_crossplane_runs_there(world: World) -> None:
    name = unique("ctp")
    create(world.space, name, f"kubeconfig-{name}")
    found = ready(world.space, name)
    assert condition(found, "CrossplaneRunning") | {"lastTransitionTime": None} == {
        "type": "CrossplaneRunning",
        "status": "False",
        "reason": "Starting",
        "message": "The crossplane and provider workloads are being started",
        "lastTransitionTime": None,
    }
    world.running.add(name)
    world.simulator.refresh()

    def started() -> dict[str, Any] | None:
        found = control_plane(world.space, name)
        return found if condition(found, "CrossplaneRunning").get("reason") == "Started" else None

    assert condition(wait_for("CrossplaneRunning", started), "CrossplaneRunning")["status"] == (
        "True"
    )


def test_publishing_a_control_plane_again_keeps_the_token_its_secret_holds(world: World) -> None:
    # Four workers answer a shared hosted server; two holding copies of one ControlPlane
    # from before and after it was published both reach the publishing step.
    name = unique("ctp")
    create(world.space, name, f"kubeconfig-{name}")
    found = ready(world.space, name)
    written = kubeconfig_in(world, f"kubeconfig-{name}")
    world.simulator._publish(found, (GROUP, f"kubeconfig-{name}"))
    assert kubeconfig_in(world, f"kubeconfig-{name}") == written
    assert written is not None
    assert status_through(written) == 200


def test_a_deleted_control_plane_releases_its_own_api_server_and_no_other(kube_etcd: Etcd) -> None:
    # A Space deletes the control plane with its ControlPlane: with one API server per
    # ControlPlane, the deleted one's is handed back to be stopped, the other's keeps serving.
    released: list[APIServer] = []

    def release(server: APIServer) -> None:
        released.append(server)
        server.stop()

    with APIServerFactory(kube_etcd) as factory:
        space = Kube(factory(name="space"))
        space.apply_crds(SPACES_CRD)
        space.namespace(GROUP)
        servers: dict[str, APIServer] = {}

        def hosted(name: str) -> APIServer:
            servers[name] = factory(name=name)
            return servers[name]

        with SpacesSimulator(space, hosted, release=release):
            leaving, staying = unique("ctp"), unique("ctp")
            for name in (leaving, staying):
                create(space, name, f"kubeconfig-{name}")
                ready(space, name)
            assert released == []
            space.delete("controlplanes", GROUP, leaving, SPACES_GROUP, SPACES_VERSION)
            wait_for(f"ControlPlane {leaving} gone", lambda: control_plane(space, leaving) is None)
            wait_for("its API server released", lambda: released)
            assert released == [servers[leaving]]
            assert not servers[leaving].ready()
            assert servers[staying].ready()
