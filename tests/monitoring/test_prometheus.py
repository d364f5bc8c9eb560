"""The real Prometheus server loads the shipped rules, scrapes our metrics server, alerts.

The provider's own /metrics server runs in this process; ``sandbox.prometheus``
(the platform's Prometheus, built by ``tools/build.sh prometheus``) scrapes it
and evaluates the shipped rules file every second: a schedule's newest Backup
failing fires ControlPlaneBackupFailing, and its next Backup succeeding
resolves it. The platform's own scenario, with the real controllers, is
``tests/system/test_backup_failures.py``.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from provider.runtime import metrics
from sandbox.prometheus import Alert, Prometheus
from tools.monitoring import alerts, generate

DEADLINE = 60.0
FAILING = Alert("ControlPlaneBackupFailing", "team-live", "ctp")


def _until(what: str, holds: Callable[[], bool]) -> None:
    """Wait until ``holds()``: polling the server's API, with a deadline."""
    deadline = time.monotonic() + DEADLINE
    while not holds():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE}s: {what}")
        time.sleep(0.5)


def live(prometheus: Prometheus) -> list[Alert]:
    """The alerts firing for this test's schedule (other tests of the process export more)."""
    return [alert for alert in prometheus.firing() if alert.namespace == FAILING.namespace]


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    subprocess.run([str(generate.ROOT / "tools" / "build.sh"), "prometheus"], check=True)
    server = metrics.start("127.0.0.1", 0, lambda: True)
    prometheus = Prometheus(
        tmp_path, {"controlplane-backup-controller": [server.port]}, interval="1s"
    )
    prometheus.start()
    try:
        yield prometheus
    finally:
        prometheus.stop()
        server.stop()
        metrics.forget_backup_schedule("team-live", "ctp")


def test_a_failing_backup_fires_in_prometheus_and_resolves_when_one_succeeds(
    prometheus: Prometheus,
) -> None:
    assert prometheus.rules == generate.RULES
    assert prometheus.rule_names() == {alert.name for alert in alerts.ALERTS}

    metrics.record_backup_schedule(
        "team-live", "ctp", last_success=time.time(), last_failed=True, interval=3600.0
    )
    _until("ControlPlaneBackupFailing fires", lambda: FAILING in prometheus.firing())
    assert live(prometheus) == [FAILING], "nothing else: the last success is recent"

    metrics.record_backup_schedule(
        "team-live", "ctp", last_success=time.time(), last_failed=False, interval=3600.0
    )
    _until("ControlPlaneBackupFailing resolves", lambda: not live(prometheus))
