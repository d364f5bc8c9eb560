"""The real Prometheus server loads the shipped rules, scrapes our metrics server, alerts.

Not yet the sandbox's whole platform (issue 29 asks for that too): the provider's
own /metrics server runs in this process, Prometheus (built by ``tools/build.sh
prometheus`` from the module promtool comes from) scrapes it every second and
evaluates the shipped rules file every second; a schedule's newest Backup
failing fires ControlPlaneBackupFailing, and its next Backup succeeding
resolves it.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.runtime import metrics
from sandbox.apiserver import free_port
from sandbox.processes import Process
from tools.monitoring import alerts, generate

ROOT = generate.ROOT
DEADLINE = 60.0


def _get(port: int, path: str) -> Any:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
        return json.load(answer)


def _until(what: str, holds: Callable[[], bool]) -> None:
    """Wait until ``holds()``: polling the server's API, with a deadline."""
    deadline = time.monotonic() + DEADLINE
    while not holds():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE}s: {what}")
        time.sleep(0.5)


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[int, metrics.Server]]:
    subprocess.run([str(ROOT / "tools" / "build.sh"), "prometheus"], check=True)
    server = metrics.start("127.0.0.1", 0, lambda: True)
    port = free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(generate.RULES)],
                "scrape_configs": [
                    {
                        "job_name": "controlplane-backup-controller",
                        "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
                    }
                ],
            }
        )
    )
    process = Process(
        "prometheus",
        [
            str(ROOT / ".tools" / "bin" / "prometheus"),
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        tmp_path / "prometheus.log",
    )

    def ready() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    process.start(ready, timeout=60)
    try:
        yield port, server
    finally:
        process.stop()
        server.stop()
        metrics.forget_backup_schedule("team-live", "ctp")


def _firing(port: int) -> set[str]:
    alerts = _get(port, "/api/v1/alerts")["data"]["alerts"]
    return {
        a["labels"]["alertname"]
        for a in alerts
        if a["state"] == "firing" and a["labels"].get("namespace") == "team-live"
    }


def test_a_failing_backup_fires_in_prometheus_and_resolves_when_one_succeeds(
    prometheus: tuple[int, metrics.Server],
) -> None:
    port, _ = prometheus
    groups = _get(port, "/api/v1/rules")["data"]["groups"]
    loaded = {rule["name"] for group in groups for rule in group["rules"]}
    assert loaded == {alert["alert"] for alert in alerts.rules()["groups"][0]["rules"]}

    metrics.record_backup_schedule(
        "team-live", "ctp", last_success=time.time(), last_failed=True, interval=3600.0
    )
    _until("ControlPlaneBackupFailing fires", lambda: "ControlPlaneBackupFailing" in _firing(port))
    assert "ControlPlaneBackupsTooOld" not in _firing(port)

    metrics.record_backup_schedule(
        "team-live", "ctp", last_success=time.time(), last_failed=False, interval=3600.0
    )
    _until("ControlPlaneBackupFailing resolves", lambda: not _firing(port))
