"""Reads that never go stale: a Space the provider may list but not watch, or not read at all.

The provider runs as a process against a real Space API server with RBAC; its
identity there is a ServiceAccount token bound to a Role, as an operator of a
self-hosted Space sets it up.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.spaces import condition, provider_role, service_account_kubeconfig, wait_for
from tests.provider.conftest import PROVIDER_NAMESPACE, Env
from tests.provider.test_instance import fresh, instance

_groups = itertools.count(1)


def space_config(env: Env, *, watch: bool, read: bool) -> tuple[str, str]:
    """A ClusterProviderConfig of a new group, reached with a Role as asked; (config, group)."""
    group = f"reads-{next(_groups)}"
    text = service_account_kubeconfig(
        env.space, group, "provider", provider_role(group, watch=watch, read=read)
    )
    env.local.put_secret(PROVIDER_NAMESPACE, f"space-{group}", {"kubeconfig": text.encode()})
    env.local.create(
        "clusterproviderconfigs",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "ClusterProviderConfig",
            "metadata": {"name": group},
            "spec": {
                "spaces": {
                    "namespace": group,
                    "credentials": {
                        "source": "Secret",
                        "secretRef": {
                            "namespace": PROVIDER_NAMESPACE,
                            "name": f"space-{group}",
                            "key": "kubeconfig",
                        },
                    },
                }
            },
        },
    )
    return group, group


@dataclass(frozen=True)
class ReadCase:
    reason: str
    watch: bool
    read: bool
    ready: bool
    said: str = ""


READ_CASES = [
    ReadCase(
        "A Role that grants list but not watch: the Space is listed every poll, and the "
        "Instance comes up.",
        watch=False,
        read=True,
        ready=True,
    ),
    ReadCase(
        "A Role that grants neither get nor list: the Instance is Synced=False naming "
        "what it cannot read.",
        watch=False,
        read=False,
        ready=False,
        said="controlplanes",
    ),
]


@pytest.mark.parametrize("case", READ_CASES, ids=lambda case: case.reason)
def test_what_the_provider_may_read_of_a_space_decides_and_is_said(
    env: Env, case: ReadCase
) -> None:
    config, group = space_config(env, watch=case.watch, read=case.read)
    namespace = fresh(env, "reads")
    env.local.create(
        "instances",
        instance(namespace, provider_config={"kind": "ClusterProviderConfig", "name": config}),
    )
    if case.ready:
        found = wait_for("the Instance Ready", lambda: ready(env, namespace))
        assert condition(found, "Synced")["status"] == "True"
        control_planes = env.space.list_of("controlplanes", group, "spaces.upbound.io", "v1beta1")
        assert len(control_planes) == 1
        assert "watch refused" in env.provider.log()
        return
    synced = wait_for("the Instance Synced=False", lambda: not_synced(env, namespace))
    assert case.said in synced["message"], synced
    assert "403" in synced["message"], synced


def ready(env: Env, namespace: str) -> dict[str, Any] | None:
    found = env.local.get("instances", namespace, "myctp")
    return found if condition(found, "Ready").get("status") == "True" else None


def not_synced(env: Env, namespace: str) -> dict[str, Any] | None:
    synced = condition(env.local.get("instances", namespace, "myctp"), "Synced")
    return synced if synced.get("status") == "False" else None
