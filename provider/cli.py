"""``controlplane-provider`` and ``controlplane-backup-controller``: run the controllers.

Their flags are those of crossplane-runtime providers (provider-kubernetes and
upjet's providers), so a DeploymentRuntimeConfig written for one fits these:
``--poll`` and ``--sync`` take Go durations (``30s``, ``1m``, ``1h30m``),
``--max-reconcile-rate``, ``-l/--leader-election`` (or ``LEADER_ELECTION``),
``-d/--debug``, ``--metrics-bind-address`` (or ``METRICS_BIND_ADDRESS``), and
the Lease lives in ``POD_NAMESPACE``, which Crossplane's package runtime sets.
As kingpin's ``DefaultEnvars`` does for those providers, every flag without a
variable of its own is also read from ``<COMMAND>_<FLAG>``, e.g.
``CONTROLPLANE_PROVIDER_POLL=5m``. A flag is one entry of ``COMMON_FLAGS`` or
``PROVIDER_FLAGS`` and one field of ``Options``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import re
import signal
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

import click

from provider import kube
from provider.backup.controllers.backups import (
    BACKUP_SCHEDULES,
    BACKUPS,
    DEFAULT_DEADLINE_SECONDS,
    BackupReconciler,
)
from provider.backup.controllers.schedules import ScheduleReconciler, schedule_of_backup
from provider.backup.restore.instance import DEFAULT_RESTORES, RestoreBounds
from provider.backup.restore.restorer import Restorer
from provider.backup.storage.tenancy import EndpointPolicy, TenancyError
from provider.backup.storage.web_identity import (
    DEFAULT_PARTITION,
    POD_IRSA_SOURCE,
    WebIdentityPolicy,
    account_setting,
    parse_denied,
    parse_partition,
    pod_irsa_role,
)
from provider.cache import CachedClient, Informer
from provider.configs import (
    USAGES_BY_CONFIG,
    USERS_COALESCE_SECONDS,
    ConfigReconciler,
    config_of_usage,
    index_usages_by_config,
)
from provider.controller import Controller, desired_state_changed
from provider.instances import InstanceAPI
from provider.kube import Cluster, JsonObject, ServiceAccountRef
from provider.kubeconfig import ControlPlaneHosts, HostPatternError
from provider.managed.reconciler import Reconciler
from provider.model import (
    CLUSTER_PROVIDER_CONFIG_USAGES,
    CLUSTER_PROVIDER_CONFIGS,
    CONNECTION_SECRET_SELECTOR,
    INSTANCES,
    PROVIDER_CONFIG_USAGES,
    PROVIDER_CONFIGS,
)
from provider.runtime import dns, logs, metrics
from provider.runtime.durations import format_go_duration, parse_go_duration
from provider.runtime.queue import RateLimitingQueue
from provider.spaces.backend import SpacesConnector, spaces_in_use

log = logging.getLogger("provider")

PROVIDER = "controlplane-provider"
BACKUP_CONTROLLER = "controlplane-backup-controller"
DEFAULT_POLL = "1m"
DEFAULT_SYNC = "1h"
DEFAULT_FINAL_BACKUP_TIMEOUT = "30m"
DEFAULT_RESTORE_TIMEOUT = "2h"
MINIMUM_RESTORE_TIMEOUT_SECONDS = 1.0
DEFAULT_BACKUP_TIMEOUT = format_go_duration(DEFAULT_DEADLINE_SECONDS)
MINIMUM_BACKUP_TIMEOUT_SECONDS = 1.0
MINIMUM_FINAL_BACKUP_TIMEOUT_SECONDS = 1.0
MINIMUM_POLL_SECONDS = 1.0
MINIMUM_SYNC_SECONDS = 1.0
DIGITS = re.compile(r"[0-9]+")
BARE_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")
# The backup controller's ServiceAccount (deploy/backup-controller), which irsa
# team roles trust.
DEFAULT_WEB_IDENTITY_SERVICE_ACCOUNT = "controlplane-system/controlplane-backup"


@dataclass(frozen=True)
class Options:
    """The command's settings."""

    kubeconfig: str | None
    poll_interval: float
    sync_period: float
    concurrency: int
    leader_election: bool
    leader_election_namespace: str
    metrics_address: str
    metrics_port: int
    lease: str
    debug: bool
    s3_endpoints: EndpointPolicy
    # Both: the hosts a hosted control plane's kubeconfig may name; none: the Space's.
    controlplane_hosts: ControlPlaneHosts = field(default_factory=ControlPlaneHosts)
    # The provider's: whose identity restores of WebIdentity Backups use; None: its own.
    web_identity_service_account: ServiceAccountRef | None = None
    # The provider's: how many restores run at once, and how long each may run.
    restores: RestoreBounds = field(default_factory=RestoreBounds)
    # Both: the roles a WebIdentity Backup may name; by default none (WebIdentity is off).
    web_identity_roles: WebIdentityPolicy = field(default_factory=WebIdentityPolicy)
    # The Backup controller's: how long a deleted schedule waits for its final Backup.
    final_backup_timeout: float = parse_go_duration(DEFAULT_FINAL_BACKUP_TIMEOUT)
    # The Backup controller's: how long one attempt of a Backup may run.
    backup_timeout: float = DEFAULT_DEADLINE_SECONDS


# What a flag holds as click parsed it, and what its parser makes of it.
Raw = TypeVar("Raw")
Value = TypeVar("Value")

Build = Callable[[Cluster, Options], tuple[list[Controller], Callable[[], Awaitable[None]]]]


class Duration(click.ParamType[float]):
    """A Go duration (``30s``, ``1m``, ``1h30m``) of at least ``minimum`` seconds, as seconds.

    ``bare_seconds`` also takes a plain number of seconds, which the flag took
    before it took durations.
    """

    name = "duration"

    def __init__(self, minimum: float, *, bare_seconds: bool = False) -> None:
        """A duration of at least ``minimum`` seconds."""
        self.minimum = minimum
        self.bare_seconds = bare_seconds

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """The value in seconds; a usage error naming the flag, with an example, when bad."""
        if isinstance(value, float):
            return value
        text = str(value).strip()
        flag = _flag_name(param)
        example = f"e.g. {flag}=30s, {flag}=1m or {flag}=1h30m"
        try:
            if self.bare_seconds and BARE_SECONDS.fullmatch(text):
                seconds = float(text)
            else:
                seconds = parse_go_duration(text)
        except ValueError as error:
            self.fail(f"{error}; {example}", param, ctx)
        if seconds < self.minimum:
            shown = format_go_duration(self.minimum)
            self.fail(f"{text!r} is shorter than {shown}; {example}", param, ctx)
        return seconds


class BindAddress(click.ParamType[tuple[str, int]]):
    """``host:port`` (``:port`` for every address), as (host, port)."""

    name = "host:port"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> tuple[str, int]:
        """The host and port; a usage error naming the flag, with an example, when bad."""
        if isinstance(value, tuple):
            return (str(value[0]), int(value[1]))
        host, colon, port = str(value).rpartition(":")
        if not colon or not DIGITS.fullmatch(port) or not 0 <= int(port) <= 65535:
            flag = _flag_name(param)
            self.fail(f"{value!r} is not host:port; e.g. {flag}=0.0.0.0:8080", param, ctx)
        return (host or "0.0.0.0", int(port))  # noqa: S104 (the in-cluster default)


class Count(click.ParamType[int]):
    """A whole number of at least one."""

    name = "integer"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        """The number; a usage error naming the flag, with an example, when bad."""
        text = str(value).strip()
        if not DIGITS.fullmatch(text) or int(text) < 1:
            flag = _flag_name(param)
            self.fail(f"{text!r} is not a whole number of at least 1; e.g. {flag}=10", param, ctx)
        return int(text)


class ServiceAccountName(click.ParamType[ServiceAccountRef | None]):
    """``NAMESPACE/NAME`` of a ServiceAccount; empty for none."""

    name = "namespace/name"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> ServiceAccountRef | None:
        """The ServiceAccount, or None; a usage error naming the flag and the rule when bad."""
        if value is None or isinstance(value, ServiceAccountRef):
            return value
        text = str(value).strip()
        if not text:
            return None
        # A namespace is a DNS-1123 label, a ServiceAccount's name a DNS-1123 subdomain.
        namespace, slash, name = text.partition("/")
        if not (slash and dns.is_label(namespace) and dns.is_subdomain(name)):
            flag = _flag_name(param)
            self.fail(
                f"{text!r} is not NAMESPACE/NAME (a DNS-1123 label, a slash, then a DNS-1123 "
                f"name of at most {dns.MAX_SUBDOMAIN} characters); e.g. "
                f"{flag}={DEFAULT_WEB_IDENTITY_SERVICE_ACCOUNT}",
                param,
                ctx,
            )
        return ServiceAccountRef(namespace, name)


def _flag_name(param: click.Parameter | None) -> str:
    """The flag's main spelling, for messages."""
    return param.opts[0] if param is not None and param.opts else "the flag"


Flag = Callable[[Callable[..., None]], Callable[..., None]]

COMMON_FLAGS: list[Flag] = [
    click.option(
        "--kubeconfig",
        envvar="KUBECONFIG",
        show_envvar=True,
        help="Default: the in-cluster config.",
    ),
    click.option(
        "--sync",
        "-s",
        "--sync-interval",
        "sync",
        type=Duration(MINIMUM_SYNC_SECONDS),
        default=DEFAULT_SYNC,
        show_default=True,
        show_envvar=True,
        help="How often every object is queued again, whatever its last result said.",
    ),
    click.option(
        "--max-reconcile-rate",
        "--concurrency",
        "max_reconcile_rate",
        default=10,
        show_default=True,
        show_envvar=True,
        type=Count(),
        help="The number of reconciles that may run at one time.",
    ),
    click.option(
        "--leader-election/--no-leader-election",
        "-l",
        envvar="LEADER_ELECTION",
        show_envvar=True,
        help=(
            "Run only while holding a coordination.k8s.io Lease named after the command "
            "(controlplane-provider or controlplane-backup-controller)."
        ),
    ),
    click.option(
        "--leader-election-namespace",
        envvar="POD_NAMESPACE",
        show_envvar=True,
        default="crossplane-system",
        show_default=True,
        help="The namespace of the Lease.",
    ),
    click.option(
        "--metrics-bind-address",
        envvar="METRICS_BIND_ADDRESS",
        show_envvar=True,
        type=BindAddress(),
        default="0.0.0.0:8080",
        show_default=True,
        help="host:port of /metrics, /healthz and /readyz.",
    ),
    click.option("--debug", "-d", is_flag=True, show_envvar=True, help="Log at debug level."),
    click.option(
        "--allowed-s3-endpoint",
        "allowed_s3_endpoints",
        multiple=True,
        envvar="ALLOWED_S3_ENDPOINTS",
        show_envvar=True,
        help=(
            "An S3 endpoint (https://host[:port]) a Backup's storage.endpoint may name; "
            "repeatable. http:// only if listed so. Default: none, AWS's own."
        ),
    ),
    click.option(
        "--allowed-controlplane-host",
        "allowed_controlplane_host",
        multiple=True,
        show_envvar=True,
        help=(
            "A host a hosted control plane's kubeconfig may name: host, *.domain (one "
            "label deep) or an IP address, each with an optional :port (else any port); "
            "repeatable. Default: the ingress host the Space publishes (upbound-system/"
            "ingress-public), else the host of the Space the provider config names."
        ),
    ),
]

# Both commands': which roles a team's WebIdentity Backup may have them assume
# (the backup controller with its projected token, the provider with one it mints).
WEB_IDENTITY_ROLE_FLAGS: list[Flag] = [
    click.option(
        "--web-identity-role-account",
        "web_identity_role_account",
        multiple=True,
        show_envvar=True,
        help=(
            "An AWS account (12 digits) whose roles a WebIdentity Backup may name; "
            "repeatable, or separated by spaces in the variable. Default: the account of "
            "the web identity's own IRSA role (the backup controller's AWS_ROLE_ARN; for "
            "the provider, the eks.amazonaws.com/role-arn annotation of "
            "--web-identity-service-account), and without one WebIdentity Backups are "
            "refused (no token is minted for them). 'none': refused whatever the pod has."
        ),
    ),
    click.option(
        "--web-identity-partition",
        default=DEFAULT_PARTITION,
        show_default=True,
        show_envvar=True,
        help=(
            "The AWS partition of the listed accounts (aws, aws-cn, aws-us-gov, ...); "
            "by default the IRSA role's account is in that role's own partition."
        ),
    ),
    click.option(
        "--web-identity-denied-role",
        "web_identity_denied_role",
        multiple=True,
        show_envvar=True,
        help=(
            "The ARN of a role no WebIdentity Backup may name, though it trusts the "
            "backup controller's ServiceAccount (a platform role); repeatable. The web "
            "identity's own IRSA role is always denied."
        ),
    ),
]

PROVIDER_FLAGS: list[Flag] = [
    click.option(
        "--poll",
        type=Duration(MINIMUM_POLL_SECONDS),
        default=None,
        show_default=DEFAULT_POLL,
        show_envvar=True,
        help="How often a settled Instance is checked for drift.",
    ),
    click.option(
        "--poll-interval",
        type=Duration(MINIMUM_POLL_SECONDS, bare_seconds=True),
        default=None,
        show_envvar=True,
        help="The same as --poll; a bare number is seconds.",
    ),
    click.option(
        "--web-identity-service-account",
        type=ServiceAccountName(),
        default=DEFAULT_WEB_IDENTITY_SERVICE_ACCOUNT,
        show_default=True,
        show_envvar=True,
        help=(
            "NAMESPACE/NAME of the ServiceAccount that an irsa team role trusts (the backup "
            "controller's): a restore of a WebIdentity Backup reads the archive with a token "
            "of it, minted with the TokenRequest API for audience sts.amazonaws.com only. "
            "Empty: the provider's own AWS_WEB_IDENTITY_TOKEN_FILE."
        ),
    ),
    click.option(
        "--max-restores",
        type=click.IntRange(min=1),
        default=DEFAULT_RESTORES,
        show_default=True,
        show_envvar=True,
        help=(
            "Restores running at once, apart from the reconciles, at most one per namespace; "
            "the rest wait for a slot. The provider's scratch volume needs this many times "
            "the largest archive (4 GiB)."
        ),
    ),
    click.option(
        "--restore-timeout",
        type=Duration(MINIMUM_RESTORE_TIMEOUT_SECONDS),
        default=DEFAULT_RESTORE_TIMEOUT,
        show_default=True,
        show_envvar=True,
        help=(
            "How long one restore may run once it has a slot; then it fails, naming the step "
            "it reached, and is tried again from that step at the next poll."
        ),
    ),
    *WEB_IDENTITY_ROLE_FLAGS,
]


BACKUP_FLAGS: list[Flag] = [
    *WEB_IDENTITY_ROLE_FLAGS,
    click.option(
        "--backup-timeout",
        type=Duration(MINIMUM_BACKUP_TIMEOUT_SECONDS),
        default=DEFAULT_BACKUP_TIMEOUT,
        show_default=True,
        show_envvar=True,
        help=(
            "How long one attempt of a Backup may read its control plane and write its "
            "archive; past it the Backup fails (DeadlineExceeded)."
        ),
    ),
    click.option(
        "--final-backup-timeout",
        type=Duration(MINIMUM_FINAL_BACKUP_TIMEOUT_SECONDS),
        default=DEFAULT_FINAL_BACKUP_TIMEOUT,
        show_default=True,
        show_envvar=True,
        help=(
            "How long a deleted BackupSchedule waits for its final Backup before it lets "
            "go, saying in an event and a condition that the data was not saved."
        ),
    ),
]


def _with(flags: list[Flag]) -> Flag:
    """Add ``flags`` to a command, in the order listed."""

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        for flag in reversed(flags):
            command = flag(command)
        return command

    return decorate


def _env_prefix(command: str) -> dict[str, Any]:
    """Click settings that read every flag from ``<COMMAND>_<FLAG>`` too."""
    return {"auto_envvar_prefix": command.upper().replace("-", "_")}


def _web_identity_roles(flags: dict[str, Any]) -> WebIdentityPolicy:
    """The roles WebIdentity Backups may name, from (and out of) the parsed ``flags``.

    Not resolved yet: with no account listed, the IRSA role's is allowed once known.
    """
    accounts, irsa_default = _parsed(
        "--web-identity-role-account",
        account_setting,
        flags.pop("web_identity_role_account"),
        "111122223333",
    )
    return WebIdentityPolicy(
        accounts=accounts,
        irsa_default=irsa_default,
        partition=_parsed(
            "--web-identity-partition", parse_partition, flags.pop("web_identity_partition"), "aws"
        ),
        denied=_parsed(
            "--web-identity-denied-role",
            parse_denied,
            flags.pop("web_identity_denied_role"),
            "arn:aws:iam::111122223333:role/controlplane-backup",
        ),
    )


def _parsed(flag: str, parse: Callable[[Raw], Value], value: Raw, example: str) -> Value:
    """``parse(value)``; a usage error naming the flag, the rule and an example when bad."""
    try:
        return parse(value)
    except ValueError as error:
        raise click.UsageError(f"{flag}: {error}; e.g. {flag}={example}") from None


def _options(lease: str, poll_interval: float, **flags: Any) -> Options:
    host, port = flags["metrics_bind_address"]
    try:
        s3_endpoints = EndpointPolicy.of(flags["allowed_s3_endpoints"])
    except TenancyError as error:
        raise click.UsageError(f"--allowed-s3-endpoint: {error}") from None
    try:
        controlplane_hosts = ControlPlaneHosts.of(flags["allowed_controlplane_host"])
    except HostPatternError as error:
        example = "e.g. --allowed-controlplane-host=*.example.com"
        msg = f"--allowed-controlplane-host: {error}; {example}"
        raise click.UsageError(msg) from None
    return Options(
        kubeconfig=flags["kubeconfig"],
        poll_interval=poll_interval,
        sync_period=float(flags["sync"]),
        concurrency=int(flags["max_reconcile_rate"]),
        leader_election=bool(flags["leader_election"]),
        leader_election_namespace=str(flags["leader_election_namespace"]),
        metrics_address=str(host),
        metrics_port=int(port),
        lease=lease,
        debug=bool(flags["debug"]),
        s3_endpoints=s3_endpoints,
        controlplane_hosts=controlplane_hosts,
    )


def provider_options(**flags: Any) -> Options:
    """The provider's settings from its parsed flags."""
    poll, poll_interval = flags.pop("poll"), flags.pop("poll_interval")
    if poll is not None and poll_interval is not None and poll != poll_interval:
        msg = "--poll and --poll-interval are one setting: pass one, e.g. --poll=1m"
        raise click.UsageError(msg)
    seconds = poll if poll is not None else poll_interval
    if seconds is None:
        seconds = parse_go_duration(DEFAULT_POLL)
    web_identity = flags.pop("web_identity_service_account")
    restores = RestoreBounds(
        limit=int(flags.pop("max_restores")), deadline=float(flags.pop("restore_timeout"))
    )
    web_identity_roles = _web_identity_roles(flags)
    options = _options(PROVIDER, float(seconds), **flags)
    return dataclasses.replace(
        options,
        web_identity_service_account=web_identity,
        web_identity_roles=web_identity_roles,
        restores=restores,
    )


@click.command(PROVIDER, context_settings=_env_prefix(PROVIDER))
@_with([*PROVIDER_FLAGS, *COMMON_FLAGS])
def main(**flags: Any) -> None:
    """Reconcile Instances into Upbound Spaces ControlPlanes."""
    options = provider_options(**flags)
    logs.setup(debug=options.debug)
    asyncio.run(run(options, provider_controllers))


def backup_options(**flags: Any) -> Options:
    """The Backup controller's settings from its parsed flags.

    It has nothing to poll (a BackupSchedule wakes at its own times), so it
    takes no --poll; the interval is unused.
    """
    final_backup_timeout = float(flags.pop("final_backup_timeout"))
    web_identity_roles = _web_identity_roles(flags)
    backup_timeout = float(flags.pop("backup_timeout"))
    options = _options(BACKUP_CONTROLLER, parse_go_duration(DEFAULT_POLL), **flags)
    return dataclasses.replace(
        options,
        final_backup_timeout=final_backup_timeout,
        web_identity_roles=web_identity_roles,
        backup_timeout=backup_timeout,
    )


@click.command(BACKUP_CONTROLLER, context_settings=_env_prefix(BACKUP_CONTROLLER))
@_with([*BACKUP_FLAGS, *COMMON_FLAGS])
def backup_main(**flags: Any) -> None:
    """Run the Backup and BackupSchedule controllers."""
    options = backup_options(**flags)
    logs.setup(debug=options.debug)
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
    """The provider's controllers on ``cluster``, and what to close after.

    Everything a steady poll reads comes from watch-fed caches: Instances,
    provider configs and their usages, the connection secrets the provider
    writes (by their label), and, per Space in use, its ControlPlanes and their
    secrets (``SpacesConnector``).
    """
    # A watch the API server refuses falls back to a list every poll interval.
    relist = options.poll_interval
    instances = Informer(cluster, INSTANCES, relist_interval=relist)
    configs = Informer(cluster, PROVIDER_CONFIGS, relist_interval=relist)
    cluster_configs = Informer(cluster, CLUSTER_PROVIDER_CONFIGS, relist_interval=relist)
    usages = Informer(cluster, PROVIDER_CONFIG_USAGES, relist_interval=relist)
    cluster_usages = Informer(cluster, CLUSTER_PROVIDER_CONFIG_USAGES, relist_interval=relist)
    for usage_cache in (usages, cluster_usages):
        usage_cache.add_index(USAGES_BY_CONFIG, index_usages_by_config)
    # Only the secrets the provider labelled; an older unlabelled one is read.
    secrets = Informer(
        cluster,
        kube.SECRETS,
        label_selector=CONNECTION_SECRET_SELECTOR,
        authoritative=False,
        relist_interval=relist,
    )
    caches = (instances, configs, cluster_configs, usages, cluster_usages, secrets)
    cache = CachedClient(cluster, caches)
    queue: RateLimitingQueue[tuple[str, str]] = RateLimitingQueue()
    connector = SpacesConnector(
        cluster,
        restorer=Restorer(
            cluster,
            endpoints=options.s3_endpoints,
            web_identity=options.web_identity_service_account,
            web_identity_roles=options.web_identity_roles,
        ),
        restores=options.restores,
        on_request=metrics.record_api_request,
        cache=cache,
        on_control_plane=queue.add,
        controlplane_hosts=options.controlplane_hosts,
        poll_interval=options.poll_interval,
    )

    def prune_spaces(*_: JsonObject | str | None) -> None:
        if configs.synced.is_set() and cluster_configs.synced.is_set():
            connector.prune(spaces_in_use([*configs.items(), *cluster_configs.items()]))

    configs.add_handler(prune_spaces)
    cluster_configs.add_handler(prune_spaces)
    # A ControlPlane's name is the Instance's external name, set before it is
    # created: after a crash mid-create, Observe finds it rather than guessing.
    reconciler = Reconciler(
        InstanceAPI(cluster, cache=cache),
        connector,
        poll_interval=options.poll_interval,
        deterministic_external_name=True,
    )
    config_reconciler = ConfigReconciler(
        cluster, PROVIDER_CONFIGS, PROVIDER_CONFIG_USAGES, cache=cache
    )
    cluster_config_reconciler = ConfigReconciler(
        cluster, CLUSTER_PROVIDER_CONFIGS, CLUSTER_PROVIDER_CONFIG_USAGES, cache=cache
    )
    controllers = [
        Controller(
            "instance",
            cluster,
            instances,
            reconciler.reconcile,
            workers=options.concurrency,
            queue=queue,
            sync_period=options.sync_period,
            predicate=desired_state_changed,
            caches=caches,
        ),
        Controller(
            "providerconfig",
            cluster,
            configs,
            config_reconciler.reconcile,
            workers=1,
            also_watch=((usages, config_of_usage),),
            sync_period=options.sync_period,
            # Its own status write (the users count) needs no second look.
            predicate=desired_state_changed,
            coalesce=USERS_COALESCE_SECONDS,
        ),
        Controller(
            "clusterproviderconfig",
            cluster,
            cluster_configs,
            cluster_config_reconciler.reconcile,
            workers=1,
            also_watch=((cluster_usages, config_of_usage),),
            sync_period=options.sync_period,
            # Its own status write (the users count) needs no second look.
            predicate=desired_state_changed,
            coalesce=USERS_COALESCE_SECONDS,
        ),
    ]
    return controllers, connector.close


def backup_controllers(
    cluster: Cluster, options: Options
) -> tuple[list[Controller], Callable[[], Awaitable[None]]]:
    """The Backup and BackupSchedule controllers on ``cluster``.

    WebIdentity Backups pass this pod's own projected token: the roles they may
    name follow this pod's IRSA role.
    """
    web_identity_roles = options.web_identity_roles.resolved(
        pod_irsa_role(os.environ), POD_IRSA_SOURCE
    )
    log.info("web identity", extra={"fields": {"policy": web_identity_roles.describe()}})
    backups = BackupReconciler(
        cluster,
        endpoints=options.s3_endpoints,
        web_identity_roles=web_identity_roles,
        controlplane_hosts=options.controlplane_hosts,
        deadline=options.backup_timeout,
    )
    schedules = ScheduleReconciler(
        cluster,
        endpoints=options.s3_endpoints,
        final_backup_timeout=timedelta(seconds=options.final_backup_timeout),
    )
    controllers = [
        Controller(
            "backup",
            cluster,
            BACKUPS,
            backups.reconcile,
            workers=options.concurrency,
            sync_period=options.sync_period,
        ),
        Controller(
            "backupschedule",
            cluster,
            BACKUP_SCHEDULES,
            schedules.reconcile,
            workers=2,
            also_watch=((BACKUPS, schedule_of_backup),),
            sync_period=options.sync_period,
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
