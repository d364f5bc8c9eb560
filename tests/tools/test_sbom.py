"""The SBOM: Debian packages from status.d and Python distributions from dist-info."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tools import sbom

DIGEST = "sha256:" + "ab" * 32


@dataclass
class PurlCase:
    reason: str
    package: sbom.Package
    purl: str


PURLS = [
    PurlCase(
        "a Debian package names its architecture and distribution",
        sbom.Package("deb", "libssl3", "3.0.22-1~deb12u2", architecture="amd64"),
        "pkg:deb/debian/libssl3@3.0.22-1~deb12u2?arch=amd64&distro=debian-12",
    ),
    PurlCase(
        "an epoch's colon is percent-encoded",
        sbom.Package("deb", "zlib1g", "1:1.2.13.dfsg-1+deb12u1", architecture="amd64"),
        "pkg:deb/debian/zlib1g@1%3A1.2.13.dfsg-1%2Bdeb12u1?arch=amd64&distro=debian-12",
    ),
    PurlCase(
        "a Python distribution is a pypi purl",
        sbom.Package("pypi", "crossplane-function-sdk-python", "0.15.1"),
        "pkg:pypi/crossplane-function-sdk-python@0.15.1",
    ),
]


@pytest.mark.parametrize("case", PURLS, ids=lambda case: case.reason)
def test_a_package_url_follows_the_purl_spec(case: PurlCase) -> None:
    assert case.package.purl == case.purl


def rootfs(tmp_path: Path) -> Path:
    status = tmp_path / sbom.STATUS_DIR
    status.mkdir(parents=True)
    (status / "libc6").write_text(
        "Package: libc6\nVersion: 2.36-9+deb12u14\nArchitecture: amd64\n"
        "Description: GNU C Library\n continued description: not a field\n"
    )
    (status / "libc6.md5sums").write_text("0123  usr/lib/x\n")
    site = tmp_path / sbom.SITE_PACKAGES
    for folder, metadata in (
        ("PyYAML-6.0.4.dist-info", "Metadata-Version: 2.1\nName: PyYAML\nVersion: 6.0.4\n"),
        (
            "acme_controlplane-0.1.0.dist-info",
            "Metadata-Version: 2.4\nName: acme-controlplane\nVersion: 0.1.0\n"
            "License-Expression: Apache-2.0\n\nThe README, which is not a header: x\n",
        ),
    ):
        (site / folder).mkdir(parents=True)
        (site / folder / "METADATA").write_text(metadata)
    return tmp_path


def test_the_packages_of_a_root_filesystem_are_read_from_status_d_and_dist_info(
    tmp_path: Path,
) -> None:
    root = rootfs(tmp_path)
    assert sbom.debian_packages(root / sbom.STATUS_DIR) == [
        sbom.Package("deb", "libc6", "2.36-9+deb12u14", architecture="amd64")
    ]
    assert sbom.python_distributions(root / sbom.SITE_PACKAGES) == [
        sbom.Package("pypi", "pyyaml", "6.0.4"),
        sbom.Package("pypi", "acme-controlplane", "0.1.0", license="Apache-2.0"),
    ]


def test_the_document_is_cyclonedx_with_the_image_as_its_subject_and_sorted_components() -> None:
    packages = [
        sbom.Package("pypi", "pyyaml", "6.0.4"),
        sbom.Package("deb", "libc6", "2.36", architecture="amd64"),
    ]
    created = datetime(2025, 12, 3, tzinfo=UTC)
    document = sbom.cyclonedx("acme/function-controlplane", "0.1.0", DIGEST, packages, created)
    assert document["bomFormat"] == "CycloneDX"
    assert document["specVersion"] == "1.5"
    assert document["metadata"]["timestamp"] == "2025-12-03T00:00:00Z"
    assert document["metadata"]["component"]["hashes"] == [{"alg": "SHA-256", "content": "ab" * 32}]
    assert [c["purl"] for c in document["components"]] == [
        "pkg:deb/debian/libc6@2.36?arch=amd64&distro=debian-12",
        "pkg:pypi/pyyaml@6.0.4",
    ]
    again = sbom.cyclonedx("acme/function-controlplane", "0.1.0", DIGEST, packages, created)
    assert again == document, "the same image gets the same SBOM, serial number included"
    other = sbom.cyclonedx("acme/x", "0.1.0", "sha256:" + "cd" * 32, packages, created)
    assert other["serialNumber"] != document["serialNumber"]


def test_a_digest_that_is_not_sha256_is_refused() -> None:
    with pytest.raises(ValueError, match="sha256"):
        sbom.cyclonedx("acme/x", "0.1.0", "md5:abc", [], datetime(2025, 1, 1, tzinfo=UTC))
