"""The packages build with the real crossplane CLI."""

from __future__ import annotations

from pathlib import Path

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
