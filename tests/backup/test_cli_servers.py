"""``controlplane-backup`` against real kube-apiservers and a real S3 (SeaweedFS).

One control plane is seeded (the round-trip test's few hundred objects of
five kinds); each test restores it somewhere else: through a file, through
S3, or first for real and then as a dry run over drift. The CLI runs through
click's CliRunner (standard error is not a terminal there), and once as the
installed console script in a process of its own.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import pty
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from kubernetes import client

from provider.backup.cli import commands
from provider.backup.format import archive
from provider.backup.source.export import CORE_TYPES, estimate, kept
from provider.backup.storage.s3 import StorageSpec, Store
from provider.kube import Cluster
from sandbox.apiserver import APIServerFactory, Etcd
from sandbox.s3 import Moto, SeaweedFS
from sandbox.spaces import PROVIDER_CRDS, Kube
from tests.backup.test_roundtrip import (
    BACKUP_CRDS,
    NAMESPACE,
    backup_object,
    comparable,
    ensure_bucket,
    install_crds,
    instance_with_kubeconfig,
    list_objects,
    name_of,
    run_backup,
    seed,
    snapshot,
)

BUCKET = "cli-backups"
SCRIPT = Path(sys.executable).with_name("controlplane-backup")
APP_NAMESPACES = [f"app-{i}" for i in range(4)]
# The seeded objects by (kind, namespace); "" for cluster-scoped.
SEEDED = {
    ("Namespace", ""): 5,
    **{("ConfigMap", ns): 25 for ns in APP_NAMESPACES},
    **{("Secret", ns): 25 for ns in APP_NAMESPACES},
    ("Bucket", "app-0"): 60,
    ("Network", "app-1"): 20,
}
SEEDED_TOTAL = sum(SEEDED.values())


@dataclass
class Clusters:
    source: Kube
    target: Kube
    drifted: Kube
    from_s3: Kube
    local: Kube
    checked: Kube
    unready: Kube


@pytest.fixture(scope="module")
def clusters(kube_etcd: Etcd) -> Iterator[Clusters]:
    with APIServerFactory(kube_etcd) as factory:
        names = (
            "cli-source",
            "cli-target",
            "cli-drifted",
            "cli-from-s3",
            "cli-local",
            "cli-checked",
            "cli-unready",
        )
        found = Clusters(*(Kube(factory(name=name)) for name in names))
        assert seed(found.source) == SEEDED_TOTAL
        yield found


@pytest.fixture(scope="module")
def exported(clusters: Clusters, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The source exported to a file by the CLI."""
    path = tmp_path_factory.mktemp("export") / "myctp.tar.gz"
    result = invoke("export", "--kubeconfig", kubeconfig(clusters.source), "-o", str(path))
    assert result.exit_code == 0, result.output
    return path


def invoke(*args: str) -> Result:
    return CliRunner().invoke(commands.main, list(args), env={"KUBECONFIG": None})


def kubeconfig(kube: Kube) -> str:
    return str(kube.server.kubeconfig_path)


def versions(kube: Kube) -> dict[tuple[str, str, str], str]:
    """The resourceVersion of every object a restore of the seed could touch."""
    found = {}
    namespaces = kube.api.sanitize_for_serialization(kube.core.list_namespace())["items"]
    for item in namespaces:
        found["Namespace", "", item["metadata"]["name"]] = item["metadata"]["resourceVersion"]
    for namespace in APP_NAMESPACES:
        for plural, group, kind in (
            ("configmaps", "", "ConfigMap"),
            ("secrets", "", "Secret"),
            ("buckets", "s3.example.org", "Bucket"),
            ("networks", "platform.example.org", "Network"),
        ):
            if group and not kube.established(f"{plural}.{group}"):
                continue
            for item in list_objects(kube, plural, group, "v1", namespace):
                metadata = item["metadata"]
                found[kind, namespace, metadata["name"]] = metadata["resourceVersion"]
    return found


def assert_equal_to_source(source: Kube, restored: Kube) -> None:
    assert snapshot(restored) == snapshot(source)
    networks = [
        sorted(
            (comparable(o) for o in list_objects(kube, "networks", group, "v1", "app-1")),
            key=name_of,
        )
        for kube, group in ((source, "platform.example.org"), (restored, "platform.example.org"))
    ]
    assert networks[0] == networks[1]
    assert len(networks[0]) == 20


def test_an_export_verifies_describes_and_restores_into_a_second_api_server_equal(
    clusters: Clusters, exported: Path
) -> None:
    # The archive holds Secrets: only its owner may read it.
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    assert not list(exported.parent.glob(".*partial*")), "no partial file is left behind"

    verified = invoke("verify", str(exported))
    assert verified.exit_code == 0, verified.output
    assert f"OK: {SEEDED_TOTAL} objects of 5 types from {clusters.source.server.url}" in (
        verified.stdout
    )

    described = invoke("describe", "-o", "json", str(exported))
    assert described.exit_code == 0, described.output
    contents = json.loads(described.stdout)["contents"]
    assert {(c["kind"], c["namespace"] or ""): c["objects"] for c in contents} == SEEDED

    # Crossplane's package manager and XRDs make the CRDs in a new control plane.
    install_crds(clusters.target)
    restored = invoke("restore", str(exported), "--kubeconfig", kubeconfig(clusters.target))
    assert restored.exit_code == 0, restored.output
    assert restored.stdout == (
        f"restored {SEEDED_TOTAL} objects into {clusters.target.server.url}\n"
    )
    # Standard error is not a terminal here: plain progress lines, the last one final.
    assert "\r" not in restored.stderr
    assert re.fullmatch(
        rf"restore: {SEEDED_TOTAL} objects, \d+ objects/s, done in \d+s",
        restored.stderr.splitlines()[-1],
    )
    assert_equal_to_source(clusters.source, clusters.target)
    paused = {
        o["metadata"]["name"]
        for o in list_objects(clusters.target, "buckets", "s3.example.org", "v1", "app-0")
        if (o["metadata"].get("annotations") or {}).get("crossplane.io/paused") == "true"
    }
    assert paused == {f"bucket-{i}" for i in range(0, 60, 10)}, "only what was paused in the backup"


def test_verify_with_restore_restores_and_checks_every_promise_of_the_archive(
    clusters: Clusters, exported: Path
) -> None:
    install_crds(clusters.checked)

    result = invoke("verify", str(exported), "--restore", kubeconfig(clusters.checked), "--quiet")

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == (
        f"restored into {clusters.checked.server.url} and checked: {SEEDED_TOTAL} objects "
        "present, 2 CRDs Established, 0 packages Installed and Healthy, 60 managed resources "
        "paused as in the archive"
    )
    assert_equal_to_source(clusters.source, clusters.checked)


def test_verify_with_restore_into_a_control_plane_without_the_crds_fails_saying_what_is_not_there(
    clusters: Clusters, exported: Path
) -> None:
    # No package or XRD made the CRDs there: the restore cannot land the custom objects.
    result = invoke(
        "verify",
        str(exported),
        "--restore",
        kubeconfig(clusters.unready),
        "--timeout",
        "1",
        "--quiet",
    )

    assert result.exit_code == 1, result.output
    custom = 60 + 20
    lines = result.stderr.splitlines()
    heading = f"restore check failed in {clusters.unready.server.url}:"
    assert heading in lines, result.stderr
    assert lines[lines.index(heading) :] == [
        heading,
        "  the restore failed: CustomResourceDefinition networks.platform.example.org is not "
        "Established in the control plane",
        f"  {custom} of {SEEDED_TOTAL} objects of the archive are not in the control plane: "
        "Bucket app-0/bucket-0, Bucket app-0/bucket-1, Bucket app-0/bucket-10, "
        f"Bucket app-0/bucket-11, Bucket app-0/bucket-12 and {custom - 5} more",
        "  CustomResourceDefinition buckets.s3.example.org is not there",
        "  CustomResourceDefinition networks.platform.example.org is not there",
    ]


def plan_of(stdout: str) -> dict[str, list[str]]:
    """The dry run's lines: action -> 'Kind namespace/name' (notes dropped)."""
    plan: dict[str, list[str]] = {"create": [], "change": [], "unchanged": []}
    for line in stdout.splitlines():
        match = re.fullmatch(r"(create|change|unchanged) +(\S+ \S+)( \(.*\))?", line)
        if match:
            plan[match[1]].append(match[2])
    return plan


def diff_of(stdout: str, path: str) -> list[str]:
    """The lines of the diff of the object at ``path`` in the archive."""
    lines = stdout.splitlines()
    start = lines.index(f"--- live/{path}")
    end = next(
        (i for i in range(start + 2, len(lines)) if lines[i][:1] not in {" ", "-", "+", "@"}),
        len(lines),
    )
    return lines[start:end]


def test_a_dry_run_into_an_empty_control_plane_would_create_everything_and_creates_nothing(
    clusters: Clusters, exported: Path
) -> None:
    empty = clusters.from_s3
    before = versions(empty)

    result = invoke(
        "restore", str(exported), "--kubeconfig", kubeconfig(empty), "--dry-run", "--quiet"
    )

    assert result.exit_code == 0, result.output
    plan = plan_of(result.stdout)
    # The default namespace is there already, as the backup has it.
    assert plan["unchanged"] == ["Namespace default"]
    assert plan["change"] == []
    assert len(plan["create"]) == SEEDED_TOTAL - 1
    assert (
        "create    ConfigMap app-0/config-0 "
        "(not checked: namespace app-0 is created by this restore)" in (result.stdout.splitlines())
    )
    assert (
        "create    Bucket app-0/bucket-0 (not checked: CustomResourceDefinition "
        "buckets.s3.example.org is not Established yet (the restore waits for it))"
    ) in result.stdout.splitlines()
    assert result.stdout.endswith(
        f"dry run: {SEEDED_TOTAL - 1} to create, 0 to change, 1 unchanged, 0 skipped "
        "(Crossplane makes them again); "
        f"nothing was changed in {empty.server.url}\n"
    )
    assert versions(empty) == before


def test_a_dry_run_shows_what_drifted_as_created_changed_or_unchanged_and_changes_nothing(
    clusters: Clusters, exported: Path
) -> None:
    drifted = clusters.drifted
    install_crds(drifted)
    restored = invoke("restore", str(exported), "--kubeconfig", kubeconfig(drifted), "--quiet")
    assert restored.exit_code == 0, restored.output
    # Drift: a value changed, an object deleted, a Secret's value changed, a managed
    # resource's spec changed and another paused by hand.
    drifted.core.patch_namespaced_config_map("config-1", "app-0", {"data": {"k": "drifted"}})
    drifted.core.delete_namespaced_config_map("config-2", "app-0")
    drifted.put_secret("app-0", "secret-3", {"password": b"drifted-password"})
    drifted.patch(
        "buckets",
        "app-0",
        "bucket-1",
        {"spec": {"forProvider": {"region": "us-west-2"}}},
        "s3.example.org",
        "v1",
    )
    drifted.patch(
        "buckets",
        "app-0",
        "bucket-2",
        {"metadata": {"annotations": {"crossplane.io/paused": "true"}}},
        "s3.example.org",
        "v1",
    )
    before = versions(drifted)

    result = invoke("restore", str(exported), "--kubeconfig", kubeconfig(drifted), "--dry-run")

    assert result.exit_code == 0, result.output
    plan = plan_of(result.stdout)
    assert plan["create"] == ["ConfigMap app-0/config-2"]
    assert sorted(plan["change"]) == [
        "Bucket app-0/bucket-1",
        "Bucket app-0/bucket-2",
        "ConfigMap app-0/config-1",
        "Secret app-0/secret-3",
    ]
    assert len(plan["unchanged"]) == SEEDED_TOTAL - 5
    config = diff_of(result.stdout, "configmaps/namespaces/app-0/config-1.yaml")
    assert "-  k: drifted" in config
    assert "+  k: v1" in config
    region = diff_of(result.stdout, "buckets.s3.example.org/namespaces/app-0/bucket-1.yaml")
    assert "-    region: us-west-2" in region
    assert "+    region: eu-west-1" in region
    # Paused by hand, not in the backup: the restore ends by unpausing it.
    unpaused = diff_of(result.stdout, "buckets.s3.example.org/namespaces/app-0/bucket-2.yaml")
    assert any(line.startswith("-") and "crossplane.io/paused: 'true'" in line for line in unpaused)
    secret = diff_of(result.stdout, "secrets/namespaces/app-0/secret-3.yaml")
    assert "-  password: '*** (before)'" in secret
    assert "+  password: '*** (after)'" in secret
    for value in (b"drifted-password", b"p3"):
        assert value.decode() not in result.output
        assert base64.b64encode(value).decode() not in result.output
    assert result.stdout.endswith(
        f"dry run: 1 to create, 4 to change, {SEEDED_TOTAL - 5} unchanged, 0 skipped "
        "(Crossplane makes them again); "
        f"nothing was changed in {drifted.server.url}\n"
    )
    # Nothing changed: every resourceVersion is as it was, and nothing came or went.
    assert versions(drifted) == before
    assert ("ConfigMap", "app-0", "config-2") not in before


def test_an_export_to_s3_verifies_and_restores_from_s3(
    clusters: Clusters, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    storage = ["--endpoint", seaweed.endpoint, "--region", "us-east-1"]
    url = f"s3://{BUCKET}/team-a/myctp/first.tar.gz"

    exported = invoke(
        "export",
        "--kubeconfig",
        kubeconfig(clusters.source),
        "--s3",
        f"s3://{BUCKET}/team-a/myctp",
        "--name",
        "first",
        *storage,
    )
    assert exported.exit_code == 0, exported.output
    assert exported.stdout.startswith(f"wrote {url}: {SEEDED_TOTAL} objects, ")

    again = invoke("export", "--kubeconfig", kubeconfig(clusters.source), "--s3", url, *storage)
    assert again.exit_code == 1
    assert again.stderr == f"Error: {url} already exists; pass --overwrite to replace it\n"

    verified = invoke("verify", url, *storage)
    assert verified.exit_code == 0, verified.output
    assert verified.stdout.startswith(f"{url}: OK: {SEEDED_TOTAL} objects of 5 types")

    install_crds(clusters.from_s3)
    restored = invoke("restore", url, "--kubeconfig", kubeconfig(clusters.from_s3), *storage)
    assert restored.exit_code == 0, restored.output
    assert_equal_to_source(clusters.source, clusters.from_s3)

    missing = invoke("verify", f"s3://{BUCKET}/team-a/myctp/none.tar.gz", *storage)
    assert missing.exit_code == 1
    assert missing.stderr.startswith(
        f"Error: download s3://{BUCKET}/team-a/myctp/none.tar.gz failed: NoSuchKey"
    )
    assert seaweed.secret_key not in missing.output


def test_the_export_holds_exactly_what_the_backup_controller_writes(
    clusters: Clusters, exported: Path, seaweed: SeaweedFS, monkeypatch: pytest.MonkeyPatch
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, "roundtrip")
    local = clusters.local
    local.apply_crds(PROVIDER_CRDS, BACKUP_CRDS)
    instance_with_kubeconfig(local, clusters.source.server, "myctp")
    local.create("backups", backup_object("by-controller", "myctp", seaweed.endpoint))
    asyncio.run(run_backup(local, "by-controller", seaweed.endpoint))
    backup = local.get("backups", NAMESPACE, "by-controller")
    assert backup is not None
    assert backup["status"]["phase"] == "Completed", backup["status"]
    body = io.BytesIO()
    Store.connect(StorageSpec("roundtrip", "us-east-1", endpoint=seaweed.endpoint)).download(
        backup["status"]["location"]["key"], body
    )
    body.seek(0)

    by_controller = archive.verify(body)
    with exported.open("rb") as file:
        by_cli = archive.verify(file)

    # Every file, its path and its sha256: the same objects, serialised the same way.
    assert list(by_cli.files) == list(by_controller.files)
    assert by_cli.types == by_controller.types


def test_the_console_script_writes_plain_progress_lines_when_not_on_a_terminal(
    clusters: Clusters, tmp_path: Path
) -> None:
    path = tmp_path / "myctp.tar.gz"

    done = subprocess.run(
        [str(SCRIPT), "export", "--kubeconfig", kubeconfig(clusters.source), "-o", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert "\r" not in done.stderr
    assert "\x1b" not in done.stderr
    lines = done.stderr.splitlines()
    assert re.fullmatch(rf"export: {SEEDED_TOTAL} objects, \d+ objects/s, done in \d+s", lines[-1])
    assert all(line.startswith("export: ") for line in lines)
    verified = subprocess.run(
        [str(SCRIPT), "verify", str(path)], capture_output=True, text=True, timeout=60, check=False
    )
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.startswith(f"{path}: OK: {SEEDED_TOTAL} objects")


def test_a_control_plane_that_cannot_be_reached_is_one_line_and_no_file(tmp_path: Path) -> None:
    config = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:1"}}],
            "users": [{"name": "u", "user": {"token": "token-canary-41c9"}}],
            "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
            "current-context": "gone",
        }
    )
    path = tmp_path / "kubeconfig"
    path.write_text(config)
    output = tmp_path / "x.tar.gz"

    result = invoke("export", "--kubeconfig", str(path), "-o", str(output), "--quiet")

    assert result.exit_code == 1
    assert result.stderr.startswith("Error: cannot reach https://127.0.0.1:1")
    assert result.stderr.count("\n") == 1
    assert "token-canary-41c9" not in result.output
    assert list(tmp_path.iterdir()) == [path]


def test_the_console_script_redraws_one_progress_line_on_a_terminal(
    clusters: Clusters, tmp_path: Path
) -> None:
    main, terminal = pty.openpty()
    try:
        process = subprocess.Popen(
            [
                str(SCRIPT),
                "export",
                "--kubeconfig",
                kubeconfig(clusters.source),
                "-o",
                str(tmp_path / "x.tar.gz"),
            ],
            stdout=subprocess.PIPE,
            stderr=terminal,
        )
        os.close(terminal)
        terminal = -1
        stdout, _ = process.communicate(timeout=120)
        shown = read_all(main)
    finally:
        os.close(main)
        if terminal >= 0:
            os.close(terminal)

    assert process.returncode == 0, shown
    assert stdout.decode().startswith("wrote ")
    draws = shown.split("\r\x1b[K")
    assert draws[0] == "", "every line is drawn in place"
    assert re.fullmatch(
        rf"export: {SEEDED_TOTAL} objects, \d+ objects/s, done in \d+s\r?\n", draws[-1]
    )


def read_all(descriptor: int) -> str:
    """What a pseudo-terminal holds once its other end is closed."""
    chunks = []
    while True:
        try:
            chunk = os.read(descriptor, 4096)
        except OSError:  # EIO: the other end is closed and everything was read
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_the_export_estimate_counts_every_object_of_the_selected_types(
    clusters: Clusters,
) -> None:
    source = clusters.source
    # What export leaves out of the selected types: system namespaces and their
    # objects, kube-root-ca.crt, service-account tokens.
    left_out = 0
    for rtype, items in (
        (CORE_TYPES[0], source.core.list_namespace()),
        (CORE_TYPES[1], source.core.list_config_map_for_all_namespaces()),
        (CORE_TYPES[2], source.core.list_secret_for_all_namespaces()),
    ):
        for item in source.api.sanitize_for_serialization(items)["items"]:
            left_out += not kept(rtype, item)

    async def count() -> int:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(source.server.kubeconfig))
        try:
            return await estimate(cluster)
        finally:
            await cluster.close()

    assert left_out > 0, "kube-system has objects of its own"
    assert asyncio.run(count()) == SEEDED_TOTAL + left_out


def test_an_export_to_s3_through_a_role_signs_with_the_role_as_a_backup_does(
    clusters: Clusters, moto_sts: Moto, monkeypatch: pytest.MonkeyPatch
) -> None:
    engineer = moto_sts.create_identity("platform-engineer")
    role_arn = moto_sts.create_role("cli-backup-writer", trusted=engineer)
    moto_sts.create_bucket("cli-role")
    moto_sts.configure(monkeypatch, engineer)
    through_role = [
        "--endpoint",
        moto_sts.endpoint,
        "--region",
        "us-east-1",
        "--role-arn",
        role_arn,
        "--external-id",
        "team-a",
    ]

    exported = invoke(
        "export",
        "--kubeconfig",
        kubeconfig(clusters.source),
        "--quiet",
        "--s3",
        "s3://cli-role/team-a/myctp/",
        "--name",
        "by-role",
        *through_role,
    )

    assert exported.exit_code == 0, exported.output
    assert moto_sts.role_last_used("cli-backup-writer") != "", "S3 requests signed by the role"
    assert moto_sts.key_last_used_by(engineer.access_key) == "sts", "none by the engineer's key"
    verified = invoke("verify", "s3://cli-role/team-a/myctp/by-role.tar.gz", *through_role)
    assert verified.exit_code == 0, verified.output
    assert engineer.secret_key not in exported.output + verified.output


def crossplane_deployment(kube: Kube, version: str, *args: str) -> None:
    """Crossplane's Deployment as its Helm chart makes it (no controller runs it here)."""
    kube.namespace("crossplane-system")
    container = {"name": "crossplane", "image": "crossplane", "args": ["core", "start", *args]}
    apps: Any = client.AppsV1Api(kube.api)
    apps.create_namespaced_deployment(
        "crossplane-system",
        {
            "metadata": {"name": "crossplane", "labels": {"app.kubernetes.io/version": version}},
            "spec": {
                "selector": {"matchLabels": {"app": "crossplane"}},
                "template": {
                    "metadata": {"labels": {"app": "crossplane"}},
                    "spec": {"containers": [container]},
                },
            },
        },
    )


def test_a_restore_into_an_older_crossplane_minor_is_refused_unless_forced(
    kube_etcd: Etcd, tmp_path: Path
) -> None:
    with APIServerFactory(kube_etcd) as factory:
        newer, older = Kube(factory(name="cli-newer-xp")), Kube(factory(name="cli-older-xp"))
        crossplane_deployment(newer, "2.1.4-up.2", "--enable-usages", "--debug")
        crossplane_deployment(older, "2.0.2-up.3")
        newer.namespace("versioned-app")
        path = tmp_path / "newer.tar.gz"
        exported = invoke("export", "--kubeconfig", kubeconfig(newer), "-o", str(path), "-q")
        assert exported.exit_code == 0, exported.output
        described = invoke("describe", str(path))
        assert re.fullmatch(
            r"source: Kubernetes v1\.\d+\.\d+\S*, "
            r"Crossplane 2\.1\.4-up\.2 \(feature flags: --enable-usages\)",
            described.stdout.splitlines()[1],
        )

        refused = invoke("restore", str(path), "--kubeconfig", kubeconfig(older), "-q")

        assert refused.exit_code == 1
        assert refused.stderr == (
            "Error: refused: the archive was taken from Crossplane 2.1.4-up.2, and the control "
            "plane runs Crossplane 2.0.2-up.3, an older minor (2.0 < 2.1) whose CRDs may not "
            "know the archive's objects; upgrade the control plane to Crossplane 2.1 or later "
            "first (--force restores anyway)\n"
        )
        assert not older.core.list_namespace(field_selector="metadata.name=versioned-app").items

        forced = invoke("restore", str(path), "--kubeconfig", kubeconfig(older), "-q", "--force")

        assert forced.exit_code == 0, forced.output
        assert forced.stderr.startswith(
            "crossplane version: a restore without --force is refused: the archive was taken "
            "from Crossplane 2.1.4-up.2"
        )
        assert older.core.list_namespace(field_selector="metadata.name=versioned-app").items


def test_an_archive_made_before_export_left_crossplanes_objects_out_restores_without_them(
    kube_etcd: Etcd, tmp_path: Path
) -> None:
    secrets = archive.ResourceType("secrets", "", "v1", "Secret", namespaced=True)
    configmaps = archive.ResourceType("configmaps", "", "v1", "ConfigMap", namespaced=True)
    namespaces = archive.ResourceType("namespaces", "", "v1", "Namespace", namespaced=False)
    revision = {"apiVersion": "pkg.crossplane.io/v1", "kind": "ProviderRevision", "name": "p-1"}
    sink = io.BytesIO()
    writer = archive.ArchiveWriter(sink)
    for name in ("crossplane-system", "app"):
        writer.add(namespaces, {"metadata": {"name": name}})
    writer.add(
        secrets,
        {"metadata": {"name": "crossplane-root-ca", "namespace": "crossplane-system"}},
    )
    writer.add(
        secrets,
        {
            "metadata": {
                "name": "provider-tls",
                "namespace": "crossplane-system",
                "ownerReferences": [{**revision, "uid": "u-1", "controller": True}],
            }
        },
    )
    writer.add(configmaps, {"metadata": {"name": "settings", "namespace": "app"}})
    writer.finish(instance="old", exported_at=datetime.now(UTC), options={})
    path = tmp_path / "old.tar.gz"
    path.write_bytes(sink.getvalue())
    with APIServerFactory(kube_etcd) as factory:
        target = Kube(factory(name="cli-skips"))

        planned = invoke("restore", str(path), "--kubeconfig", kubeconfig(target), "--dry-run")
        restored = invoke("restore", str(path), "--kubeconfig", kubeconfig(target), "-q")

        assert planned.exit_code == 0, planned.output
        skipped = [line for line in planned.stdout.splitlines() if line.startswith("skip")]
        assert skipped == [
            "skip      Secret crossplane-system/crossplane-root-ca (a TLS Secret of "
            "Crossplane's own install, which makes its own)",
            "skip      Secret crossplane-system/provider-tls (owned by a package or its "
            "revision, which the package manager makes again)",
        ]
        assert restored.exit_code == 0, restored.output
        assert target.core.read_namespaced_config_map("settings", "app").metadata.name
        names = {
            s.metadata.name for s in target.core.list_namespaced_secret("crossplane-system").items
        }
        assert not names & {"crossplane-root-ca", "provider-tls"}
