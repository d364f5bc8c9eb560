"""Restores that never finish hold no reconcile: another team's Instance is Ready within a poll.

A restore once ran inside its Instance's reconcile. One waiting for a CRD that
never comes held a worker for the whole wait (five minutes), and was tried
again at every poll: with as many such Instances as workers, no other team's
Instance was reconciled at all. Restores now run in the provider's pool, at
most ``--max-restores`` at once and one per namespace.

Real parts: the provider process, API servers for the local cluster, the
Space and the hosted control plane (which never gets the CRD the archive's
objects need), SeaweedFS for the archives.
"""

from __future__ import annotations

import asyncio
import copy
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.backup.controllers.backups import BackupReconciler
from provider.kube import Cluster
from sandbox.s3 import SeaweedFS
from sandbox.spaces import Kube, ProviderProcess, condition, wait_for
from tests.backup.test_instance_restore import restoring_instance
from tests.backup.test_roundtrip import (
    BUCKET,
    PROVIDER_CRD,
    Planes,
    backup_object,
    ensure_bucket,
    ensure_default_space,
    instance_with_kubeconfig,
    operator_allows,
)

STUCK = 10
MAX_RESTORES = 2
POLL_SECONDS = 1
# How long the other team's Instance may take to be Ready: one poll, and the
# Space's and the API servers' own time, which a quiet run measures at about a second.
ONE_POLL_AND_SPACE = 10.0


def team(index: int) -> str:
    return f"stuck-{index}"


def seed(source: Kube) -> None:
    """One managed resource of a provider's CRD: a restore of it waits for that CRD."""
    source.extensions.create_custom_resource_definition(copy.deepcopy(PROVIDER_CRD))
    wait_for("the CRD", partial(source.established, PROVIDER_CRD["metadata"]["name"]))
    source.namespace("app")
    source.create(
        "buckets",
        {
            "apiVersion": "s3.example.org/v1",
            "kind": "Bucket",
            "metadata": {"name": "data", "namespace": "app"},
            "spec": {"forProvider": {"region": "eu-west-1"}},
        },
        "s3.example.org",
        "v1",
    )


def back_up(local: Kube, source: Kube, namespace: str, endpoint: str) -> None:
    """A Completed Backup ``origin-1`` of ``source``, in ``namespace``."""
    instance_with_kubeconfig(local, source.server, "origin", namespace)
    backup = backup_object("origin-1", "origin", endpoint, f"{namespace}/origin/")
    backup["metadata"]["namespace"] = namespace
    local.create("backups", backup)

    async def run() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(local.server.kubeconfig))
        try:
            reconciler = BackupReconciler(cluster, endpoints=operator_allows(endpoint))
            await reconciler.reconcile(namespace, "origin-1")
        finally:
            await cluster.close()

    asyncio.run(run())
    done = local.get("backups", namespace, "origin-1")
    assert (done or {}).get("status", {}).get("phase") == "Completed", done


def restore_of(found: dict[str, Any] | None) -> dict[str, Any]:
    return dict((((found or {}).get("status") or {}).get("atProvider") or {}).get("restore") or {})


def test_ten_restores_that_never_finish_do_not_delay_another_team_s_instance(
    planes: Planes,
    space: tuple[Kube, Kube],
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    space_cluster, _hosted = space
    local = planes.local
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    seed(planes.source)
    # The Space every Instance is made in; its host is the source plane's too.
    ensure_default_space(local, space_cluster.server)
    for index in range(STUCK):
        back_up(local, planes.source, team(index), seaweed.endpoint)
    for index in range(STUCK):
        instance = restoring_instance("restored", "origin-1")
        instance["metadata"]["namespace"] = team(index)
        local.create("instances", instance)

    def stuck() -> list[dict[str, Any]]:
        return [local.get("instances", team(i), "restored") or {} for i in range(STUCK)]

    def waiting_for_the_crd() -> list[dict[str, Any]] | None:
        found = stuck()
        running = [f for f in found if restore_of(f).get("step") == "managed"]
        queued = [f for f in found if not restore_of(f).get("step")]
        # Every queued one reconciled too, not only the first two started.
        answered = all(condition(f, "Restored") for f in queued)
        return found if len(running) == MAX_RESTORES and answered else None

    env = {"ALLOWED_S3_ENDPOINTS": seaweed.endpoint}
    provider = ProviderProcess(
        local.server.kubeconfig_path,
        tmp_path / "provider.log",
        "--poll",
        f"{POLL_SECONDS}s",
        "--max-restores",
        str(MAX_RESTORES),
        env=env,
    ).start()
    try:
        seen = wait_for("two restores waiting for their CRD", waiting_for_the_crd, timeout=120)
        queued = [f for f in seen if not restore_of(f).get("step")]
        assert len(queued) == STUCK - MAX_RESTORES
        for found in queued:
            restored = condition(found, "Restored")
            assert restored["reason"] == "RestorePending", restored
            assert "a restore slot is free" in restored["message"]

        # Another team asks for a control plane while every restore slot is held.
        local.namespace("other-team")
        other = restoring_instance("fresh", "none")
        del other["spec"]["forProvider"]["initialRestorationFrom"]
        other["metadata"]["namespace"] = "other-team"
        asked = time.monotonic()
        local.create("instances", other)
        wait_for(
            "the other team's Instance Ready",
            lambda: (
                condition(local.get("instances", "other-team", "fresh"), "Ready").get("status")
                == "True"
            ),
            timeout=60,
        )
        took = time.monotonic() - asked
        still = stuck()
        assert provider.alive(), provider.log()[-2000:]
    finally:
        provider.stop()

    assert took <= ONE_POLL_AND_SPACE, f"the other team's Instance took {took:.1f}s"
    # The restores were stuck all along: none got past the CRD it waits for.
    assert all(restore_of(found).get("phase") != "Completed" for found in still)
