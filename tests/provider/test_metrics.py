"""The provider's metrics and its /metrics, /healthz and /readyz server."""

from __future__ import annotations

import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from provider.runtime import metrics

TIMEOUT = 5.0


@dataclass
class Answer:
    status: int
    body: str
    content_type: str


def fetch(port: int, path: str, host: str = "127.0.0.1") -> Answer:
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=TIMEOUT) as rsp:
            return Answer(rsp.status, rsp.read().decode(), rsp.headers["Content-Type"])
    except urllib.error.HTTPError as error:
        with error:
            return Answer(error.code, error.read().decode(), error.headers["Content-Type"])


@pytest.fixture
def ready() -> threading.Event:
    return threading.Event()


@pytest.fixture
def server(ready: threading.Event) -> Iterator[metrics.Server]:
    running = metrics.start("127.0.0.1", 0, ready.is_set)
    yield running
    running.stop()


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_the_server_answers_on_the_free_port_it_picked(server: metrics.Server) -> None:
    assert server.port != 0
    assert fetch(server.port, "/healthz") == Answer(200, "ok\n", "text/plain; charset=utf-8")


def test_readyz_is_503_with_a_reason_until_the_callback_says_ready(
    server: metrics.Server, ready: threading.Event
) -> None:
    assert fetch(server.port, "/readyz") == Answer(503, "not ready\n", "text/plain; charset=utf-8")

    ready.set()
    assert fetch(server.port, "/readyz").status == 200

    ready.clear()
    assert fetch(server.port, "/readyz").status == 503


def test_readyz_is_503_when_the_callback_raises_and_hides_the_error_text() -> None:
    def broken() -> bool:
        raise RuntimeError("token=hunter2")

    running = metrics.start("127.0.0.1", 0, broken)
    try:
        answer = fetch(running.port, "/readyz")
        assert fetch(running.port, "/healthz").status == 200, "liveness must not depend on it"
    finally:
        running.stop()

    assert answer.status == 503
    assert answer.body == "readiness check failed\n"


def test_an_unknown_path_is_404(server: metrics.Server) -> None:
    assert fetch(server.port, "/secrets").status == 404


def test_metrics_lists_every_metric_after_recording(server: metrics.Server) -> None:
    metrics.record_reconcile("instance", "success", 0.2)
    metrics.record_reconcile("instance", "error", 1.5)
    metrics.set_workqueue_depth("instance", 3)
    metrics.record_api_request("get", "instances", "200")

    answer = fetch(server.port, "/metrics")

    assert answer.status == 200
    assert answer.content_type.startswith("text/plain")
    for name in (
        'controlplane_provider_reconcile_total{controller="instance",result="success"}',
        'controlplane_provider_reconcile_errors_total{controller="instance"}',
        'controlplane_provider_reconcile_duration_seconds_bucket{controller="instance",le="2.5"}',
        'controlplane_provider_workqueue_depth{controller="instance"} 3.0',
        'controlplane_provider_api_requests_total{code="200",resource="instances",verb="get"}',
    ):
        assert name in answer.body


def test_metrics_keeps_out_what_others_register_in_the_global_registry(
    server: metrics.Server,
) -> None:
    # The default registry carries process and platform collectors.
    assert "python_info" not in fetch(server.port, "/metrics").body


def test_an_errored_reconcile_is_counted_in_both_counters_and_the_histogram() -> None:
    before_total = sample("controlplane_provider_reconcile_total", controller="c1", result="error")
    before_errors = sample("controlplane_provider_reconcile_errors_total", controller="c1")
    before_count = sample("controlplane_provider_reconcile_duration_seconds_count", controller="c1")

    metrics.record_reconcile("c1", "error", 0.01)
    metrics.record_reconcile("c1", "requeue", 0.01)

    total = sample("controlplane_provider_reconcile_total", controller="c1", result="error")
    assert total == before_total + 1
    errors = sample("controlplane_provider_reconcile_errors_total", controller="c1")
    assert errors == before_errors + 1
    count = sample("controlplane_provider_reconcile_duration_seconds_count", controller="c1")
    assert count == before_count + 2


def test_a_result_outside_the_three_is_refused() -> None:
    with pytest.raises(ValueError, match="result must be one of"):
        metrics.record_reconcile("c1", "maybe", 0.1)  # type: ignore[arg-type]


def test_the_depth_callback_is_read_at_every_scrape(server: metrics.Server) -> None:
    depth = [4]
    metrics.track_workqueue_depth("tracked", lambda: depth[0])
    assert 'controlplane_provider_workqueue_depth{controller="tracked"} 4.0' in (
        fetch(server.port, "/metrics").body
    )

    depth[0] = 0
    assert 'controlplane_provider_workqueue_depth{controller="tracked"} 0.0' in (
        fetch(server.port, "/metrics").body
    )


@dataclass
class RequestCase:
    reason: str
    verb: str
    resource: str
    want_verb: str
    want_resource: str
    code: str = "200"
    want_code: str = "200"


@pytest.mark.parametrize(
    "case",
    [
        RequestCase("a verb and a plural", "list", "instances", "list", "instances"),
        RequestCase("an HTTP method is lower-cased", "PATCH", "secrets", "patch", "secrets"),
        RequestCase("a kind keeps its case", "get", "Instance", "get", "Instance"),
        RequestCase(
            "a resource with its group",
            "watch",
            "controlplanes.spaces.upbound.io",
            "watch",
            "controlplanes.spaces.upbound.io",
        ),
        RequestCase("an unknown verb becomes other", "FROB", "secrets", "other", "secrets"),
        RequestCase(
            "a bearer token instead of a resource becomes other",
            "get",
            "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
            "get",
            "other",
        ),
        RequestCase("a path becomes other", "get", "namespaces/team-a/secrets", "get", "other"),
        RequestCase("an over-long value becomes other", "get", "a" * 64, "get", "other"),
        RequestCase("an empty value becomes other", "get", "", "get", "other"),
        RequestCase(
            "a Space's refusal keeps its status code",
            "patch",
            "controlplanes",
            "patch",
            "controlplanes",
            code="503",
            want_code="503",
        ),
        RequestCase(
            "a request that got no answer is an error, as in client-go",
            "get",
            "controlplanes",
            "get",
            "controlplanes",
            code="<error>",
            want_code="<error>",
        ),
        RequestCase(
            "anything but a status code becomes other",
            "get",
            "secrets",
            "get",
            "secrets",
            code="503 Service Unavailable",
            want_code="other",
        ),
    ],
    ids=lambda c: c.reason,
)
def test_api_request_labels_are_only_verbs_kinds_and_status_codes(case: RequestCase) -> None:
    name = "controlplane_provider_api_requests_total"
    labels = {"verb": case.want_verb, "resource": case.want_resource, "code": case.want_code}
    before = sample(name, **labels)

    metrics.record_api_request(case.verb, case.resource, case.code)

    assert sample(name, **labels) == before + 1


def test_a_controller_name_that_is_not_a_name_becomes_other(server: metrics.Server) -> None:
    metrics.set_workqueue_depth("password=hunter2", 7)

    body = fetch(server.port, "/metrics").body
    assert 'controlplane_provider_workqueue_depth{controller="other"} 7.0' in body
    assert "hunter2" not in body


def test_stop_frees_the_port_for_a_new_server() -> None:
    first = metrics.start("127.0.0.1", 0, lambda: True)
    port = first.port
    assert fetch(port, "/healthz").status == 200

    first.stop()
    first.stop()  # a second stop does nothing

    with pytest.raises(urllib.error.URLError):
        fetch(port, "/healthz")
    second = metrics.start("127.0.0.1", port, lambda: True)
    try:
        assert second.port == port
        assert fetch(port, "/readyz").status == 200
    finally:
        second.stop()


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback here")
def test_the_server_listens_on_an_ipv6_address() -> None:
    running = metrics.start("::1", 0, lambda: True)
    try:
        assert fetch(running.port, "/healthz", host="[::1]").status == 200
    finally:
        running.stop()


def _schedule_sample(name: str, namespace: str, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(
        name, {"namespace": namespace, "name": "nightly", **labels}
    )


def test_a_schedules_backup_metrics_are_set_counted_and_forgotten(server: metrics.Server) -> None:
    namespace = "team-metrics"
    metrics.record_backup_schedule(namespace, "nightly", last_success=None, last_failed=True)
    assert _schedule_sample("controlplane_backup_last_backup_failed", namespace) == 1
    assert _schedule_sample("controlplane_backup_last_success_timestamp_seconds", namespace) is None

    metrics.count_backup_failure(namespace, "nightly", "StorageRefused")
    metrics.count_backup_failure(namespace, "nightly", "StorageRefused")
    metrics.record_backup_schedule(
        namespace, "nightly", last_success=1765000000.0, last_failed=False
    )
    assert _schedule_sample("controlplane_backup_last_backup_failed", namespace) == 0
    stamp = _schedule_sample("controlplane_backup_last_success_timestamp_seconds", namespace)
    assert stamp == 1765000000.0
    failures = "controlplane_backup_failures_total"
    assert _schedule_sample(failures, namespace, reason="StorageRefused") == 2
    text = fetch(server.port, "/metrics").body
    assert "# TYPE controlplane_backup_failures_total counter" in text
    assert "# TYPE controlplane_backup_last_success_timestamp_seconds gauge" in text

    metrics.forget_backup_schedule(namespace, "nightly")
    for name in ("controlplane_backup_last_backup_failed", failures):
        assert _schedule_sample(name, namespace) is None
    assert _schedule_sample(failures, namespace, reason="StorageRefused") is None
    assert namespace not in fetch(server.port, "/metrics").body


@dataclass(frozen=True)
class BackupLabelCase:
    reason: str
    given: tuple[str, str, str]
    want: tuple[str, str, str]


BACKUP_LABEL_CASES = [
    BackupLabelCase(
        "A failure reason the Backup controller writes is kept.",
        ("team-a", "nightly", "DeadlineExceeded"),
        ("team-a", "nightly", "DeadlineExceeded"),
    ),
    BackupLabelCase(
        "Any other reason is Other: the set of reasons is fixed.",
        ("team-a", "nightly", "SomethingNew"),
        ("team-a", "nightly", "Other"),
    ),
    BackupLabelCase(
        "A message passed as a reason by mistake never becomes a label.",
        ("team-a", "nightly", "put s3://b/k failed: AccessDenied"),
        ("team-a", "nightly", "Other"),
    ),
    BackupLabelCase(
        "A namespace or name that is no DNS-1123 name is other.",
        ("Team A", "x" * 300, "BackupFailed"),
        ("other", "other", "BackupFailed"),
    ),
]


@pytest.mark.parametrize("case", BACKUP_LABEL_CASES, ids=lambda case: case.reason)
def test_backup_failure_labels_are_bounded(case: BackupLabelCase) -> None:
    namespace, name, reason = case.want
    labels = {"namespace": namespace, "name": name, "reason": reason}
    before = metrics.REGISTRY.get_sample_value("controlplane_backup_failures_total", labels) or 0
    metrics.count_backup_failure(*case.given)
    after = metrics.REGISTRY.get_sample_value("controlplane_backup_failures_total", labels)
    assert after == before + 1


def _sample(metric: str, /, **labels: str) -> float | None:
    return metrics.REGISTRY.get_sample_value(metric, labels)


def test_a_schedules_interval_and_creation_are_exported_and_absent_while_suspended() -> None:
    metrics.record_backup_schedule(
        "team-i", "ctp", last_success=None, last_failed=False, interval=3600.0, created=100.0
    )
    labels = {"namespace": "team-i", "name": "ctp"}
    assert _sample("controlplane_backup_schedule_interval_seconds", **labels) == 3600.0
    assert _sample("controlplane_backup_schedule_created_timestamp_seconds", **labels) == 100.0
    metrics.record_backup_schedule("team-i", "ctp", last_success=None, last_failed=False)
    assert _sample("controlplane_backup_schedule_interval_seconds", **labels) is None
    metrics.forget_backup_schedule("team-i", "ctp")
    assert _sample("controlplane_backup_schedule_created_timestamp_seconds", **labels) is None


@dataclass(frozen=True)
class InstanceCase:
    name: str
    reason: str
    version: str | None
    restore: tuple[str, int, int] | None
    want_version: str
    want_phase: str | None


INSTANCE_CASES = [
    InstanceCase(
        "a release is its own label value",
        "a Space reports releases such as 1.20.1 or v2.0.0-up.1",
        "v2.0.0-up.1",
        None,
        "v2.0.0-up.1",
        None,
    ),
    InstanceCase(
        "a version that is no release becomes other",
        "a free text version would grow the series without bound",
        "anything you like, really",
        None,
        "other",
        None,
    ),
    InstanceCase(
        "no version yet is unknown",
        "the Space has not said yet",
        None,
        None,
        "unknown",
        None,
    ),
    InstanceCase(
        "a restore in progress sets its phase and progress",
        "one phase is 1, the others 0",
        "1.20.1",
        ("InProgress", 3, 10),
        "1.20.1",
        "InProgress",
    ),
    InstanceCase(
        "a phase that is none of the three counts as no restore",
        "the phase label is an enum",
        "1.20.1",
        ("Sideways", 3, 10),
        "1.20.1",
        None,
    ),
]


@pytest.mark.parametrize("case", INSTANCE_CASES, ids=[c.name for c in INSTANCE_CASES])
def test_an_instances_status_is_exported_with_bounded_labels(case: InstanceCase) -> None:
    labels = {"namespace": "team-j", "name": "ctp"}
    metrics.record_instance(
        "team-j", "ctp", ready=False, crossplane_version="1.19.0", restore=("Completed", 1, 1)
    )
    metrics.record_instance(
        "team-j", "ctp", ready=True, crossplane_version=case.version, restore=case.restore
    )
    assert _sample("controlplane_instance_ready", **labels) == 1, case.reason
    assert _sample("controlplane_instance_info", **labels, crossplane_version=case.want_version)
    # The previous version's series went: one info series per Instance.
    assert _sample("controlplane_instance_info", **labels, crossplane_version="1.19.0") is None
    for phase in metrics.RESTORE_PHASES:
        value = _sample("controlplane_restore_phase", **labels, phase=phase)
        if case.want_phase is None:
            assert value is None, case.reason
        else:
            assert value == (1 if phase == case.want_phase else 0), case.reason
    metrics.forget_instance("team-j", "ctp")
    assert _sample("controlplane_instance_ready", **labels) is None
    assert (
        _sample("controlplane_instance_info", **labels, crossplane_version=case.want_version)
        is None
    )
