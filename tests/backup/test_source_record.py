"""What export.yaml records of its source, and what export leaves for Crossplane to make again.

Pure: archives in memory, objects as dicts; no server.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from provider.backup.format.archive import (
    EXPORT_FILE,
    ArchiveWriter,
    ResourceType,
    SourceVersions,
    verify,
)
from provider.backup.source.export import reinstalled
from provider.backup.source.versions import DeploymentList, crossplane_of
from provider.model import parse
from tests.backup.test_archive import members
from tests.backup.test_archive_limits import BUCKETS, NAMESPACES, meta
from tests.backup.test_cli import run

CONFIGMAPS = ResourceType("configmaps", "", "v1", "ConfigMap", namespaced=True)
SECRETS = ResourceType("secrets", "", "v1", "Secret", namespaced=True)
LOCKS = ResourceType("locks", "pkg.crossplane.io", "v1beta1", "Lock", namespaced=False)
XRDS = ResourceType(
    "compositeresourcedefinitions",
    "apiextensions.crossplane.io",
    "v2",
    "CompositeResourceDefinition",
    namespaced=False,
)
CONFIGURATIONS = ResourceType(
    "configurations", "pkg.crossplane.io", "v1", "Configuration", namespaced=False
)


def archive_with(source: SourceVersions | None) -> bytes:
    sink = io.BytesIO()
    writer = ArchiveWriter(sink)
    writer.add(NAMESPACES, meta("app-0"))
    writer.finish(
        instance="team-a/myctp",
        exported_at=datetime(2026, 12, 3, 6, tzinfo=UTC),
        options={},
        source=source,
    )
    return sink.getvalue()


RECORDED = SourceVersions(
    kubernetes="v1.31.4", crossplane="2.1.4-up.2", feature_flags=("--enable-usages",)
)


def test_export_yaml_records_the_sources_versions_as_up_lays_them_out() -> None:
    document = yaml.safe_load(members(archive_with(RECORDED))[EXPORT_FILE])

    assert document["kubernetes"] == {"version": "v1.31.4"}
    assert document["crossplane"] == {"version": "2.1.4-up.2", "featureFlags": ["--enable-usages"]}


def test_verify_reads_back_the_recorded_versions() -> None:
    assert verify(io.BytesIO(archive_with(RECORDED))).source == RECORDED


def test_an_archive_made_without_versions_records_none_and_reads_as_unknown() -> None:
    archive = archive_with(None)

    document = yaml.safe_load(members(archive)[EXPORT_FILE])
    assert "kubernetes" not in document
    assert "crossplane" not in document
    assert verify(io.BytesIO(archive)).source == SourceVersions()


def test_a_value_a_reader_would_refuse_is_not_recorded_so_the_archive_stays_restorable() -> None:
    reported = SourceVersions(
        kubernetes="v1.31.4+k3s1",
        crossplane="2.1.4 (built \x1b[2J)",
        feature_flags=("--enable-usages", "--debug mode", "--enable-realtime-compositions"),
    )

    source = verify(io.BytesIO(archive_with(reported))).source

    assert source == SourceVersions(
        kubernetes="v1.31.4+k3s1",
        crossplane="",
        feature_flags=("--enable-usages", "--enable-realtime-compositions"),
    )


def test_describe_shows_the_recorded_versions(tmp_path: Path) -> None:
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(archive_with(RECORDED))

    code, text, _ = run("describe", str(archive_file))
    _, as_json, _ = run("describe", "-o", "json", str(archive_file))

    assert code == 0
    assert text.splitlines()[1] == (
        "source: Kubernetes v1.31.4, Crossplane 2.1.4-up.2 (feature flags: --enable-usages)"
    )
    assert yaml.safe_load(as_json)["source"] == {
        "kubernetes": "v1.31.4",
        "crossplane": "2.1.4-up.2",
        "featureFlags": ["--enable-usages"],
    }


def test_describe_says_when_an_archive_records_no_versions(tmp_path: Path) -> None:
    archive_file = tmp_path / "backup.tar.gz"
    archive_file.write_bytes(archive_with(None))

    _, text, _ = run("describe", str(archive_file))

    assert text.splitlines()[1] == "source: Kubernetes not recorded, Crossplane not recorded"


def owned_by(api_version: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "x",
            "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": "o", "uid": "u"}],
            **extra,
        }
    }


@dataclass
class ReinstalledCase:
    reason: str
    rtype: Any
    obj: dict[str, Any]
    reinstalled: bool


REINSTALLED_CASES = [
    ReinstalledCase(
        "the package manager's Lock is written again by it",
        LOCKS,
        {"metadata": {"name": "lock"}},
        True,
    ),
    ReinstalledCase(
        "a Configuration's XRD is owned by its revision, which installs it again",
        XRDS,
        owned_by("pkg.crossplane.io/v1", "ConfigurationRevision"),
        True,
    ),
    ReinstalledCase(
        "a revision is owned by its package, which makes it again",
        CONFIGURATIONS.__class__(
            "configurationrevisions", "pkg.crossplane.io", "v1", "ConfigurationRevision", False
        ),
        owned_by("pkg.crossplane.io/v1", "Configuration"),
        True,
    ),
    ReinstalledCase(
        "a provider's TLS Secret is owned by its revision",
        SECRETS,
        {**owned_by("pkg.crossplane.io/v1", "ProviderRevision"), "type": "Opaque"},
        True,
    ),
    ReinstalledCase(
        "Crossplane's own CA is its install's, not the team's",
        SECRETS,
        {"metadata": {"name": "crossplane-root-ca", "namespace": "crossplane-system"}},
        True,
    ),
    ReinstalledCase(
        "an object Helm manages is installed again by Helm",
        CONFIGMAPS,
        {
            "metadata": {
                "name": "chart-settings",
                "namespace": "app",
                "labels": {"app.kubernetes.io/managed-by": "Helm"},
            }
        },
        True,
    ),
    ReinstalledCase(
        "the Configuration itself is the team's: restored, and Crossplane installs from it",
        CONFIGURATIONS,
        {"metadata": {"name": "platform"}},
        False,
    ),
    ReinstalledCase(
        "an XRD a team applied itself is restored",
        XRDS,
        {"metadata": {"name": "notes.acme.io"}},
        False,
    ),
    ReinstalledCase(
        "a composed resource owned by its composite is restored",
        BUCKETS,
        owned_by("platform.acme.io/v1alpha1", "ControlPlane"),
        False,
    ),
    ReinstalledCase(
        "a Secret of the same name as Crossplane's CA elsewhere is the team's",
        SECRETS,
        {"metadata": {"name": "crossplane-root-ca", "namespace": "app"}},
        False,
    ),
]


@pytest.mark.parametrize("case", REINSTALLED_CASES, ids=lambda c: c.reason)
def test_export_leaves_to_crossplane_what_it_makes_again(case: ReinstalledCase) -> None:
    assert (reinstalled(case.rtype, case.obj) is not None) == case.reinstalled


@dataclass
class DeploymentCase:
    reason: str
    deployments: list[dict[str, Any]]
    found: SourceVersions


def deployment(
    name: str, labels: dict[str, str], containers: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "crossplane-system", "labels": labels},
        "spec": {"template": {"spec": {"containers": containers}}},
    }


VERSION_LABEL = {"app.kubernetes.io/version": "1.20.0"}
DEPLOYMENT_CASES = [
    DeploymentCase(
        "the chart's version label and the --enable flags of the crossplane container",
        [
            deployment(
                "crossplane",
                VERSION_LABEL,
                [
                    {"name": "crossplane", "args": ["core", "start", "--enable-usages", "--debug"]},
                    {"name": "sidecar", "args": ["--enable-other"]},
                ],
            )
        ],
        SourceVersions(crossplane="1.20.0", feature_flags=("--enable-usages",)),
    ),
    DeploymentCase(
        "UXP names its container universal-crossplane",
        [
            deployment(
                "crossplane",
                {"app.kubernetes.io/version": "1.14.3-up.1"},
                [{"name": "universal-crossplane", "args": ["--enable-environment-configs"]}],
            )
        ],
        SourceVersions(crossplane="1.14.3-up.1", feature_flags=("--enable-environment-configs",)),
    ),
    DeploymentCase(
        "another Deployment says nothing of Crossplane",
        [deployment("crossplane-rbac-manager", VERSION_LABEL, [{"name": "crossplane"}])],
        SourceVersions(),
    ),
    DeploymentCase("no Deployment: nothing known", [], SourceVersions()),
]


@pytest.mark.parametrize("case", DEPLOYMENT_CASES, ids=lambda c: c.reason)
def test_crossplane_is_read_from_its_deployment_as_up_reads_it(case: DeploymentCase) -> None:
    listed = parse(DeploymentList, {"items": case.deployments}, "deployments")

    assert crossplane_of(listed) == case.found
