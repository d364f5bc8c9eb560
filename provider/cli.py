"""``controlplane-provider`` and ``controlplane-backup-controller``: run the controllers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import click

from provider.backups import BACKUP_SCHEDULES, BACKUPS, BackupReconciler
from provider.configs import ConfigReconciler, config_of_usage
from provider.controller import Controller
from provider.instances import InstanceAPI
from provider.kube import Cluster
from provider.managed.reconciler import Reconciler
from provider.model import (
    CLUSTER_PROVIDER_CONFIG_USAGES,
    CLUSTER_PROVIDER_CONFIGS,
    INSTANCES,
    PROVIDER_CONFIG_USAGES,
    PROVIDER_CONFIGS,
)
from provider.restore import Restorer
from provider.runtime import logs, metrics
from provider.schedules import ScheduleReconciler, schedule_of_backup
from provider.spaces.backend import SpacesConnector

log = logging.getLogger("provider")


@dataclass(frozen=True)
class Options:
    """The command's settings."""

    kubeconfig: str | None
    poll_interval: float
    concurrency: int
    leader_election: bool
    leader_election_namespace: str
    metrics_address: str
    metrics_port: int
    lease: str


Build = Callable[[Cluster, Options], tuple[list[Controller], Callable[[], Awaitable[None]]]]


def _common(command: Callable[..., None]) -> Callable[..., None]:
    """The flags both controllers take."""
    for option in reversed(
        [
            click.option("--kubeconfig", envvar="KUBECONFIG", help="Default: in-cluster config."),
            click.option(
                "--max-reconcile-rate",
                "--concurrency",
                "concurrency",
                default=10,
                show_default=True,
                type=click.IntRange(min=1),
                help="Objects reconciled at once.",
            ),
            click.option(
                "--leader-election", is_flag=True, help="Run only while holding the Lease."
            ),
            click.option(
                "--leader-election-namespace",
                default=lambda: os.environ.get("POD_NAMESPACE", "crossplane-system"),
                show_default="$POD_NAMESPACE or crossplane-system",
            ),
            click.option(
                "--metrics-bind-address",
                default="0.0.0.0:8080",
                show_default=True,
                help="host:port of /metrics, /healthz and /readyz.",
            ),
            click.option("--debug", "-d", is_flag=True, help="Log at debug level."),
        ]
    ):
        command = option(command)
    return command


def _options(lease: str, poll_interval: float, **flags: Any) -> Options:
    logs.setup(debug=bool(flags["debug"]))
    address = str(flags["metrics_bind_address"])
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        msg = f"--metrics-bind-address must be host:port (got {address!r})"
        raise click.UsageError(msg)
    return Options(
        kubeconfig=flags["kubeconfig"],
        poll_interval=poll_interval,
        concurrency=int(flags["concurrency"]),
        leader_election=bool(flags["leader_election"]),
        leader_election_namespace=str(flags["leader_election_namespace"]),
        metrics_address=host or "0.0.0.0",  # noqa: S104
        metrics_port=int(port),
        lease=lease,
    )


@click.command()
@click.option(
    "--poll-interval",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds between polls of a settled Instance.",
)
@_common
def main(poll_interval: float, **flags: Any) -> None:
    """Reconcile Instances into Upbound Spaces ControlPlanes."""
    asyncio.run(
        run(_options("controlplane-provider", poll_interval, **flags), provider_controllers)
    )


@click.command()
@_common
def backup_main(**flags: Any) -> None:
    """Run the Backup and BackupSchedule controllers."""
    options = _options("controlplane-backup-controller", 60.0, **flags)
    asyncio.run(run(options, backup_controllers))


async def run(options: Options, build: Build) -> None:
    """Run the controllers ``build`` makes until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    cluster = await Cluster.from_environment(
        options.kubeconfig, on_request=metrics.record_api_request
    )
    controllers, close = build(cluster, options)
    leading = asyncio.Event()
    if not options.leader_election:
        leading.set()
    # A standby replica is ready too: it is healthy, only not leading.
    server = metrics.start(
        options.metrics_address,
        options.metrics_port,
        ready=lambda: not leading.is_set() or all(c.synced.is_set() for c in controllers),
    )
    log.info("started", extra={"fields": {"metrics_port": server.port}})
    try:
        if options.leader_election:
            identity = f"{socket.gethostname()}_{os.getpid()}"
            await _until(
                stop,
                cluster.lead(
                    options.lease,
                    options.leader_election_namespace,
                    identity,
                    lambda: _lead(controllers, stop, leading),
                ),
            )
            if not stop.is_set():
                # Another replica may lead now: stop, and let the pod restart.
                log.error("lost leadership; exiting")
                raise SystemExit(1)
        else:
            await _run_all(controllers, stop)
    finally:
        stop.set()
        server.stop()
        await close()
        await cluster.close()


def provider_controllers(
    cluster: Cluster, options: Options
) -> tuple[list[Controller], Callable[[], Awaitable[None]]]:
    """The provider's controllers on ``cluster``, and what to close after."""
    connector = SpacesConnector(
        cluster, restorer=Restorer(cluster), on_request=metrics.record_api_request
    )
    # A ControlPlane's name is the Instance's external name, set before it is
    # created: after a crash mid-create, Observe finds it rather than guessing.
    reconciler = Reconciler(
        InstanceAPI(cluster),
        connector,
        poll_interval=options.poll_interval,
        deterministic_external_name=True,
    )
    configs = ConfigReconciler(cluster, PROVIDER_CONFIGS, PROVIDER_CONFIG_USAGES)
    cluster_configs = ConfigReconciler(
        cluster, CLUSTER_PROVIDER_CONFIGS, CLUSTER_PROVIDER_CONFIG_USAGES
    )
    controllers = [
        Controller(
            "instance",
            cluster,
            INSTANCES,
            reconciler.reconcile,
            workers=options.concurrency,
        ),
        Controller(
            "providerconfig",
            cluster,
            PROVIDER_CONFIGS,
            configs.reconcile,
            workers=1,
            also_watch=((PROVIDER_CONFIG_USAGES, config_of_usage),),
        ),
        Controller(
            "clusterproviderconfig",
            cluster,
            CLUSTER_PROVIDER_CONFIGS,
            cluster_configs.reconcile,
            workers=1,
            also_watch=((CLUSTER_PROVIDER_CONFIG_USAGES, config_of_usage),),
        ),
    ]
    return controllers, connector.close


def backup_controllers(
    cluster: Cluster, options: Options
) -> tuple[list[Controller], Callable[[], Awaitable[None]]]:
    """The Backup and BackupSchedule controllers on ``cluster``."""
    backups = BackupReconciler(cluster)
    schedules = ScheduleReconciler(cluster)
    controllers = [
        Controller("backup", cluster, BACKUPS, backups.reconcile, workers=options.concurrency),
        Controller(
            "backupschedule",
            cluster,
            BACKUP_SCHEDULES,
            schedules.reconcile,
            workers=2,
            also_watch=((BACKUPS, schedule_of_backup),),
        ),
    ]

    async def nothing() -> None:
        return None

    return controllers, nothing


async def _lead(controllers: list[Controller], stop: asyncio.Event, leading: asyncio.Event) -> None:
    log.info("leading")
    leading.set()
    await _run_all(controllers, stop)


async def _run_all(controllers: list[Controller], stop: asyncio.Event) -> None:
    await asyncio.gather(*(controller.run(stop) for controller in controllers))


async def _until(stop: asyncio.Event, work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` until it ends (the lease is lost) or ``stop`` is set."""
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    for pending in (task, waiter):
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
