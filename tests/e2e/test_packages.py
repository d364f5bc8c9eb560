"""The packages build with the real crossplane CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e import crossplane
from tests.schemas import ROOT


@pytest.mark.e2e
@pytest.mark.parametrize("package", ["function", "provider"])
def test_crossplane_xpkg_build_accepts_the_package(package: str, tmp_path: Path) -> None:
    output = tmp_path / f"{package}.xpkg"
    result = crossplane.run(
        "xpkg",
        "build",
        "--package-root",
        str(ROOT / "package" / package),
        "--examples-root",
        str(tmp_path / "no-examples"),
        "--package-file",
        str(output),
    )
    assert result.returncode == 0, result.stderr
    assert output.stat().st_size > 0


def test_the_provider_examples_validate_against_the_provider_crds() -> None:
    import yaml

    from tests.schemas import problems

    files = sorted((ROOT / "examples" / "provider").glob("*.yaml"))
    assert files
    for file in files:
        for obj in yaml.safe_load_all(file.read_text()):
            assert problems(obj) == [], file.name


def _package_yaml(xpkg: Path) -> list[dict[str, object]]:
    """The documents of the package.yaml an xpkg (a docker-archive tarball) carries."""
    import io
    import tarfile

    import yaml

    with tarfile.open(xpkg) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        for layer in manifest[0]["Layers"]:
            blob = archive.extractfile(layer)
            assert blob is not None
            with tarfile.open(fileobj=io.BytesIO(blob.read())) as files:
                if "package.yaml" in files.getnames():
                    text = files.extractfile("package.yaml").read().decode()  # type: ignore[union-attr]
                    return [doc for doc in yaml.safe_load_all(text) if doc]
    raise AssertionError(f"{xpkg} carries no package.yaml")


@pytest.mark.e2e
def test_the_configuration_package_holds_the_api_and_depends_on_what_it_composes_with(
    tmp_path: Path,
) -> None:
    import yaml

    from tools.packages import api_files, configuration_root

    root = configuration_root(tmp_path / "root")
    output = tmp_path / "configuration.xpkg"
    result = crossplane.run(
        "xpkg",
        "build",
        "--package-root",
        str(root),
        "--examples-root",
        str(tmp_path / "no-examples"),
        "--package-file",
        str(output),
    )
    assert result.returncode == 0, result.stderr
    meta, *objects = _package_yaml(output)
    assert meta["kind"] == "Configuration"
    dependencies = {d["package"]: d["version"] for d in meta["spec"]["dependsOn"]}  # type: ignore[index]
    assert dependencies == {
        "xpkg.acme.io/acme/function-controlplane": ">=v0.1.0, <v0.2.0",
        "xpkg.acme.io/acme/provider-controlplane": ">=v0.1.0, <v0.2.0",
        "xpkg.upbound.io/upbound/provider-aws-s3": ">=v2.7.0, <v3.0.0",
        "xpkg.upbound.io/upbound/provider-aws-iam": ">=v2.7.0, <v3.0.0",
    }
    # The build decodes each object into its Go type (an empty status is added):
    # the same objects means the same kind, name and spec.
    shipped = [yaml.safe_load((ROOT / path).read_text()) for path in api_files()]

    def content(obj: dict[str, Any]) -> tuple[str, str, str]:
        return (obj["kind"], obj["metadata"]["name"], json.dumps(obj["spec"], sort_keys=True))

    assert sorted(map(content, objects)) == sorted(map(content, shipped))
