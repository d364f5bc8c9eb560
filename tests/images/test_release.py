"""`make release`: packages that carry the built images, SBOMs of what is in them, checksums."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest

from sandbox import rootfs
from tests.images.conftest import IMAGES_DIR, built_epoch, oci_config
from tests.schemas import ROOT

RELEASE_TIMEOUT_SECONDS = 900
PACKAGES = {"function": "function-controlplane", "provider": "provider-controlplane"}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dist/ as `make release` writes it, from the images already built."""
    oci_config("function")  # skips when `make images` has not run
    folder = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [str(ROOT / "tools" / "images.sh"), "release"],
        env={
            **os.environ,
            "IMAGES_DIR": str(IMAGES_DIR),
            "DIST_DIR": str(folder),
            "SOURCE_DATE_EPOCH": str(built_epoch()),
        },
        capture_output=True,
        text=True,
        timeout=RELEASE_TIMEOUT_SECONDS,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "unchanged since the last build" in result.stderr, "the release reuses the images"
    return folder


def test_the_checksums_cover_every_file_of_the_release(dist: Path) -> None:
    listed = {
        name: digest
        for digest, name in (
            line.split("  ", 1) for line in (dist / "SHA256SUMS").read_text().splitlines()
        )
    }
    files = {p.name for p in dist.iterdir()} - {"SHA256SUMS"}
    assert set(listed) == files
    for name, digest in listed.items():
        assert hashlib.sha256((dist / name).read_bytes()).hexdigest() == digest, name


def xpkg_config(package: Path) -> dict[str, Any]:
    with tarfile.open(package) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        config: dict[str, Any] = json.load(archive.extractfile(manifest[0]["Config"]))  # type: ignore[arg-type]
    return config


@pytest.mark.parametrize("image", sorted(PACKAGES))
def test_a_package_embeds_its_image_as_its_runtime(dist: Path, image: str) -> None:
    built = oci_config(image)
    package = xpkg_config(dist / f"{PACKAGES[image]}.xpkg")
    assert package["config"]["Entrypoint"] == built["config"]["Entrypoint"]
    assert package["config"]["User"] == "65532:65532"
    assert built["rootfs"]["diff_ids"][0] in package["rootfs"]["diff_ids"]
    assert len(package["rootfs"]["diff_ids"]) == 2, "the image's layer and package.yaml's"


@pytest.mark.parametrize("image", sorted(PACKAGES))
def test_an_sbom_lists_the_debian_packages_and_python_distributions_of_its_image(
    dist: Path, image: str, function_image: rootfs.Image
) -> None:
    document = json.loads((dist / f"{PACKAGES[image]}.sbom.cdx.json").read_text())
    versions = {c["name"]: c["version"] for c in document["components"]}
    status = function_image.rootfs / "var/lib/dpkg/status.d/python3.11"
    python = next(line for line in status.read_text().splitlines() if line.startswith("Version:"))
    assert versions["python3.11"] == python.split(":", 1)[1].strip()
    locked = (ROOT / "tools" / "image-requirements.txt").read_text()
    assert f"grpcio=={versions['grpcio']} " in locked
    assert "acme-controlplane" in versions
    assert not {"pytest", "mypy", "pip", "setuptools", "sandbox"} & set(versions)
    digests = dict(line.split() for line in (IMAGES_DIR / "digests").read_text().splitlines())
    assert document["metadata"]["component"]["hashes"][0]["content"] == digests[image].split(":")[1]


def test_the_oci_archive_holds_both_images_by_digest(dist: Path) -> None:
    with tarfile.open(dist / "controlplane-images.oci.tar") as archive:
        index = json.load(archive.extractfile("./index.json"))  # type: ignore[arg-type]
    tags = {
        m["annotations"]["org.opencontainers.image.ref.name"]: m["digest"]
        for m in index["manifests"]
    }
    digests = dict(line.split() for line in (IMAGES_DIR / "digests").read_text().splitlines())
    assert tags == digests


def test_the_configuration_package_ships_beside_them_without_a_runtime(dist: Path) -> None:
    # The XRDs and Compositions with their dependsOn (tests/e2e/test_packages.py
    # checks what it holds): a package of objects only, one layer, no entrypoint.
    package = xpkg_config(dist / "configuration-controlplane.xpkg")
    assert not (package.get("config") or {}).get("Entrypoint")
    assert len(package["rootfs"]["diff_ids"]) == 1


def test_the_release_ships_controlplane_plan_for_teams_ci(dist: Path) -> None:
    """The wheel with the console script, and the build program it runs beside it."""
    [wheel] = dist.glob("acme_controlplane-*-py3-none-any.whl")
    with zipfile.ZipFile(wheel) as archive:
        entry_points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
        assert "controlplane-plan = plan.cli:main" in archive.read(entry_points).decode()
    program = dist / "controlplane-plan-build-linux-amd64"
    assert os.access(program, os.X_OK)
    version = subprocess.run(
        [str(program), "--version"], capture_output=True, text=True, check=True
    ).stdout
    assert version.startswith("v"), "stamped with the fluxcd/pkg/kustomize it is built on"
