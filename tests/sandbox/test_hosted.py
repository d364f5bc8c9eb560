"""sandbox.hosted: Crossplane core inside a hosted control plane, against real servers.

A kube-apiserver on the session's etcd, the loopback registry and real
Crossplane core; the Configuration is the fixture under
tests/fixtures/packages/configuration, built with `crossplane xpkg build`.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from kubernetes import client

from sandbox.apiserver import APIServerFactory
from sandbox.chart import HELM_BIN
from sandbox.crossplane import CORE_BIN, NO_USAGES_WEBHOOK
from sandbox.hosted import HostedControlPlane
from sandbox.registry import CRANE_BIN, CROSSPLANE_BIN, Registry
from sandbox.spaces import wait_for
from tests.fixtures.packages import CONFIGURATION, CONFIGURATION_XRD

# Core's first start on a fresh API server, on a loaded two-core machine.
START_DEADLINE = 240.0


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    """The sandbox's loopback registry, stopped after the test."""
    missing = [
        tool.name for tool in (CORE_BIN, CROSSPLANE_BIN, CRANE_BIN, HELM_BIN) if not tool.is_file()
    ]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)}: run tools/build.sh")
    registry = Registry(tmp_path / "registry")
    registry.start()
    try:
        yield registry
    finally:
        registry.stop()


@pytest.fixture
def plane(apiserver_factory: APIServerFactory, tmp_path: Path) -> Iterator[HostedControlPlane]:
    """A hosted control plane, core not started; core stopped after the test."""
    hosted = HostedControlPlane("team-a", apiserver_factory(name="team-a"), tmp_path / "team-a")
    try:
        yield hosted
    finally:
        hosted.stop()


def webhook_urls(plane: HostedControlPlane) -> list[str]:
    admission = client.AdmissionregistrationV1Api(plane.kube.api)
    config = admission.read_validating_webhook_configuration(NO_USAGES_WEBHOOK)
    return [str(webhook.client_config.url) for webhook in config.webhooks or []]


def test_crossplane_in_a_hosted_control_plane_installs_a_configuration_from_the_registry(
    plane: HostedControlPlane, registry: Registry
) -> None:
    assert not plane.crossplane_running(), "core is not started before it is asked for"

    core = plane.start_crossplane()
    wait_for("Crossplane running", plane.crossplane_running, timeout=START_DEADLINE)
    assert plane.start_crossplane() is core, "a second call starts no second core"
    assert all(
        url.startswith(f"https://127.0.0.1:{core.webhook_port}/") for url in webhook_urls(plane)
    ), "the API server calls this control plane's own core, on its loopback port"

    plane.install_configuration(CONFIGURATION.name, registry.push(CONFIGURATION))
    wait_for(
        "the Configuration Installed and Healthy",
        partial(plane.configuration_healthy, CONFIGURATION.name),
        timeout=START_DEADLINE,
    )
    wait_for(
        f"XRD {CONFIGURATION_XRD} Established",
        partial(plane.xrd_established, CONFIGURATION_XRD),
        timeout=START_DEADLINE,
    )

    plane.stop()
    assert not plane.crossplane_running(), "a stopped core is not running"
