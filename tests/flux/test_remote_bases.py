"""A team's kustomization.yaml naming remote resources, against the real kustomize-controller.

``source.allowedHosts`` holds the GitRepository's URL, but a kustomization.yaml
in that repository may name other URLs, which kustomize fetches from inside
the cluster. The platform requires kustomize-controller's
``--no-remote-bases`` (sandbox.flux's REQUIRED_KUSTOMIZE_FLAGS). What it does
and does not do, as the pinned release behaves:

- a remote base (a git repository) is refused: the build fails and nothing of
  it is applied. kustomize still clones it first (the flag only refuses to
  read the clone, outside the artifact's root);
- a remote file (an http(s) URL of a YAML file) is fetched and applied all the
  same: the flag does not cover it, whatever Flux's flag help says. Only
  kustomize-controller's egress (a NetworkPolicy, or a proxy) stops that; the
  Security model says so.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from sandbox.flux import REQUIRED_KUSTOMIZE_FLAGS
from sandbox.spaces import condition, wait_for

from .conftest import TARGET_NAMESPACE, FluxWorld, build_outcome, configmap

BUILD_DEADLINE = 90.0


@pytest.fixture
def elsewhere() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on loopback that no allow-list names: its URL and the paths asked of it."""
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            body = configmap("from-a-remote-file").encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host!s}:{port}", asked
    finally:
        server.shutdown()
        server.server_close()


def _sync(world: FluxWorld, namespace: str, resources: list[str]) -> dict[str, str]:
    """Sync a repository whose kustomization.yaml names ``resources``; its Ready condition."""
    world.team(namespace)
    kustomization = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization"}
    repository = world.repository(
        namespace,
        {"kustomization.yaml": yaml.safe_dump({**kustomization, "resources": resources})},
    )
    world.apply(world.compose(namespace, {"url": repository.url, "interval": "10s"}))
    return wait_for(
        f"{namespace}'s build",
        lambda: build_outcome(condition(world.kustomization(namespace, "ctp"), "Ready")),
        BUILD_DEADLINE,
    )


def _applied(world: FluxWorld) -> set[str]:
    return {
        item.metadata.name
        for item in world.kube.core.list_namespaced_config_map(TARGET_NAMESPACE).items
    }


def test_no_remote_bases_refuses_a_remote_base_but_not_a_remote_file(
    flux_world: Callable[..., FluxWorld], elsewhere: tuple[str, list[str]]
) -> None:
    assert "--no-remote-bases=true" in REQUIRED_KUSTOMIZE_FLAGS
    world = flux_world()
    base = world.repository(
        "base",
        {
            "app/kustomization.yaml": yaml.safe_dump({"resources": ["cm.yaml"]}),
            "app/cm.yaml": configmap("from-a-remote-base"),
        },
    )

    refused = _sync(world, "team-a", [f"{base.url}//app?ref=main"])
    assert (refused["status"], refused["reason"]) == ("False", "BuildFailed"), refused
    assert "fs-security-constraint" in refused["message"]
    assert "from-a-remote-base" not in _applied(world)

    url, asked = elsewhere
    fetched = _sync(world, "team-b", [f"{url}/internal.yaml"])
    assert fetched["status"] == "True", fetched
    assert asked == ["/internal.yaml"]
    assert "from-a-remote-file" in _applied(world)
