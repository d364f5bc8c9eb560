"""``controlplane-backup-controller`` as its own process: a Backup goes to S3 and completes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.s3 import SeaweedFS
from sandbox.spaces import ProviderProcess, condition, wait_for
from tests.backup.test_roundtrip import (
    BUCKET,
    NAMESPACE,
    Planes,
    backup_object,
    ensure_bucket,
    instance_with_kubeconfig,
)


def test_the_backup_controller_completes_a_backup_and_serves_its_metrics(
    planes: Planes, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    instance_with_kubeconfig(planes.local, planes.source.server, "process")
    process = ProviderProcess(
        planes.local.server.kubeconfig_path,
        tmp_path / "controller.log",
        # The operator allows the test's plain-http loopback S3 explicitly.
        "--allowed-s3-endpoint",
        seaweed.endpoint,
        command="controlplane-backup-controller",
    ).start()
    try:
        planes.local.create(
            "backups", backup_object("by-process", "process", seaweed.endpoint, "team-a/process/")
        )

        def completed() -> dict[str, object] | None:
            found = planes.local.get("backups", NAMESPACE, "by-process")
            return found if condition(found, "Completed").get("status") == "True" else None

        found = wait_for("the Backup Completed", completed)
        assert found["status"]["phase"] == "Completed"  # type: ignore[index]
        assert "controlplane_provider_reconcile_total" in process.metrics()
        assert seaweed.secret_key not in process.log()
    finally:
        assert process.stop() == 0
