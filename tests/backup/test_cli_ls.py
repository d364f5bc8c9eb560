"""``controlplane-backup ls`` against a real kube-apiserver and a real S3 (SeaweedFS).

Backups are made by the Backup controller's reconciler (real archives, under a
clock the test drives, so "newest" is known); a corrupt archive sits beside
them under the same prefix.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from provider.backup.cli import commands
from provider.backup.controllers.backups import BackupReconciler
from provider.backup.storage.s3 import StorageSpec, Store
from provider.kube import Cluster
from sandbox.s3 import SeaweedFS
from tests.backup.test_retention_controller import Clock
from tests.backup.test_roundtrip import (
    BUCKET,
    NAMESPACE,
    Planes,
    backup_object,
    ensure_bucket,
    instance_with_kubeconfig,
    operator_allows,
)

INSTANCE = "listed"
PREFIX = f"{NAMESPACE}/{INSTANCE}/"
FIRST = datetime(2026, 12, 1, 6, 0, tzinfo=UTC)


@dataclass
class Listed:
    planes: Planes
    s3: SeaweedFS
    # The Backups, oldest first, as the controller left them.
    backups: list[dict[str, Any]]

    def storage(self) -> list[str]:
        return ["--endpoint", self.s3.endpoint, "--region", "us-east-1"]

    def kubeconfig(self) -> str:
        return str(self.planes.local.server.kubeconfig_path)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(commands.main, list(args), env={"KUBECONFIG": None})


def take(planes: Planes, s3: SeaweedFS, name: str, at: datetime, prefix: str = PREFIX) -> None:
    planes.local.create("backups", backup_object(name, INSTANCE, s3.endpoint, prefix=prefix))

    async def run() -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
        try:
            await BackupReconciler(
                cluster, clock=Clock(at), endpoints=operator_allows(s3.endpoint)
            ).reconcile(NAMESPACE, name)
        finally:
            await cluster.close()

    asyncio.run(run())


@pytest.fixture(scope="module")
def listed(planes: Planes, seaweed: SeaweedFS) -> Listed:
    with pytest.MonkeyPatch.context() as monkeypatch:
        seaweed.configure(monkeypatch)
        ensure_bucket(seaweed, BUCKET)
        instance_with_kubeconfig(planes.local, planes.source.server, INSTANCE)
        # Named against their order, so only the times can sort them.
        take(planes, seaweed, "listed-b", FIRST)
        take(planes, seaweed, "listed-a", FIRST + timedelta(hours=6))
        # Refused (another namespace's prefix): Failed, no archive.
        take(planes, seaweed, "listed-c", FIRST + timedelta(hours=12), prefix="team-z/listed/")
        # Beside them: not an archive.
        store = Store.connect(StorageSpec(BUCKET, "us-east-1", endpoint=seaweed.endpoint))
        with store.writer(f"{PREFIX}broken.tar.gz") as sink:
            sink.write(b"not a gzip tar")
    backups = [planes.local.get("backups", NAMESPACE, name) for name in ("listed-b", "listed-a")]
    assert all(b is not None and b["status"]["phase"] == "Completed" for b in backups)
    return Listed(planes, seaweed, [b for b in backups if b is not None])


def rows(result: Result) -> list[dict[str, Any]]:
    assert result.exit_code == 0, result.output
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found


def test_a_namespaces_backups_are_listed_newest_first_with_what_their_status_says(
    listed: Listed, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed.s3.configure(monkeypatch)
    found = rows(invoke("ls", "-n", NAMESPACE, "--kubeconfig", listed.kubeconfig(), "-o", "json"))
    mine = [row for row in found if row["instance"] == INSTANCE]
    assert [row["name"] for row in mine] == ["listed-c", "listed-a", "listed-b"]
    failed, newer, older = mine
    assert (failed["phase"], failed["location"], failed["size"]) == ("Failed", None, None)
    assert failed["time"] == "2026-12-01T18:00:00Z"
    for row, backup in ((newer, listed.backups[1]), (older, listed.backups[0])):
        status = backup["status"]
        assert row["phase"] == "Completed"
        assert row["location"] == f"s3://{BUCKET}/{status['location']['key']}"
        assert (row["size"], row["objects"], row["sha256"]) == (
            status["size"],
            status["objects"],
            status["sha256"],
        )
        assert row["verified"] is None, "not read without --verify"


def test_verify_reads_each_backups_archive_and_says_whether_a_restore_would_take_it(
    listed: Listed, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed.s3.configure(monkeypatch)
    found = rows(
        invoke(
            "ls",
            "-n",
            NAMESPACE,
            "--kubeconfig",
            listed.kubeconfig(),
            "--verify",
            "-o",
            "json",
            *listed.storage(),
        )
    )
    by_name = {row["name"]: row for row in found}
    assert by_name["listed-c"]["verified"] is None, "a Failed Backup has no archive to read"
    for backup in listed.backups:
        row = by_name[backup["metadata"]["name"]]
        assert (row["verified"], row["problem"]) == (True, None)
        assert row["objects"] == backup["status"]["objects"]
        # What export.yaml records: the API server's version; no Crossplane here to name.
        assert row["kubernetesVersion"].startswith("v1.")
        assert row["crossplaneVersion"] is None


def test_the_archives_under_a_prefix_are_listed_newest_first_and_a_corrupt_one_does_not_verify(
    listed: Listed, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed.s3.configure(monkeypatch)
    url = f"s3://{BUCKET}/{PREFIX}"
    plain = rows(invoke("ls", url, "-o", "json", *listed.storage()))
    assert {row["name"] for row in plain} == {"broken", "listed-a", "listed-b"}
    # S3 keeps whole seconds, so ties are possible: the order is by time alone.
    times = [row["time"] for row in plain]
    assert times == sorted(times, reverse=True)
    sizes = {row["name"]: row["size"] for row in plain}
    for backup in listed.backups:
        assert sizes[backup["metadata"]["name"]] == backup["status"]["size"]
    assert all(row["objects"] is None and row["verified"] is None for row in plain)

    verified = invoke("ls", url, "--verify", "-o", "json", *listed.storage())
    checked = {row["name"]: row for row in rows(verified)}
    assert checked["broken"]["verified"] is False
    assert checked["broken"]["problem"]
    for backup in listed.backups:
        row = checked[backup["metadata"]["name"]]
        assert (row["verified"], row["objects"]) == (True, backup["status"]["objects"])
        assert row["sha256"] == backup["status"]["sha256"]
        assert row["instance"] == f"{NAMESPACE}/{INSTANCE}"


def test_the_table_has_a_header_and_one_line_per_archive(
    listed: Listed, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed.s3.configure(monkeypatch)
    result = invoke("ls", f"s3://{BUCKET}/{PREFIX}", "--verify", *listed.storage())
    assert result.exit_code == 0, result.output
    header, *lines = result.stdout.splitlines()
    assert header.split() == [
        "NAME",
        "TIME",
        "PHASE",
        "SIZE",
        "OBJECTS",
        "INSTANCE",
        "VERSIONS",
        "LOCATION",
        "VERIFIED",
    ]
    by_name = {line.split()[0]: line for line in lines}
    assert sorted(by_name) == ["broken", "listed-a", "listed-b"]
    assert " no: " in by_name["broken"]
    assert by_name["listed-a"].endswith("  yes")
    assert by_name["listed-b"].endswith("  yes")


@dataclass(frozen=True)
class UsageCase:
    reason: str
    args: tuple[str, ...]
    message: str


USAGE_CASES = [
    UsageCase(
        "Neither a prefix nor a namespace is a usage error.",
        (),
        "pass exactly one of s3://bucket/prefix/ and -n/--namespace",
    ),
    UsageCase(
        "Both a prefix and a namespace is a usage error.",
        (f"s3://{BUCKET}/x/", "-n", NAMESPACE),
        "pass exactly one of s3://bucket/prefix/ and -n/--namespace",
    ),
    UsageCase(
        "A namespace without a kubeconfig is a usage error.",
        ("-n", NAMESPACE),
        "-n/--namespace needs --kubeconfig (or KUBECONFIG)",
    ),
    UsageCase(
        "A prefix that is not an s3:// URL names the argument.",
        ("team-a/listed/",),
        "'team-a/listed/' is not an s3://bucket/... URL",
    ),
]


@pytest.mark.parametrize("case", USAGE_CASES, ids=lambda case: case.reason)
def test_ls_without_exactly_one_place_to_list_is_a_usage_error(case: UsageCase) -> None:
    result = invoke("ls", *case.args)
    assert result.exit_code == 2
    assert case.message in result.stderr
