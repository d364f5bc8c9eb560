"""Real clusters for the provider: the local one, a Space, and a hosted control plane."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox.apiserver import APIServer, APIServerFactory, Etcd
from sandbox.spaces import (
    PROVIDER_CRDS,
    SPACES_CRD,
    Kube,
    ProviderProcess,
    SpacesSimulator,
    provider,
)

PROVIDER_NAMESPACE = "controlplane-system"
SPACE_GROUP = "default"
SPACE_SECRET = "space-kubeconfig"


@dataclass
class Env:
    """Everything a provider test needs, running."""

    local: Kube
    space: Kube
    hosted: APIServer
    simulator: SpacesSimulator
    provider: ProviderProcess
    factory: APIServerFactory


def cluster_provider_config(name: str = "default", secret: str = SPACE_SECRET) -> dict[str, object]:
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "ClusterProviderConfig",
        "metadata": {"name": name},
        "spec": {
            "spaces": {
                "namespace": SPACE_GROUP,
                "credentials": {
                    "source": "Secret",
                    "secretRef": {
                        "namespace": PROVIDER_NAMESPACE,
                        "name": secret,
                        "key": "kubeconfig",
                    },
                },
            }
        },
    }


def provider_config(
    name: str, namespace: str, secret: str, secret_namespace: str | None = None
) -> dict[str, object]:
    """A namespaced ProviderConfig; its Secret is in its own namespace unless told otherwise."""
    secret_ref = {"name": secret, "key": "kubeconfig"}
    if secret_namespace is not None:
        secret_ref["namespace"] = secret_namespace
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "ProviderConfig",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "spaces": {
                "namespace": SPACE_GROUP,
                "credentials": {"source": "Secret", "secretRef": secret_ref},
            }
        },
    }


def connect_to_space(local: Kube, space: Kube) -> None:
    """Install our CRDs and the Spaces CRD, and a default ClusterProviderConfig for the Space."""
    local.apply_crds(PROVIDER_CRDS)
    space.apply_crds(SPACES_CRD)
    space.namespace(SPACE_GROUP)
    local.namespace(PROVIDER_NAMESPACE)
    local.put_secret(
        PROVIDER_NAMESPACE, SPACE_SECRET, {"kubeconfig": space.server.kubeconfig.encode()}
    )
    local.create("clusterproviderconfigs", cluster_provider_config())


@pytest.fixture(scope="module")
def env(kube_etcd: Etcd, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    logs = tmp_path_factory.mktemp("provider")
    with APIServerFactory(kube_etcd) as factory:
        local = Kube(factory(name="local"))
        space = Kube(factory(name="space"))
        hosted = factory(name="hosted")
        connect_to_space(local, space)
        with (
            SpacesSimulator(space, hosted) as simulator,
            provider(
                local.server.kubeconfig_path,
                Path(logs) / "provider.log",
                "--poll",
                "2s",
                # The Space's releases, as an operator lists them: the steps of upgrades.
                *(f"--crossplane-release={release}" for release in simulator.releases.supported),
            ) as process,
        ):
            yield Env(local, space, hosted, simulator, process, factory)
