"""``controlplane-backup`` without servers: verify, describe and the flags.

``verify`` must refuse every archive a restore refuses, for the same reason:
the table below is built from the archive tests' own cases (hostile archives,
limits, and what a restore admits), so a case added there is run here too.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from provider.backup.cli import commands
from provider.backup.format.archive import ArchiveWriter, Limits, ResourceType
from tests.backup.test_archive import CANARY, HOSTILE_CASES, good
from tests.backup.test_archive_limits import (
    ADMIT_CASES,
    LIMIT_CASES,
    AdmitCase,
    meta,
    written,
)
from tests.backup.test_archive_limits import NAMESPACES as NAMESPACE_TYPE


@dataclass
class RefusedCase:
    reason: str
    build: Callable[[], bytes]
    message: str
    # The limits the case is built against; small ones keep its archive small.
    limits: Limits = field(default_factory=Limits)


def archive_of(case: AdmitCase) -> Callable[[], bytes]:
    return lambda: written((case.rtype, case.obj))


REFUSED_CASES = [
    *(RefusedCase(f"hostile: {c.reason}", c.build, c.message) for c in HOSTILE_CASES),
    *(RefusedCase(f"limit: {c.reason}", c.build, c.message, c.limits) for c in LIMIT_CASES),
    *(
        RefusedCase(
            f"not restorable: {c.reason}",
            archive_of(c),
            c.refusal,
        )
        for c in ADMIT_CASES
        if c.refusal
    ),
]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(commands.main, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_every_case_the_controller_refuses_is_in_the_table() -> None:
    # The table is the archive tests' cases: none is lost on the way.
    refusing_admits = [c for c in ADMIT_CASES if c.refusal]
    assert len(REFUSED_CASES) == len(HOSTILE_CASES) + len(LIMIT_CASES) + len(refusing_admits)


@pytest.mark.parametrize("case", REFUSED_CASES, ids=lambda c: c.reason)
def test_verify_refuses_each_archive_a_restore_refuses_with_exit_code_1(
    case: RefusedCase, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "LIMITS", case.limits)
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(case.build())

    code, stdout, stderr = run("verify", str(archive_file))

    assert code == 1, stdout
    assert stderr.startswith(f"{archive_file}: refused: ")
    assert case.message in stderr
    assert CANARY not in stderr
    assert "Traceback" not in stderr
    assert stdout == ""


def test_the_cli_holds_archives_to_the_limits_the_controllers_use() -> None:
    assert Limits() == commands.LIMITS


def test_verify_takes_a_good_archive_with_exit_code_0_and_one_summary_line(tmp_path: Path) -> None:
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(good())

    code, stdout, _ = run("verify", str(archive_file))

    assert code == 0
    assert stdout.count("\n") == 1
    assert stdout.startswith(f"{archive_file}: OK: 1 objects of 1 types")
    assert f"{len(good())} bytes" in stdout


def test_verify_refuses_a_file_above_the_archive_size_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commands, "LIMITS", Limits(max_archive_bytes=100))
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(good())

    code, _, stderr = run("verify", str(archive_file))

    assert code == 1
    assert "is larger than the limit of 100 bytes" in stderr


CONFIGMAPS = ResourceType("configmaps", "", "v1", "ConfigMap", namespaced=True)
BUCKETS = ResourceType("buckets", "s3.example.org", "v1", "Bucket", True, ("managed",))


def sample_archive() -> bytes:
    return written(
        (NAMESPACE_TYPE, meta("app-0")),
        (NAMESPACE_TYPE, meta("app-1")),
        *((CONFIGMAPS, meta(f"c-{i}", "app-0")) for i in range(3)),
        (CONFIGMAPS, meta("c-0", "app-1")),
        *((BUCKETS, meta(f"b-{i}", "app-1")) for i in range(2)),
    )


def test_describe_counts_objects_by_kind_and_namespace(tmp_path: Path) -> None:
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(sample_archive())

    code, stdout, _ = run("describe", str(archive_file))

    assert code == 0
    lines = stdout.splitlines()
    assert lines[0].startswith("instance team-a/myctp, exported at 2026-12-03T06:00:00Z")
    assert lines[0].endswith("8 objects of 3 types")
    assert lines[1] == "source: Kubernetes not recorded, Crossplane not recorded"
    assert [line.split() for line in lines[3:]] == [
        ["KIND", "GROUP", "NAMESPACE", "OBJECTS"],
        ["Bucket", "s3.example.org", "app-1", "2"],
        ["ConfigMap", "(core)", "app-0", "3"],
        ["ConfigMap", "(core)", "app-1", "1"],
        ["Namespace", "(core)", "(cluster)", "2"],
    ]


def test_describe_says_which_resources_the_backup_left_out(tmp_path: Path) -> None:
    sink = io.BytesIO()
    writer = ArchiveWriter(sink)
    writer.add(NAMESPACE_TYPE, meta("app-0"))
    writer.finish(
        instance="team-a/myctp",
        exported_at=datetime(2026, 12, 3, 6, tzinfo=UTC),
        options={"excludedResources": ["caches.example.org", "configmaps"]},
    )
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(sink.getvalue())

    _, text, _ = run("describe", str(archive_file))
    code, as_json, _ = run("describe", "-o", "json", str(archive_file))

    assert code == 0
    assert text.splitlines()[1] == "excluded: caches.example.org, configmaps"
    assert json.loads(as_json)["excludedResources"] == ["caches.example.org", "configmaps"]


def test_describe_as_json_gives_the_same_counts(tmp_path: Path) -> None:
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(sample_archive())

    code, stdout, _ = run("describe", "-o", "json", str(archive_file))

    assert code == 0
    document = json.loads(stdout)
    assert document["objects"] == 8
    assert {(c["kind"], c["namespace"], c["objects"]) for c in document["contents"]} == {
        ("Bucket", "app-1", 2),
        ("ConfigMap", "app-0", 3),
        ("ConfigMap", "app-1", 1),
        ("Namespace", None, 2),
    }
    assert {t["kind"]: t["categories"] for t in document["types"]}["Bucket"] == ["managed"]


def test_describe_refuses_an_archive_verify_refuses(tmp_path: Path) -> None:
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(good()[:-4])

    code, stdout, stderr = run("describe", str(archive_file))

    assert code == 1
    assert stdout == ""
    assert stderr == "Error: the archive is truncated\n"


def test_describe_escapes_a_kind_that_would_drive_a_terminal(tmp_path: Path) -> None:
    sneaky = ResourceType("things", "example.org", "v1", "Thing\x1b[2J", namespaced=False)
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(written((sneaky, meta("t"))))

    code, stdout, _ = run("describe", str(archive_file))

    assert code == 0
    assert "\x1b" not in stdout
    assert "Thing\\x1b[2J" in stdout


@dataclass
class UsageCase:
    reason: str
    args: list[str]
    message: str


def usage_cases(kubeconfig: str) -> list[UsageCase]:
    return [
        UsageCase(
            "an export needs somewhere to go",
            ["export", "--kubeconfig", kubeconfig],
            "pass exactly one of -o/--output FILE and --s3",
        ),
        UsageCase(
            "an export goes to a file or to S3, not both",
            ["export", "--kubeconfig", kubeconfig, "-o", "x.tar.gz", "--s3", "s3://b/p/"],
            "pass exactly one of -o/--output FILE and --s3",
        ),
        UsageCase(
            "an --s3 that is not an s3:// URL names the flag",
            ["export", "--kubeconfig", kubeconfig, "--s3", "https://b/p/"],
            "Invalid value for '--s3': 'https://b/p/' is not an s3://bucket/... URL",
        ),
        UsageCase(
            "an --s3 without a bucket names the flag",
            ["export", "--kubeconfig", kubeconfig, "--s3", "s3:///p/"],
            "Invalid value for '--s3'",
        ),
        UsageCase(
            "--name only names an archive under an --s3 prefix",
            ["export", "--kubeconfig", kubeconfig, "-o", "x.tar.gz", "--name", "n"],
            "--name names an archive under an --s3 prefix",
        ),
        UsageCase(
            "an archive name that would make folders in the bucket names the flag",
            ["export", "--kubeconfig", kubeconfig, "--s3", "s3://b/p/", "--name", "../x"],
            "Invalid value for '--name': '../x' is not a name",
        ),
        UsageCase(
            "an export needs a kubeconfig",
            ["export", "-o", "x.tar.gz"],
            "Missing option '--kubeconfig'",
        ),
        UsageCase(
            "a kubeconfig that does not exist names the flag",
            ["export", "--kubeconfig", "/nonexistent/kubeconfig", "-o", "x.tar.gz"],
            "Invalid value for '--kubeconfig'",
        ),
        UsageCase(
            "a restore needs a kubeconfig",
            ["restore", kubeconfig],
            "Missing option '--kubeconfig'",
        ),
        UsageCase(
            "an S3 source must name an object, not a prefix",
            ["verify", "s3://bucket/team-a/"],
            "Invalid value for 'SOURCE': 's3://bucket/team-a/' names no object",
        ),
        UsageCase(
            "a source file that does not exist is named",
            ["describe", "/nonexistent/backup.tar.gz"],
            "Invalid value for 'SOURCE'",
        ),
        UsageCase(
            "a Backup's storage.assumeRoleWith has two values, and so has the flag",
            ["verify", "--assume-role-with", "Password", "s3://bucket/team-a/x.tar.gz"],
            "Invalid value for '--assume-role-with'",
        ),
        UsageCase(
            "describe knows two formats",
            ["describe", "-o", "yaml", kubeconfig],
            "Invalid value for '-o' / '--output'",
        ),
    ]


@pytest.mark.parametrize(
    "index", range(len(usage_cases("k"))), ids=[c.reason for c in usage_cases("k")]
)
def test_a_bad_flag_is_a_usage_error_naming_it(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    case = usage_cases(str(kubeconfig))[index]

    code, stdout, stderr = run(*case.args)

    assert code == 2, stdout + stderr
    assert case.message in stderr
    assert "Traceback" not in stderr


def test_assume_role_with_web_identity_reads_the_projected_token_as_the_controller_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The flag reaches the controllers' credential chain: WebIdentity wants the
    # token file before any request, AssumeRole would not.
    monkeypatch.delenv("AWS_WEB_IDENTITY_TOKEN_FILE", raising=False)
    monkeypatch.setenv("AWS_REGION", "us-east-1")

    code, _, stderr = run(
        "verify",
        "--role-arn",
        "arn:aws:iam::123456789012:role/team-a",
        "--assume-role-with",
        "WebIdentity",
        "--endpoint",
        "http://127.0.0.1:9",
        "s3://bucket/team-a/x.tar.gz",
    )

    assert code == 1
    assert "AWS_WEB_IDENTITY_TOKEN_FILE is not set" in stderr
    assert "Traceback" not in stderr


def test_an_unreadable_kubeconfig_is_one_line_naming_it_without_its_content(
    tmp_path: Path,
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(f"clusters: [{{name: {CANARY}\n")

    code, _, stderr = run("export", "--kubeconfig", str(kubeconfig), "-o", str(tmp_path / "x"))

    assert code == 1
    assert stderr.startswith(f"Error: cannot load the kubeconfig {kubeconfig}")
    assert CANARY not in stderr
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("dry_run", [[], ["--dry-run"]], ids=["restore", "dry run"])
def test_a_restore_refuses_a_corrupt_archive_before_it_reaches_the_control_plane(
    dry_run: list[str], tmp_path: Path
) -> None:
    # Nothing listens on port 1: an attempt to reach the control plane would say so.
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(HOSTILE_CASES[0].build())

    code, stdout, stderr = run(
        "restore", str(archive_file), "--kubeconfig", str(kubeconfig), *dry_run
    )

    assert code == 1
    assert stdout == ""
    assert stderr.startswith(f"Error: {HOSTILE_CASES[0].message}")
    assert stderr.count("\n") == 1
    assert "cannot reach" not in stderr
