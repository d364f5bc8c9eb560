"""Real Flux for the tenant-isolation tests: source- and kustomize-controller on a kube-apiserver.

Each test gets an API server of its own (a cluster on the session's etcd), Flux's
CRDs, a git server, and Flux started with the flags it asks for. The objects
the tests apply are the ones our function renders for a team's composite,
applying into the same API server through a kubeconfig Secret, as they apply
into a hosted control plane through the Instance's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from function.render import render
from sandbox.apiserver import APIServer, APIServerFactory
from sandbox.flux import KUSTOMIZE_CONTROLLER_BIN, SOURCE_CONTROLLER_BIN, Flux
from sandbox.git import GitServer, Repository
from sandbox.spaces import Kube
from tests import builders as b

FLUX_GROUP = "kustomize.toolkit.fluxcd.io"
SOURCE_GROUP = "source.toolkit.fluxcd.io"
KUSTOMIZATIONS = "kustomizations"
GIT_REPOSITORIES = "gitrepositories"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test here `flux`: they run the real Flux controllers."""
    for item in items:
        if "tests/flux/" in str(item.fspath):
            item.add_marker(pytest.mark.flux)


@dataclass
class FluxWorld:
    """One cluster with Flux, a git server, and the function's objects applied into it."""

    server: APIServer
    kube: Kube
    flux: Flux
    git: GitServer

    def team(self, namespace: str) -> None:
        """A team namespace, with the Instance's kubeconfig Secret the Kustomizations use."""
        self.kube.namespace(namespace)
        self.kube.put_secret(
            namespace, "ctp-kubeconfig", {"kubeconfig": self.server.kubeconfig.encode()}
        )

    def repository(self, name: str, files: dict[str, str]) -> Repository:
        """A git repository holding ``files``."""
        repository = self.git.repository(name)
        repository.commit(files, "first")
        return repository

    def function_input(self) -> dict[str, Any]:
        """The example input, allowing this git server (loopback, plain http)."""
        data = b.example_input()
        data["source"] = {"allowedHosts": [self.git.host], "allowHTTP": True}
        return data

    def compose(self, namespace: str, source: dict[str, Any]) -> list[dict[str, Any]]:
        """What the function renders for a ``ctp`` composite with ``source``, Instance Ready.

        Only the Flux objects, without what ties them to a composite that is not
        here (owner references, Crossplane's labels).
        """
        composite = b.composite({"source": source}, name="ctp", namespace=namespace)
        instance = b.ready()
        instance["metadata"] = {"annotations": {b.COMPOSITION_RESOURCE_NAME: "instance"}}
        objects = render(composite, self.function_input(), [instance])
        flux = []
        for obj in objects[1:]:
            if obj["apiVersion"].split("/")[0] not in (FLUX_GROUP, SOURCE_GROUP):
                continue
            metadata = obj["metadata"]
            flux.append(
                {
                    **obj,
                    "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
                }
            )
        return flux

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Create each object."""
        for obj in objects:
            group, version = obj["apiVersion"].split("/")
            plural = KUSTOMIZATIONS if group == FLUX_GROUP else GIT_REPOSITORIES
            self.kube.create(plural, obj, group, version)

    def kustomization(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Kustomization as the API server has it."""
        return self.kube.get(KUSTOMIZATIONS, namespace, name, FLUX_GROUP, "v1")


# Where the teams' repositories apply their objects, in the "hosted control plane".
TARGET_NAMESPACE = "default"


def configmap(name: str) -> str:
    """A ConfigMap's YAML, what a team's repository applies."""
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": TARGET_NAMESPACE},
            "data": {"a": "b"},
        }
    )


def build_outcome(ready: dict[str, str]) -> dict[str, str] | None:
    """A Kustomization's Ready condition once it tells how the build went, else None.

    Until its source's artifact is there, it waits for it.
    """
    waiting = ready.get("reason") in (None, "ArtifactFailed", "Progressing", "DependencyNotReady")
    return None if waiting else ready


@pytest.fixture
def flux_world(
    apiserver_factory: APIServerFactory, tmp_path: Path
) -> Iterator[Callable[..., FluxWorld]]:
    """Start a cluster with Flux on demand: ``flux_world(kustomize_flags=..., cgroup=...)``."""
    missing = [p.name for p in (SOURCE_CONTROLLER_BIN, KUSTOMIZE_CONTROLLER_BIN) if not p.is_file()]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)}: run tools/build.sh")
    with contextlib.ExitStack() as stack:

        def start(kustomize_flags: tuple[str, ...] = (), cgroup: Path | None = None) -> FluxWorld:
            server = apiserver_factory()
            kube = Kube(server)
            flux = Flux(
                server,
                tmp_path / f"flux-{server.name}",
                kustomize_flags=kustomize_flags,
                kustomize_cgroup=cgroup,
            )
            flux.install()
            git = stack.enter_context(GitServer(tmp_path / f"git-{server.name}"))
            flux.start()
            stack.callback(flux.stop)
            return FluxWorld(server, kube, flux, git)

        yield start
