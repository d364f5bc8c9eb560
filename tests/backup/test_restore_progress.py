"""A long restore, as the provider process runs it: its progress is visible while it runs,
and a provider killed half-way resumes it at the step it reached, with the same end.

Real parts: the provider process (``controlplane-provider``), API servers for the
local cluster, the Space and the hosted control plane, and SeaweedFS for the archive.
"""

from __future__ import annotations

import asyncio
import copy
import os
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from sandbox.s3 import SeaweedFS
from sandbox.spaces import Kube, ProviderProcess, condition, wait_for
from tests.backup.test_instance_restore import restoring_instance
from tests.backup.test_roundtrip import (
    BUCKET,
    NAMESPACE,
    PROVIDER_CRD,
    Planes,
    backup_object,
    ensure_bucket,
    ensure_default_space,
    instance_with_kubeconfig,
    run_backup,
)

APP = "big-app"
CONFIGMAPS = 600
SECRETS = 400
# Enough managed resources that the managed step lasts a while, for the kill to land in it.
BUCKETS = 2000
# The restore has begun landing managed resources once this one is there.
LANDED = "bucket-0100"
# Not paused in the backup: paused by the restore while it lands, unpaused at its end.
PAUSED_BY_RESTORE = "bucket-0101"
RESTORE_DEADLINE = 600.0


def paused_in_backup(index: int) -> bool:
    return index % 10 == 0


def seed(source: Kube) -> int:
    """Configmaps, secrets and managed resources (a tenth paused); the count backed up."""
    source.extensions.create_custom_resource_definition(copy.deepcopy(PROVIDER_CRD))
    wait_for("the CRD", partial(source.established, PROVIDER_CRD["metadata"]["name"]))
    source.namespace(APP)

    def one(index: int) -> None:
        if index < CONFIGMAPS:
            source.core.create_namespaced_config_map(
                APP, {"metadata": {"name": f"config-{index:04}"}, "data": {"v": "x" * 100}}
            )
        elif index < CONFIGMAPS + SECRETS:
            source.put_secret(APP, f"secret-{index:04}", {"token": os.urandom(32)})
        else:
            item = index - CONFIGMAPS - SECRETS
            annotations = {"crossplane.io/paused": "true"} if paused_in_backup(item) else {}
            source.create(
                "buckets",
                {
                    "apiVersion": "s3.example.org/v1",
                    "kind": "Bucket",
                    "metadata": {
                        "name": f"bucket-{item:04}",
                        "namespace": APP,
                        "annotations": annotations,
                    },
                    "spec": {"forProvider": {"region": "eu-west-1", "index": item}},
                },
                "s3.example.org",
                "v1",
            )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(CONFIGMAPS + SECRETS + BUCKETS)))
    # default and the app namespace are backed up too.
    return CONFIGMAPS + SECRETS + BUCKETS + 2


def restore_of(instance: dict[str, Any] | None) -> dict[str, Any]:
    return dict(
        (((instance or {}).get("status") or {}).get("atProvider") or {}).get("restore") or {}
    )


def annotations_of(obj: dict[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def test_a_restore_shows_its_progress_and_resumes_after_the_provider_is_killed(
    planes: Planes,
    space: tuple[Kube, Kube],
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    space_cluster, hosted = space
    local = planes.local
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    expected = seed(planes.source)
    # The Space the restored Instance is made in; its host is the source plane's too.
    ensure_default_space(local, space_cluster.server)
    instance_with_kubeconfig(local, planes.source.server, "big-origin")
    local.create("backups", backup_object("big", "big-origin", seaweed.endpoint, "team-a/big/"))
    asyncio.run(run_backup(local, "big", seaweed.endpoint))
    assert local.get("backups", NAMESPACE, "big")["status"]["objects"] == expected  # type: ignore[index]

    # Crossplane's package manager would install the CRD in the new control plane.
    hosted.extensions.create_custom_resource_definition(copy.deepcopy(PROVIDER_CRD))
    local.create("instances", restoring_instance("big", "big"))

    def instance() -> dict[str, Any] | None:
        return local.get("instances", NAMESPACE, "big")

    def mid_restore() -> dict[str, Any] | None:
        found = instance()
        restore = restore_of(found)
        if restore.get("phase") == "InProgress" and 0 < restore.get("applied", 0) < expected:
            return found
        return None

    def landing_managed() -> dict[str, Any] | None:
        found = instance()
        if restore_of(found).get("step") != "managed":
            return None
        landed = hosted.get("buckets", APP, LANDED, "s3.example.org", "v1")
        return found if landed is not None else None

    env = {"ALLOWED_S3_ENDPOINTS": seaweed.endpoint}
    first = ProviderProcess(
        local.server.kubeconfig_path, tmp_path / "first.log", "--poll", "1s", env=env
    ).start()
    try:
        # Seen from another client while the restore runs: the step, the counts, the condition.
        seen = wait_for("the restore in progress", mid_restore, timeout=RESTORE_DEADLINE)
        progress = restore_of(seen)
        assert progress["backupName"] == "big"
        assert progress["total"] == expected
        assert progress["step"] in {"namespaces", "configmaps", "secrets", "managed"}
        started_at = progress["startedAt"]
        restored = condition(seen, "Restored")
        assert (restored["status"], restored["reason"]) == ("False", "RestoreInProgress")
        assert restored["message"].startswith(f"restoring Backup big: step {progress['step']}, ")
        assert condition(seen, "Ready").get("status") != "True"

        killed_at = wait_for("managed resources landing", landing_managed, timeout=RESTORE_DEADLINE)
        first.kill()
    finally:
        first.stop()

    # Killed half-way: the record still says where it stood, and what landed is paused.
    stopped = restore_of(instance())
    assert stopped["phase"] == "InProgress", stopped
    assert stopped["step"] == restore_of(killed_at)["step"] == "managed"
    assert stopped["startedAt"] == started_at
    landed = hosted.get("buckets", APP, LANDED, "s3.example.org", "v1")
    assert annotations_of(landed).get("crossplane.io/paused") == "true"

    second = ProviderProcess(
        local.server.kubeconfig_path, tmp_path / "second.log", "--poll", "1s", env=env
    ).start()
    try:

        def completed() -> dict[str, Any] | None:
            found = instance()
            return found if restore_of(found).get("phase") == "Completed" else None

        done = wait_for("the restore to complete", completed, timeout=RESTORE_DEADLINE)
        ready = wait_for(
            "Ready",
            lambda: (found := instance()) and condition(found, "Ready").get("status") == "True",
            timeout=120,
        )
        assert ready
        log = second.log()
    finally:
        second.stop()

    final = restore_of(done)
    # Resumed, not started over: the same start, counted once, and the log says where.
    assert final["startedAt"] == started_at
    assert final["applied"] == final["total"] == expected
    assert '"message": "restore resumes"' in log and '"step": "managed"' in log, log[-2000:]
    restored = condition(done, "Restored")
    assert (restored["status"], restored["reason"]) == ("True", "RestoreCompleted")
    assert restored["message"] == f"restored {expected} objects from Backup big"

    # The same end as an uninterrupted restore: everything there, paused as in the backup.
    configmaps = {
        c.metadata.name
        for c in hosted.core.list_namespaced_config_map(APP).items
        if c.metadata.name != "kube-root-ca.crt"
    }
    assert configmaps == {f"config-{i:04}" for i in range(CONFIGMAPS)}
    secrets = {s.metadata.name for s in hosted.core.list_namespaced_secret(APP).items}
    assert secrets == {f"secret-{i:04}" for i in range(CONFIGMAPS, CONFIGMAPS + SECRETS)}
    buckets = hosted.list_of("buckets", APP, "s3.example.org", "v1")
    assert len(buckets) == BUCKETS
    paused = {
        b["metadata"]["name"]
        for b in buckets
        if annotations_of(b).get("crossplane.io/paused") == "true"
    }
    assert paused == {f"bucket-{i:04}" for i in range(BUCKETS) if paused_in_backup(i)}, (
        "paused by the restore before the kill, yet unpaused at its end; paused in the backup, "
        "still paused"
    )
    assert PAUSED_BY_RESTORE not in paused
