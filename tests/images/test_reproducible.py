"""Reproducible: the same tree and SOURCE_DATE_EPOCH give the same image digests.

Marked ``rebuild``: it builds both images again from scratch (Debian packages
and wheels from the cache), about two minutes on an idle 2-core machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.images.conftest import IMAGES_DIR, built_epoch, oci_config
from tests.schemas import ROOT

BUILD_TIMEOUT_SECONDS = 1800


@pytest.mark.rebuild
def test_a_second_build_of_the_same_tree_gives_the_same_digests(tmp_path: Path) -> None:
    oci_config("function")  # skips when `make images` has not run
    again = tmp_path / "again"
    try:
        result = subprocess.run(
            [str(ROOT / "tools" / "images.sh"), "--force"],
            env={**os.environ, "IMAGES_DIR": str(again), "SOURCE_DATE_EPOCH": str(built_epoch())},
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT_SECONDS,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        rebuilt = (again / "digests").read_text()
    finally:
        shutil.rmtree(again, ignore_errors=True)  # 300 MB of root-owned files
    first = (IMAGES_DIR / "digests").read_text()
    assert first.count("sha256:") == 2
    assert rebuilt == first
