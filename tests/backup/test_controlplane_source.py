"""Where a Backup, and the provider, take a control plane's kubeconfig from, on real servers.

The backup controller reads only the connection secret the provider wrote for
the Instance, and connects only to a host the operator allows (by default the
host of the Instance's Space); the provider copies a ControlPlane's kubeconfig
only when it names such a host.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from provider.backup.controllers.backups import BackupReconciler
from provider.instances import InstanceAPI
from provider.kube import Cluster
from provider.kubeconfig import ControlPlaneHosts
from provider.managed.reconciler import Reconciler
from provider.spaces.backend import SpacesConnector
from sandbox.s3 import SeaweedFS
from sandbox.spaces import Kube, condition, wait_for
from tests.backup.test_roundtrip import (
    BUCKET,
    NAMESPACE,
    Planes,
    backup_object,
    ensure_bucket,
    ensure_default_space,
    fresh_name,
    operator_allows,
    write_connection_secret,
)
from tests.provider.conftest import PROVIDER_NAMESPACE, cluster_provider_config

# The API server's certificate names localhost too: the same server on another host.
OTHER_HOST = "localhost"
TOKEN_CANARY = "team-token-canary-31f7"


def on_host(kubeconfig: str, host: str) -> str:
    """``kubeconfig`` with its server on ``host`` (the port kept)."""
    config = yaml.safe_load(kubeconfig)
    for entry in config["clusters"]:
        port = entry["cluster"]["server"].rsplit(":", 1)[1]
        entry["cluster"]["server"] = f"https://{host}:{port}"
    return str(yaml.safe_dump(config))


def with_exec(kubeconfig: str) -> str:
    """``kubeconfig`` whose user runs a command: outside the allow-list."""
    config = yaml.safe_load(kubeconfig)
    config["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": TOKEN_CANARY}
    }
    return str(yaml.safe_dump(config))


def team_made(kubeconfig: str, secret_type: str) -> Callable[[Kube, dict[str, Any]], None]:
    """The Secret as a team would make it before the provider: no owner, any type."""

    def make(local: Kube, instance: dict[str, Any]) -> None:
        local.core.create_namespaced_secret(
            NAMESPACE,
            {
                "metadata": {"name": instance["spec"]["writeConnectionSecretToRef"]["name"]},
                "type": secret_type,
                "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
            },
        )

    return make


def provider_written(kubeconfig: str) -> Callable[[Kube, dict[str, Any]], None]:
    """The Secret as the provider writes it (or as a team edited it in place)."""

    def make(local: Kube, instance: dict[str, Any]) -> None:
        write_connection_secret(local, instance, kubeconfig)

    return make


@dataclass(frozen=True)
class SourceCase:
    reason: str
    # The kubeconfig of the source plane -> how the Instance's Secret is made.
    secret: Callable[[str], Callable[[Kube, dict[str, Any]], None]]
    outcome: str
    allowed_hosts: tuple[str, ...] = ()


SOURCE_CASES = [
    SourceCase(
        "The provider's own Secret on the Space's host is backed up.",
        provider_written,
        "Completed",
    ),
    SourceCase(
        "An Opaque Secret a team made under the connection secret's name is refused.",
        lambda kubeconfig: team_made(kubeconfig, "Opaque"),
        "NotInstanceConnectionSecret",
    ),
    SourceCase(
        "A Secret of the connection type that the Instance does not control is refused.",
        lambda kubeconfig: team_made(kubeconfig, "connection.crossplane.io/v1alpha1"),
        "NotInstanceConnectionSecret",
    ),
    SourceCase(
        "The provider's Secret edited to name another host is refused.",
        lambda kubeconfig: provider_written(on_host(kubeconfig, OTHER_HOST)),
        "ControlPlaneHostNotAllowed",
    ),
    SourceCase(
        "The provider's Secret edited to run a command is refused.",
        lambda kubeconfig: provider_written(with_exec(kubeconfig)),
        "KubeconfigNotAllowed",
    ),
    SourceCase(
        "A host the operator allows is backed up.",
        lambda kubeconfig: provider_written(on_host(kubeconfig, OTHER_HOST)),
        "Completed",
        allowed_hosts=(OTHER_HOST,),
    ),
    SourceCase(
        "The operator's hosts replace the Space's host.",
        provider_written,
        "ControlPlaneHostNotAllowed",
        allowed_hosts=(OTHER_HOST,),
    ),
]


async def run_backup(local: Kube, name: str, endpoint: str, hosts: ControlPlaneHosts) -> None:
    cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
    try:
        await BackupReconciler(
            cluster, endpoints=operator_allows(endpoint), controlplane_hosts=hosts
        ).reconcile(NAMESPACE, name)
    finally:
        await cluster.close()


@pytest.mark.parametrize("case", SOURCE_CASES, ids=lambda case: case.reason)
def test_a_backup_reads_only_the_provider_written_kubeconfig_of_an_allowed_host(
    case: SourceCase, planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    local = planes.local
    local.namespace(NAMESPACE)
    # The Space of the default ClusterProviderConfig is on 127.0.0.1, as the source plane.
    ensure_default_space(local, planes.source.server)
    instance_name = fresh_name("source")
    instance = local.create(
        "instances",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Instance",
            "metadata": {"name": instance_name, "namespace": NAMESPACE},
            "spec": {
                "forProvider": {"crossplane": {"autoUpgrade": {"channel": "Stable"}}},
                "writeConnectionSecretToRef": {"name": f"{instance_name}-kubeconfig"},
            },
        },
    )
    kubeconfig = planes.source.server.kubeconfig
    case.secret(kubeconfig)(local, instance)
    name = fresh_name("source-backup")
    local.create(
        "backups",
        backup_object(name, instance_name, seaweed.endpoint, f"{NAMESPACE}/{instance_name}/"),
    )
    asyncio.run(run_backup(local, name, seaweed.endpoint, ControlPlaneHosts.of(case.allowed_hosts)))

    backup = local.get("backups", NAMESPACE, name) or {}
    if case.outcome == "Completed":
        assert backup["status"]["phase"] == "Completed", backup["status"]
        return
    failed = condition(backup, "Failed")
    assert backup["status"]["phase"] == "Failed", backup["status"]
    assert (failed["status"], failed["reason"]) == ("True", case.outcome), failed
    shown = yaml.safe_dump(backup) + yaml.safe_dump(local.events(NAMESPACE, name))
    server = yaml.safe_load(kubeconfig)["clusters"][0]["cluster"]["server"]
    for secret in (server.split("//")[1], OTHER_HOST, TOKEN_CANARY, "BEGIN CERTIFICATE"):
        assert secret not in shown, f"{secret!r} is shown"


def reconcile_instance(local: Kube, name: str, hosts: ControlPlaneHosts) -> dict[str, Any] | None:
    async def run() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
        connector = SpacesConnector(cluster, controlplane_hosts=hosts)
        try:
            await Reconciler(
                InstanceAPI(cluster), connector, deterministic_external_name=True
            ).reconcile(NAMESPACE, name)
        finally:
            await connector.close()
            await cluster.close()

    asyncio.run(run())
    return local.get("instances", NAMESPACE, name)


def test_the_provider_publishes_a_control_plane_kubeconfig_only_on_an_allowed_host(
    planes: Planes, space: tuple[Kube, Kube]
) -> None:
    space_cluster, _ = space
    local = planes.local
    local.namespace(NAMESPACE)
    # A ClusterProviderConfig of its own: the default one is the backup tests'.
    local.namespace(PROVIDER_NAMESPACE)
    local.put_secret(
        PROVIDER_NAMESPACE,
        "simulated-space",
        {"kubeconfig": space_cluster.server.kubeconfig.encode()},
    )
    local.create(
        "clusterproviderconfigs", cluster_provider_config("simulated", secret="simulated-space")
    )
    name = fresh_name("published")
    local.create(
        "instances",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Instance",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "forProvider": {"crossplane": {"autoUpgrade": {"channel": "Stable"}}},
                "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "simulated"},
                "writeConnectionSecretToRef": {"name": f"{name}-kubeconfig"},
            },
        },
    )
    elsewhere = ControlPlaneHosts.of(["spaces.example.com"])

    def refused() -> dict[str, Any] | None:
        found = reconcile_instance(local, name, elsewhere)
        ready = condition(found, "Ready")
        message = str(ready.get("message"))
        return found if "kubeconfig in secret" in message and "is refused" in message else None

    ready = condition(wait_for("the kubeconfig refused", refused), "Ready")
    assert ready["status"] == "False"
    assert "names a host the operator does not allow" in ready["message"]
    assert "127.0.0.1" not in ready["message"]
    assert local.secret(NAMESPACE, f"{name}-kubeconfig") is None, "nothing is published"

    # The default: the Space's own host, which the simulated control planes share.
    def published() -> dict[str, Any] | None:
        reconcile_instance(local, name, ControlPlaneHosts())
        return local.secret(NAMESPACE, f"{name}-kubeconfig")

    assert "kubeconfig" in (wait_for("the kubeconfig published", published).get("data") or {})
