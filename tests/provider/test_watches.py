"""The provider reads from watches: a steady poll sends nothing, a Ready ControlPlane wakes
its Instance at once, and restarting both API servers mid-run leaves no drift."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest

from provider.cache import Informer
from provider.configs import config_of_usage
from provider.controller import Controller
from provider.instances import PROVIDER_CONFIG_LABEL
from provider.managed.reconciler import Result
from provider.model import CLUSTER_PROVIDER_CONFIG_USAGES, CLUSTER_PROVIDER_CONFIGS, INSTANCES
from provider.runtime.queue import FakeClock, RateLimitingQueue
from sandbox.spaces import ProviderProcess, condition, wait_for
from tests.provider.conftest import Env
from tests.provider.test_instance import (
    control_planes,
    default_external_name,
    fresh,
    get,
    instance,
    ready,
)

_SAMPLE = re.compile(r"^(controlplane_provider_\w+)\{([^}]*)\} (\S+)$", re.MULTILINE)


def total(metrics: str, name: str, **labels: str) -> float:
    """The sum of a counter's samples whose labels include ``labels``."""
    found = 0.0
    for sample, label_text, value in _SAMPLE.findall(metrics):
        present = dict(re.findall(r'(\w+)="([^"]*)"', label_text))
        if sample == name and all(present.get(k) == v for k, v in labels.items()):
            found += float(value)
    return found


def requests_but_watches(metrics: str) -> float:
    """Requests the provider sent, but the long-lived watches it opened."""
    every = total(metrics, "controlplane_provider_api_requests_total")
    return every - total(metrics, "controlplane_provider_api_requests_total", verb="watch")


def polls(metrics: str) -> float:
    return total(metrics, "controlplane_provider_reconcile_total", controller="instance")


def test_a_controller_wakes_from_the_queue_it_was_given_even_while_that_is_empty() -> None:
    queue: RateLimitingQueue[tuple[str, str]] = RateLimitingQueue()
    unused: Any = None  # nothing is read before run()

    controller = Controller("instance", unused, INSTANCES, _never, queue=queue)
    queue.add(("team", "woken"))

    assert controller.queue is queue
    assert len(controller.queue) == 1


@dataclass
class CoalesceCase:
    reason: str
    coalesce: float
    usages: int
    # Keys ready at once, and after the coalescing period has passed.
    ready_at_once: int
    ready_after: int


COALESCE_CASES = [
    CoalesceCase(
        "a burst of usages of one config is one reconcile after the period, not one each",
        coalesce=1.0,
        usages=100,
        ready_at_once=0,
        ready_after=1,
    ),
    CoalesceCase(
        "without a period a usage queues its config at once",
        coalesce=0.0,
        usages=1,
        ready_at_once=1,
        ready_after=1,
    ),
]


@pytest.mark.parametrize("case", COALESCE_CASES, ids=lambda case: case.reason)
def test_a_controller_coalesces_the_keys_its_watched_kinds_map_to(case: CoalesceCase) -> None:
    clock = FakeClock()
    queue: RateLimitingQueue[tuple[str, str]] = RateLimitingQueue(clock=clock)
    unused: Any = None  # nothing is read before run()
    usages = Informer(unused, CLUSTER_PROVIDER_CONFIG_USAGES)
    Controller(
        "clusterproviderconfig",
        unused,
        CLUSTER_PROVIDER_CONFIGS,
        _never,
        queue=queue,
        also_watch=((usages, config_of_usage),),
        coalesce=case.coalesce,
    )

    for number in range(case.usages):
        # As the usages' watch hands them over.
        usages._apply("ADDED", _usage(f"u{number}", "default"))
    at_once = len(queue)
    clock.advance(case.coalesce)

    assert at_once == case.ready_at_once
    assert len(queue) == case.ready_after


def _usage(name: str, config: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "labels": {PROVIDER_CONFIG_LABEL: config},
        }
    }


async def _never(namespace: str, name: str) -> Result:
    raise AssertionError(namespace, name)


def test_a_steady_poll_of_unchanged_instances_sends_no_request(env: Env) -> None:
    namespace = fresh(env, "steady")
    names = [f"ctp-{index}" for index in range(3)]
    for name in names:
        env.local.create("instances", instance(namespace, name))
    for name in names:
        wait_for(f"{name} Ready", partial(ready, env, namespace, name))
    # Let the last writes of creation settle into polls (the provider polls every 2s).
    settled = polls(env.provider.metrics())
    wait_for("every Instance polled again", lambda: polls(env.provider.metrics()) >= settled + 6)
    before = env.provider.metrics()
    wait_for(
        "three more polls of every Instance",
        lambda: polls(env.provider.metrics()) >= polls(before) + 9,
    )
    after = env.provider.metrics()

    assert requests_but_watches(after) == requests_but_watches(before)


def test_a_new_instance_creates_its_connection_secret_without_reading_it_first(
    env: Env,
) -> None:
    namespace = fresh(env, "secret")
    before = env.provider.metrics()

    env.local.create("instances", instance(namespace))
    wait_for("Ready", lambda: ready(env, namespace))
    wait_for("the connection secret", lambda: env.local.secret(namespace, "myctp-kubeconfig"))
    after = env.provider.metrics()

    def secrets(metrics: str, verb: str) -> float:
        return total(
            metrics, "controlplane_provider_api_requests_total", verb=verb, resource="secrets"
        )

    # The cache of labelled secrets cannot say that an unlabelled one is absent:
    # the secret is created, and read only if one exists after all.
    assert secrets(after, "post") > secrets(before, "post")
    assert secrets(after, "get") == secrets(before, "get")


@pytest.fixture
def slow_poll(env: Env) -> Iterator[ProviderProcess]:
    """The provider polling every hour instead of every 2s; the usual one after."""
    env.provider.stop()
    process = ProviderProcess(
        env.provider.kubeconfig, env.provider.log_path, "--poll", "1h"
    ).start()
    try:
        yield process
    finally:
        process.stop()
        env.provider.start()


def test_a_control_plane_turning_ready_wakes_its_instance_at_once(
    env: Env, slow_poll: ProviderProcess
) -> None:
    namespace = fresh(env, "wake")
    env.simulator.ready.clear()
    try:
        env.local.create("instances", instance(namespace))
        wait_for(
            "the Instance seen not Ready yet",
            lambda: condition(get(env, namespace), "Ready").get("reason") == "Unavailable",
        )
    finally:
        env.simulator.ready.set()
    # The next poll is an hour away: only the ControlPlane's watch can wake it.
    try:
        wait_for("Ready", lambda: ready(env, namespace), timeout=30)
    except AssertionError as error:
        found = control_planes(env, default_external_name(namespace))
        seen = [condition(cp, "Ready") for cp in found]
        msg = f"{error}; the ControlPlanes' Ready: {seen}; the Instance: {get(env, namespace)}"
        raise AssertionError(msg) from None
    assert slow_poll.alive()


def test_restarting_both_api_servers_mid_run_leaves_no_drift(env: Env) -> None:
    namespace = fresh(env, "restart")
    names = [f"ctp-{index}" for index in range(4)]
    env.simulator.ready.clear()
    try:
        for name in names[:2]:
            env.local.create("instances", instance(namespace, name))
        wait_for(
            "a ControlPlane made",
            lambda: control_planes(env, default_external_name(namespace, names[0])),
        )
        env.local.server.stop()
        env.space.server.stop()
        env.local.server.start()
        env.space.server.start()
        for name in names[2:]:
            env.local.create("instances", instance(namespace, name))
    finally:
        env.simulator.ready.set()
    for name in names:
        wait_for(f"{name} Ready", partial(ready, env, namespace, name), timeout=120)
        assert len(control_planes(env, default_external_name(namespace, name))) == 1

    # The caches follow both servers again: a change and a deletion made now are acted on.
    env.local.patch("instances", namespace, names[0], {"spec": {"forProvider": {"class": "big"}}})
    changed = default_external_name(namespace, names[0])
    wait_for(
        "the new class in the Space",
        lambda: [cp["spec"].get("class") for cp in control_planes(env, changed)] == ["big"],
    )
    env.local.delete("instances", namespace, names[1])
    gone = default_external_name(namespace, names[1])
    wait_for("the ControlPlane deleted", lambda: control_planes(env, gone) == [])
    wait_for("the Instance gone", lambda: get(env, namespace, names[1]) is None)
    assert env.provider.alive()
