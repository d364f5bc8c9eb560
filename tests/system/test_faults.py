"""Faults: the function away for a while, the provider killed mid-create, a bad composite."""

from __future__ import annotations

from typing import Any

from sandbox.platform import Platform
from sandbox.spaces import condition, wait_for

from .helpers import (
    INSTANCE,
    SPACE_CONTROLPLANE,
    SYNC_DEADLINE,
    UP_DEADLINE,
    XR,
    bare,
    create,
    get,
    hosted_name,
    is_true,
    unique,
    wait_ready,
)

# Core waits this long for a function that does not answer before it gives up.
FUNCTION_CALL_DEADLINE = 120.0


def synced(platform: Platform, namespace: str, name: str) -> dict[str, Any]:
    return condition(get(platform.kube, XR, namespace, name), "Synced")


def test_while_the_function_is_down_composites_keep_what_they_have_and_converge_after(
    platform: Platform,
) -> None:
    namespace = unique("fn-down")
    platform.kube.namespace(namespace)
    create(platform.kube, XR, bare(namespace, "before"))
    wait_ready(platform, XR, namespace, "before")
    platform.function.stop()
    try:
        # A composite made while the function is away is not composed, and says why,
        # once core's call has waited out its deadline for the function (two minutes).
        create(platform.kube, XR, bare(namespace, "during"))
        wait_for(
            "the new composite to report that the pipeline failed",
            lambda: (
                "cannot run Function" in synced(platform, namespace, "during").get("message", "")
            ),
            timeout=FUNCTION_CALL_DEADLINE + SYNC_DEADLINE,
        )
        assert get(platform.kube, INSTANCE, namespace, "during") is None
        # The one composed before keeps its Instance, Ready.
        assert is_true(get(platform.kube, INSTANCE, namespace, "before"), "Ready")
    finally:
        platform.function.start()
    wait_ready(platform, XR, namespace, "during")
    assert is_true(get(platform.kube, XR, namespace, "before"), "Ready")


def test_a_provider_killed_mid_create_leaves_exactly_one_controlplane_in_the_space(
    platform: Platform,
) -> None:
    namespace = unique("killed")
    platform.kube.namespace(namespace)
    create(platform.kube, XR, bare(namespace, "ctp"))
    # Killed once core has composed the Instance: the provider is at its create.
    wait_for(
        "the composed Instance",
        lambda: get(platform.kube, INSTANCE, namespace, "ctp"),
        timeout=UP_DEADLINE,
    )
    platform.provider.kill()
    platform.provider.start()
    wait_ready(platform, XR, namespace, "ctp")
    group, version, plural = SPACE_CONTROLPLANE
    made = [
        cp["metadata"]["name"]
        for cp in platform.space.list_of(plural, "default", group, version)
        if cp["metadata"]["name"].startswith(namespace)
    ]
    assert made == [hosted_name(platform, namespace, "ctp")]


def test_a_bad_composite_gets_the_functions_fatal_message_in_its_conditions(
    platform: Platform,
) -> None:
    namespace = unique("bad")
    platform.kube.namespace(namespace)
    # The XRD's pattern admits it; the cron rules of the function do not (minute 61).
    create(platform.kube, XR, bare(namespace, "ctp", backup={"schedule": "61 * * * *"}))
    wait_for(
        "the Fatal result in the composite's Synced condition",
        lambda: "spec.backup.schedule" in synced(platform, namespace, "ctp").get("message", ""),
        timeout=SYNC_DEADLINE,
    )
    assert synced(platform, namespace, "ctp")["status"] == "False"
    assert get(platform.kube, INSTANCE, namespace, "ctp") is None
