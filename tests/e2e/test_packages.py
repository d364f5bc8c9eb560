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
