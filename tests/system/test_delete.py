"""Deleting a ControlPlane: Usages order it, the Space takes its time, Flux's work is orphaned,
nothing is left."""

from __future__ import annotations

import time
from typing import Any

from sandbox.platform import Platform
from sandbox.spaces import wait_for

from .helpers import (
    GIT_REPOSITORY,
    INSTANCE,
    KUSTOMIZATION,
    SPACE_CONTROLPLANE,
    UP_DEADLINE,
    XR,
    GoneTimes,
    configmap,
    configmap_value,
    controlplane,
    create,
    get,
    hosted_name,
    unique,
    wait_ready,
)

USAGE = ("protection.crossplane.io", "v1beta1", "usages")


def items(platform: Platform, kind: tuple[str, str, str], namespace: str) -> list[Any]:
    group, version, plural = kind
    return platform.kube.list_of(plural, namespace, group, version)


def test_deleting_a_controlplane_removes_the_team_in_order_and_orphans_what_flux_synced(
    platform: Platform,
) -> None:
    namespace, name = unique("leaving"), "ctp"
    repository = platform.git.repository(namespace)
    repository.commit({"app/kept.yaml": configmap("kept", "synced")}, "first")
    platform.kube.namespace(namespace)
    create(platform.kube, XR, controlplane(namespace, name, repository.url))
    wait_ready(platform, XR, namespace, name)
    hosted = hosted_name(platform, namespace, name)
    assert configmap_value(platform, hosted, "kept") == "synced"
    # While both ends are composed, Usages protect the Instance from going first.
    assert items(platform, USAGE, namespace), "no Usage was composed"

    space_group = "default"
    watcher = GoneTimes(
        platform,
        namespace,
        {
            "kustomization": (KUSTOMIZATION, name),
            "gitrepository": (GIT_REPOSITORY, name),
            "instance": (INSTANCE, name),
            "composite": (XR, name),
        },
        in_space={"space controlplane": (SPACE_CONTROLPLANE, space_group, hosted)},
        # Asked while the control plane still serves: Flux prunes before it lets go.
        read_when_gone={"kustomization": lambda: configmap_value(platform, hosted, "kept")},
    )
    with watcher:
        group, version, plural = XR
        deleted_at = time.time()
        platform.kube.delete(plural, namespace, name, group, version)
        wait_for(
            "the composite and everything it composed gone",
            lambda: (
                get(platform.kube, XR, namespace, name) is None
                and len(watcher.gone) == len(watcher.watched)
            ),
            timeout=UP_DEADLINE,
        )
    assert watcher.gone["kustomization"] <= watcher.gone["instance"], watcher.gone
    # The provider deleted the Space's ControlPlane, and the Space took its time
    # (``deletion_delay``): the Instance went only after it. The composite itself
    # goes at once (a plain delete lets the garbage collector delete what it
    # composed in the background).
    gone = watcher.gone
    assert gone["space controlplane"] <= gone["instance"], gone
    assert gone["space controlplane"] - deleted_at >= platform.deletion_delay, gone
    # The Space deleted the connection secret it wrote, and the front's route with it.
    assert platform.space.secret(space_group, f"kubeconfig-{hosted}") is None
    # ... Flux let go of what it applied (deletionPolicy Orphan) ...
    assert watcher.read["kustomization"] == "synced", watcher.read
    # ... and the control plane stopped with its ControlPlane, as a Space's does.
    assert hosted not in platform.hosted
    # ... and nothing of the team is left in the management cluster.
    wait_for(
        "no Usage, Instance, Flux object or kubeconfig secret of the team left",
        lambda: (
            not any(
                items(platform, kind, namespace)
                for kind in (USAGE, INSTANCE, KUSTOMIZATION, GIT_REPOSITORY, XR)
            )
            and platform.kube.secret(namespace, f"{name}-kubeconfig") is None
        ),
        timeout=UP_DEADLINE,
    )


def test_a_foreground_delete_keeps_the_composite_until_the_space_has_deleted_its_controlplane(
    platform: Platform,
) -> None:
    """What Argo CD and ``kubectl delete --cascade=foreground`` do: the composite waits.

    The garbage collector lets each owner go only after its blocking dependents:
    the composite after its Instance, the Instance after its connection secret
    and usage. A dependent it cannot collect (a cluster-scoped usage owned by the
    namespaced Instance, as the provider once wrote) holds the deletion for ever.
    """
    namespace, name = unique("foreground"), "ctp"
    repository = platform.git.repository(namespace)
    repository.commit({"app/kept.yaml": configmap("kept", "synced")}, "first")
    platform.kube.namespace(namespace)
    create(platform.kube, XR, controlplane(namespace, name, repository.url))
    wait_ready(platform, XR, namespace, name)
    hosted = hosted_name(platform, namespace, name)
    watcher = GoneTimes(
        platform,
        namespace,
        {"instance": (INSTANCE, name), "composite": (XR, name)},
        in_space={"space controlplane": (SPACE_CONTROLPLANE, "default", hosted)},
    )
    with watcher:
        group, version, plural = XR
        platform.kube.custom.delete_namespaced_custom_object(
            group, version, namespace, plural, name, propagation_policy="Foreground"
        )
        wait_for(
            "the composite, its Instance and the Space's ControlPlane gone",
            lambda: len(watcher.gone) == len(watcher.watched),
            timeout=UP_DEADLINE,
        )
    gone = watcher.gone
    assert gone["space controlplane"] <= gone["instance"] <= gone["composite"], gone
