"""The provider's Prometheus metrics, and the HTTP server for /metrics, /healthz and /readyz.

The metrics live in ``REGISTRY``, a registry of our own, so that nothing a
library registers in prometheus_client's global one is exported by accident.

Label values are controller names, API verbs and resource kinds only. A value
that does not look like one (too long, or with characters no kind or verb has)
is exported as ``other``: an object's name, a token or a path never becomes a
label, and a bug in a caller cannot grow the number of series without bound.

The one exception is the backup metrics (``controlplane_backup_*``), which an
alert on a team's backups needs per BackupSchedule: their labels are the
schedule's ``namespace`` and ``name`` (DNS-1123 names as the API server checked
them, else ``other``; one schedule per composite, and its series are removed
when it goes) and a failure's ``reason``, one of ``BACKUP_FAILURE_REASONS`` or
``Other``: never a message.
"""

from __future__ import annotations

import contextlib
import logging
import re
import socket
import threading
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Literal, get_args

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from provider.runtime import dns

log = logging.getLogger(__name__)

Result = Literal["success", "error", "requeue"]

OTHER = "other"

# Kubernetes verbs, and the HTTP methods a REST client reports instead.
VERBS = frozenset(
    {
        "get",
        "list",
        "watch",
        "create",
        "update",
        "patch",
        "delete",
        "deletecollection",
        "apply",
        "post",
        "put",
        "head",
    }
)

# A controller name, a kind (``Instance``) or a resource (``instances.example.org``).
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9.-]{0,62}")

# controller-runtime's reconcile buckets, thinned out: 5 ms to a minute.
_RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

REGISTRY = CollectorRegistry()

RECONCILE_TOTAL = Counter(
    "controlplane_provider_reconcile_total",
    "Reconciles per controller, by result.",
    ["controller", "result"],
    registry=REGISTRY,
)
RECONCILE_ERRORS_TOTAL = Counter(
    "controlplane_provider_reconcile_errors_total",
    "Reconciles that ended in an error, per controller.",
    ["controller"],
    registry=REGISTRY,
)
RECONCILE_DURATION_SECONDS = Histogram(
    "controlplane_provider_reconcile_duration_seconds",
    "How long each reconcile took, per controller.",
    ["controller"],
    buckets=_RECONCILE_BUCKETS,
    registry=REGISTRY,
)
WORKQUEUE_DEPTH = Gauge(
    "controlplane_provider_workqueue_depth",
    "Keys ready in the controller's work queue.",
    ["controller"],
    registry=REGISTRY,
)
API_REQUESTS_TOTAL = Counter(
    "controlplane_provider_api_requests_total",
    "Requests to Kubernetes API servers (the local cluster and the Spaces), by verb, resource "
    "and HTTP status code; ``<error>`` when no answer came (as client-go's "
    "rest_client_requests_total).",
    ["verb", "resource", "code"],
    registry=REGISTRY,
)

# The reasons a Backup fails with (its Failed condition's): a failed attempt retried
# to the end, a rule that refused it, a limit it went past. Any other is ``Other``.
BACKUP_FAILURE_REASONS = frozenset(
    {
        "BackupFailed",
        "StorageRefused",
        "InvalidSpec",
        "DeadlineExceeded",
        "KubeconfigNotAllowed",
        "ControlPlaneHostNotAllowed",
        "TooManyObjects",
        "TooManyTypes",
        "TooManyPages",
        "ResponseTooLarge",
    }
)
OTHER_REASON = "Other"

BACKUP_LAST_SUCCESS = Gauge(
    "controlplane_backup_last_success_timestamp_seconds",
    "When the newest Completed Backup of a BackupSchedule completed, in seconds since the "
    "epoch; absent until one has.",
    ["namespace", "name"],
    registry=REGISTRY,
)
BACKUP_LAST_FAILED = Gauge(
    "controlplane_backup_last_backup_failed",
    "1 while the newest finished Backup of a BackupSchedule has failed (its LastBackup "
    "condition is False), else 0.",
    ["namespace", "name"],
    registry=REGISTRY,
)
BACKUP_SCHEDULE_INTERVAL = Gauge(
    "controlplane_backup_schedule_interval_seconds",
    "The time between two runs of a BackupSchedule's cron, from its next run to the one after; "
    "absent while the schedule is suspended or invalid.",
    ["namespace", "name"],
    registry=REGISTRY,
)
BACKUP_SCHEDULE_CREATED = Gauge(
    "controlplane_backup_schedule_created_timestamp_seconds",
    "When a BackupSchedule was created, in seconds since the epoch: what a schedule that has "
    "never succeeded is measured from.",
    ["namespace", "name"],
    registry=REGISTRY,
)
BACKUP_FAILURES_TOTAL = Counter(
    "controlplane_backup_failures_total",
    "Backups of a BackupSchedule that failed for good, by the reason of their Failed condition.",
    ["namespace", "name", "reason"],
    registry=REGISTRY,
)
# Restore drills (BackupSchedule spec.verify), per schedule: namespace and name only.
DRILL_LAST_VERIFIED = Gauge(
    "controlplane_backup_last_verified_timestamp_seconds",
    "When a restore drill of a BackupSchedule last passed (its newest Completed Backup restored "
    "into a throwaway control plane and held every promise of its archive), in seconds since "
    "the epoch; absent until one has.",
    ["namespace", "name"],
    registry=REGISTRY,
)
DRILL_INTERVAL = Gauge(
    "controlplane_backup_drill_interval_seconds",
    "The time between two restore drills of a BackupSchedule (spec.verify.interval); absent "
    "while it asks for none.",
    ["namespace", "name"],
    registry=REGISTRY,
)
DRILL_LAST_FAILED = Gauge(
    "controlplane_backup_last_drill_failed",
    "1 while the newest restore drill of a BackupSchedule has failed (its Verified condition is "
    "False), else 0.",
    ["namespace", "name"],
    registry=REGISTRY,
)

INSTANCE_READY = Gauge(
    "controlplane_instance_ready",
    "1 while an Instance's Ready condition is True, else 0.",
    ["namespace", "name"],
    registry=REGISTRY,
)
INSTANCE_INFO = Gauge(
    "controlplane_instance_info",
    "Always 1: the Crossplane version an Instance's hosted control plane runs "
    "(status.atProvider.crossplaneVersion; ``unknown`` until the Space says).",
    ["namespace", "name", "crossplane_version"],
    registry=REGISTRY,
)
# The phases of status.atProvider.restore (provider.model.RestoreStatus).
RESTORE_PHASES = ("InProgress", "Completed", "Failed")
RESTORE_PHASE = Gauge(
    "controlplane_restore_phase",
    "1 for the phase an Instance's restore is in, 0 for the others; absent when it asks for "
    "no restore.",
    ["namespace", "name", "phase"],
    registry=REGISTRY,
)
RESTORE_OBJECTS_APPLIED = Gauge(
    "controlplane_restore_objects_applied",
    "Objects of the archive an Instance's restore has applied so far.",
    ["namespace", "name"],
    registry=REGISTRY,
)
RESTORE_OBJECTS = Gauge(
    "controlplane_restore_objects",
    "Objects in the archive an Instance's restore applies.",
    ["namespace", "name"],
    registry=REGISTRY,
)
# An HTTP status code, or client-go's ``<error>`` for a request that got no answer.
_CODE = re.compile(r"[1-5][0-9][0-9]|<error>")
# A release as the Space reports it (1.20.1, v2.0.0-up.1); anything else is ``other``.
_VERSION = re.compile(r"v?[0-9]+\.[0-9]+\.[0-9]+(?:[-+][0-9A-Za-z.-]{1,40})?")


def record_reconcile(controller: str, result: Result, duration_seconds: float) -> None:
    """Count one reconcile and observe how long it took.

    Args:
        controller: The controller's name.
        result: ``success``, ``error`` (also counted in the errors metric) or
            ``requeue``.
        duration_seconds: How long the reconcile took.

    Raises:
        ValueError: ``result`` is none of the three.
    """
    if result not in get_args(Result):
        msg = f"result must be one of {get_args(Result)}, not {result!r}"
        raise ValueError(msg)
    name = _name(controller)
    RECONCILE_TOTAL.labels(name, result).inc()
    if result == "error":
        RECONCILE_ERRORS_TOTAL.labels(name).inc()
    RECONCILE_DURATION_SECONDS.labels(name).observe(duration_seconds)


def set_workqueue_depth(controller: str, depth: int) -> None:
    """Set the controller's work queue depth."""
    WORKQUEUE_DEPTH.labels(_name(controller)).set(depth)


def track_workqueue_depth(controller: str, depth: Callable[[], float]) -> None:
    """Read the controller's work queue depth from ``depth`` at every scrape.

    For example ``track_workqueue_depth("instance", queue.__len__)``.
    """
    WORKQUEUE_DEPTH.labels(_name(controller)).set_function(depth)


def record_api_request(verb: str, resource: str, code: str) -> None:
    """Count one answered (or unanswered) request to an API server; a ``kube`` request hook.

    Args:
        verb: A Kubernetes verb or an HTTP method, in any case.
        resource: The resource's plural or kind, never an object's name.
        code: The answer's HTTP status code, or ``<error>`` when none came.
    """
    verb = verb.lower()
    API_REQUESTS_TOTAL.labels(
        verb if verb in VERBS else OTHER, _name(resource), code if _CODE.fullmatch(code) else OTHER
    ).inc()


def record_backup_schedule(
    namespace: str,
    name: str,
    *,
    last_success: float | None,
    last_failed: bool,
    interval: float | None = None,
    created: float | None = None,
) -> None:
    """Export what a BackupSchedule's newest Backups say.

    Args:
        namespace: The schedule's namespace.
        name: The schedule's name.
        last_success: When its newest Completed Backup completed (seconds since the
            epoch); None when none has, and then the series is absent.
        last_failed: Whether its newest finished Backup failed.
        interval: Seconds between its next run and the one after; None while it
            has no next run (suspended), and then the series is absent, so the
            backups-too-old alert does not fire for a schedule that is paused.
        created: When the schedule was created (seconds since the epoch).
    """
    labels = _schedule(namespace, name)
    for gauge, value in (
        (BACKUP_LAST_SUCCESS, last_success),
        (BACKUP_SCHEDULE_INTERVAL, interval),
        (BACKUP_SCHEDULE_CREATED, created),
    ):
        if value is None:
            _remove(gauge, *labels)
        else:
            gauge.labels(*labels).set(value)
    BACKUP_LAST_FAILED.labels(*labels).set(1 if last_failed else 0)


def count_backup_failure(namespace: str, name: str, reason: str) -> None:
    """Count one Backup of the schedule ``namespace/name`` that failed for good, with ``reason``."""
    label = reason if reason in BACKUP_FAILURE_REASONS else OTHER_REASON
    BACKUP_FAILURES_TOTAL.labels(*_schedule(namespace, name), label).inc()


def forget_backup_schedule(namespace: str, name: str) -> None:
    """Remove every series of a BackupSchedule that is gone."""
    labels = _schedule(namespace, name)
    _remove(BACKUP_LAST_SUCCESS, *labels)
    _remove(BACKUP_LAST_FAILED, *labels)
    _remove(BACKUP_SCHEDULE_INTERVAL, *labels)
    _remove(BACKUP_SCHEDULE_CREATED, *labels)
    for reason in (*BACKUP_FAILURE_REASONS, OTHER_REASON):
        _remove(BACKUP_FAILURES_TOTAL, *labels, reason)


def record_drill(namespace: str, name: str, *, last_verified: float | None, failed: bool) -> None:
    """Export where a BackupSchedule's restore drills stand.

    Args:
        namespace: The schedule's namespace.
        name: The schedule's name.
        last_verified: When a drill last passed (seconds since the epoch); None when
            none has, and then the series is absent.
        failed: Whether its newest drill failed.
    """
    labels = _schedule(namespace, name)
    if last_verified is None:
        _remove(DRILL_LAST_VERIFIED, *labels)
    else:
        DRILL_LAST_VERIFIED.labels(*labels).set(last_verified)
    DRILL_LAST_FAILED.labels(*labels).set(1 if failed else 0)


def record_drill_interval(namespace: str, name: str, interval: float) -> None:
    """Export the interval a BackupSchedule asks its restore drills to run at, in seconds."""
    DRILL_INTERVAL.labels(*_schedule(namespace, name)).set(interval)


def forget_drills(namespace: str, name: str) -> None:
    """Remove the drill series of a BackupSchedule that is gone or asks for no drills."""
    labels = _schedule(namespace, name)
    _remove(DRILL_LAST_VERIFIED, *labels)
    _remove(DRILL_LAST_FAILED, *labels)
    _remove(DRILL_INTERVAL, *labels)


def record_instance(
    namespace: str,
    name: str,
    *,
    ready: bool,
    crossplane_version: str | None,
    restore: tuple[str, int, int] | None,
) -> None:
    """Export what an Instance's status says: readiness, version, restore.

    Args:
        namespace: The Instance's namespace.
        name: The Instance's name.
        ready: Whether its Ready condition is True.
        crossplane_version: status.atProvider.crossplaneVersion, or None.
        restore: Its restore's (phase, objects applied, objects in the archive),
            or None when it has none; a phase outside ``RESTORE_PHASES`` counts
            as none.
    """
    labels = _schedule(namespace, name)
    INSTANCE_READY.labels(*labels).set(1 if ready else 0)
    version = crossplane_version or "unknown"
    if crossplane_version and not _VERSION.fullmatch(crossplane_version):
        version = OTHER
    _forget_info(labels, keep=version)
    INSTANCE_INFO.labels(*labels, version).set(1)
    if restore is None or restore[0] not in RESTORE_PHASES:
        _forget_restore(labels)
        return
    phase, applied, total = restore
    for each in RESTORE_PHASES:
        RESTORE_PHASE.labels(*labels, each).set(1 if each == phase else 0)
    RESTORE_OBJECTS_APPLIED.labels(*labels).set(applied)
    RESTORE_OBJECTS.labels(*labels).set(total)


def forget_instance(namespace: str, name: str) -> None:
    """Remove every series of an Instance that is gone."""
    labels = _schedule(namespace, name)
    _remove(INSTANCE_READY, *labels)
    _forget_info(labels, keep=None)
    _forget_restore(labels)


def _forget_info(labels: tuple[str, str], keep: str | None) -> None:
    """Remove the Instance's info series but the one with version ``keep``."""
    for metric in INSTANCE_INFO.collect():
        for sample in metric.samples:
            own = (sample.labels["namespace"], sample.labels["name"]) == labels
            if own and sample.labels["crossplane_version"] != keep:
                _remove(INSTANCE_INFO, *labels, sample.labels["crossplane_version"])


def _forget_restore(labels: tuple[str, str]) -> None:
    for phase in RESTORE_PHASES:
        _remove(RESTORE_PHASE, *labels, phase)
    _remove(RESTORE_OBJECTS_APPLIED, *labels)
    _remove(RESTORE_OBJECTS, *labels)


def _schedule(namespace: str, name: str) -> tuple[str, str]:
    """A schedule's labels: DNS-1123 names as the API server checks them, else ``other``."""
    return (
        namespace if dns.is_label(namespace) else OTHER,
        name if dns.is_subdomain(name) else OTHER,
    )


def _remove(metric: Gauge | Counter, *labels: str) -> None:
    """Remove one series, if it is there."""
    with contextlib.suppress(KeyError):
        metric.remove(*labels)


def _name(value: str) -> str:
    return value if _NAME.fullmatch(value) else OTHER


class Server:
    """The metrics and health server, serving from a daemon thread until stopped."""

    def __init__(self, httpd: ThreadingHTTPServer) -> None:
        self._httpd = httpd
        self._lock = threading.Lock()
        self._stopped = False
        # A short poll keeps stop() quick: shutdown() waits for the loop to notice.
        self._thread = threading.Thread(
            target=httpd.serve_forever, args=(0.05,), name="metrics-server", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        """The port the server listens on (the one picked, when started on port 0)."""
        return int(self._httpd.server_address[1])

    def stop(self) -> None:
        """Stop serving and close the listening socket; calling it again does nothing."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def start(address: str, port: int, ready: Callable[[], bool]) -> Server:
    """Serve /metrics, /healthz and /readyz on ``address:port``.

    Args:
        address: The address to listen on: an IPv4 or IPv6 address, or a host name.
        port: The port; 0 picks a free one (see ``Server.port``).
        ready: Whether the provider is ready; /readyz answers 200 when it returns
            True and 503 otherwise.

    Returns:
        The running server.

    Raises:
        OSError: The address cannot be bound.
    """

    class Handler(_Handler):
        is_ready = staticmethod(ready)

    server_class = _IPv6Server if ":" in address else _Server
    return Server(server_class((address, port), Handler))


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _IPv6Server(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    is_ready: Callable[[], bool]

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self._answer(HTTPStatus.OK, encoder(REGISTRY), content_type)
        elif path == "/healthz":
            self._answer(HTTPStatus.OK, b"ok\n")
        elif path == "/readyz":
            ready, reason = self._readiness()
            status = HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE
            self._answer(status, reason.encode() + b"\n")
        else:
            self._answer(HTTPStatus.NOT_FOUND, b"not found\n")

    def _readiness(self) -> tuple[bool, str]:
        try:
            ready = self.is_ready()
        except Exception as error:  # noqa: BLE001 (a failing check means not ready)
            # Only the type: the exception's text may quote a secret.
            log.warning("readiness check failed", extra={"fields": {"error": type(error).__name__}})
            return False, "readiness check failed"
        return (True, "ok") if ready else (False, "not ready")

    def _answer(
        self, status: HTTPStatus, body: bytes, content_type: str = "text/plain; charset=utf-8"
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        # The base class writes every request to stderr; scrapes every few
        # seconds belong at debug level, in the provider's JSON logs.
        log.debug("metrics server: " + format, *args)
