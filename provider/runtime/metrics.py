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
    "Requests to Kubernetes API servers, by verb and resource.",
    ["verb", "resource"],
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
BACKUP_FAILURES_TOTAL = Counter(
    "controlplane_backup_failures_total",
    "Backups of a BackupSchedule that failed for good, by the reason of their Failed condition.",
    ["namespace", "name", "reason"],
    registry=REGISTRY,
)


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


def record_api_request(verb: str, resource: str) -> None:
    """Count one request to an API server; a ``kube`` request hook.

    Args:
        verb: A Kubernetes verb or an HTTP method, in any case.
        resource: The resource's plural or kind, never an object's name.
    """
    verb = verb.lower()
    API_REQUESTS_TOTAL.labels(verb if verb in VERBS else OTHER, _name(resource)).inc()


def record_backup_schedule(
    namespace: str, name: str, *, last_success: float | None, last_failed: bool
) -> None:
    """Export what a BackupSchedule's newest Backups say.

    Args:
        namespace: The schedule's namespace.
        name: The schedule's name.
        last_success: When its newest Completed Backup completed (seconds since the
            epoch); None when none has, and then the series is absent.
        last_failed: Whether its newest finished Backup failed.
    """
    labels = _schedule(namespace, name)
    if last_success is None:
        _remove(BACKUP_LAST_SUCCESS, *labels)
    else:
        BACKUP_LAST_SUCCESS.labels(*labels).set(last_success)
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
    for reason in (*BACKUP_FAILURE_REASONS, OTHER_REASON):
        _remove(BACKUP_FAILURES_TOTAL, *labels, reason)


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
