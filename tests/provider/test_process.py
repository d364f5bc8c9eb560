"""The provider process: health, readiness, metrics, JSON logs, settings and leader election."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.spaces import PROVIDER_CRDS, Kube, ProviderProcess, condition, wait_for
from tests.provider.conftest import PROVIDER_NAMESPACE, SPACE_SECRET, Env, cluster_provider_config
from tests.provider.test_instance import (
    control_planes,
    default_external_name,
    fresh,
    instance,
    ready,
)


def http_status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def test_health_readiness_and_metrics_are_served_on_one_port(env: Env) -> None:
    port = env.provider.metrics_port
    wait_for("/readyz 200", lambda: http_status(port, "/readyz") == 200)
    assert http_status(port, "/healthz") == 200
    namespace = fresh(env)
    env.local.create("instances", instance(namespace))
    wait_for("Ready", lambda: ready(env, namespace))
    page = env.provider.metrics()
    for name in (
        'controlplane_provider_reconcile_total{controller="instance",result="success"}',
        "controlplane_provider_reconcile_duration_seconds_bucket",
        'controlplane_provider_workqueue_depth{controller="instance"}',
        'controlplane_provider_api_requests_total{code="201",resource="controlplanes",verb="post"}',
    ):
        assert name in page, name
    per_controller = [
        line for line in page.splitlines() if line.startswith("controlplane_provider_")
    ]
    assert per_controller
    assert not [line for line in per_controller if namespace in line], (
        "the controller's own series never carry an object's name"
    )
    # Per-Instance gauges do, by namespace and name only (docs/monitoring.md).
    assert f'controlplane_instance_ready{{name="myctp",namespace="{namespace}"}} 1.0' in page


def test_every_log_line_is_a_json_object(env: Env) -> None:
    lines = [line for line in env.provider.log().splitlines() if line.strip()]
    assert lines
    for line in lines:
        record = json.loads(line)
        assert {"time", "level", "message"} <= set(record), line


def local_cluster(env: Env, name: str) -> Kube:
    """A local cluster of its own, with our CRDs and a ClusterProviderConfig for the Space."""
    local = Kube(env.factory(name=name))
    local.apply_crds(PROVIDER_CRDS)
    local.namespace(PROVIDER_NAMESPACE)
    local.put_secret(
        PROVIDER_NAMESPACE, SPACE_SECRET, {"kubeconfig": env.space.server.kubeconfig.encode()}
    )
    local.create("clusterproviderconfigs", cluster_provider_config())
    return local


def reconciles(process: ProviderProcess, controller: str) -> float:
    """How many reconciles of ``controller`` the process has counted, by its metrics."""
    prefix = f'controlplane_provider_reconcile_total{{controller="{controller}",'
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in process.metrics().splitlines()
        if line.startswith(prefix)
    )


def test_poll_and_sync_come_from_the_variables_a_runtime_config_sets(
    env: Env, tmp_path: Path
) -> None:
    # With a poll of an hour nothing brings a settled Instance back within the
    # test but the resync every two seconds.
    local = local_cluster(env, "resync")
    process = ProviderProcess(
        local.server.kubeconfig_path,
        tmp_path / "resync.log",
        env={"CONTROLPLANE_PROVIDER_POLL": "1h", "CONTROLPLANE_PROVIDER_SYNC": "2s"},
    ).start()
    try:
        local.namespace("team-resync")
        local.create("instances", instance("team-resync", "settled"))
        wait_for(
            "Ready",
            lambda: (
                condition(local.get("instances", "team-resync", "settled"), "Ready").get("status")
                == "True"
            ),
        )
        settled = reconciles(process, "instance")
        wait_for(
            "two resyncs",
            lambda: reconciles(process, "instance") >= settled + 2,
            timeout=20,
        )
    finally:
        process.stop()


@pytest.fixture
def elected(env: Env, tmp_path: Path) -> Iterator[tuple[Kube, list[ProviderProcess]]]:
    local = local_cluster(env, "elected")
    replicas = [
        ProviderProcess(
            local.server.kubeconfig_path,
            tmp_path / f"replica-{index}.log",
            "--leader-election",
            "--leader-election-namespace",
            PROVIDER_NAMESPACE,
            "--poll",
            "2s",
        ).start()
        for index in range(2)
    ]
    yield local, replicas
    for replica in replicas:
        replica.stop()


def leads(replica: ProviderProcess) -> bool:
    """Whether the replica has logged that it leads."""
    for line in replica.log().splitlines():
        with contextlib.suppress(ValueError):
            if json.loads(line).get("message") == "leading":
                return True
    return False


def _leader(replicas: list[ProviderProcess]) -> ProviderProcess | None:
    return next((r for r in replicas if r.alive() and leads(r)), None)


def test_only_the_leader_reconciles_and_a_standby_takes_over(
    env: Env, elected: tuple[Kube, list[ProviderProcess]]
) -> None:
    local, replicas = elected
    local.namespace("team-elected")
    local.create("instances", instance("team-elected", "first"))
    leader = wait_for("a leader", lambda: _leader(replicas))
    wait_for("Ready", lambda: ready_in(local, "first"))
    standby = next(r for r in replicas if r is not leader)
    # Both replicas start together, but on a busy machine the standby may still
    # be starting when the leader is done: wait for it, with a deadline.
    wait_for(
        "the standby ready, only not leading",
        lambda: http_status(standby.metrics_port, "/readyz") == 200,
    )
    assert not leads(standby)
    assert len(control_planes(env, default_external_name("team-elected", "first"))) == 1

    leader.kill()
    local.create("instances", instance("team-elected", "second"))
    wait_for("the standby leads", lambda: leads(standby), timeout=90)
    wait_for("Ready under the new leader", lambda: ready_in(local, "second"), timeout=90)
    assert len(control_planes(env, default_external_name("team-elected", "second"))) == 1


def ready_in(local: Kube, name: str) -> bool:
    found = local.get("instances", "team-elected", name)
    return (
        condition(found, "Ready").get("status") == "True"
        and condition(found, "Synced").get("status") == "True"
    )
