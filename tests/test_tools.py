"""``tools/build.sh crds``: pinned by sum, cached by a stamp, repaired when touched.

Each test runs the script on a copy of ``tools/`` in a folder of its own (its
``.tools/bin`` shared with this checkout, so controller-gen is not rebuilt);
the modules come from the Go module cache that ``make tools`` filled.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.schemas import ROOT, upstream_crds

TIMEOUT_SECONDS = 300


def copy_of_tools(into: Path, *, with_crds: bool) -> Path:
    """A repository root holding only tools/ (and, if asked, a copy of the fetched CRDs)."""
    shutil.copytree(ROOT / "tools", into / "tools")
    (into / ".tools").mkdir()
    (into / ".tools" / "bin").symlink_to((ROOT / ".tools" / "bin").resolve())
    if with_crds:
        shutil.copytree(upstream_crds(), into / ".tools" / "crds")
    return into


def build_crds(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / "tools" / "build.sh"), "crds"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )


def test_a_fetched_set_is_left_alone(tmp_path: Path) -> None:
    # The first run brings the copy up to this script (the shared set may have
    # been stamped by another checkout's); the second must do nothing.
    root = copy_of_tools(tmp_path, with_crds=True)
    first = build_crds(root)
    assert first.returncode == 0, first.stderr
    stamp = (root / ".tools" / "crds" / ".stamp").read_text()
    second = build_crds(root)
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "crds: cached"
    assert (root / ".tools" / "crds" / ".stamp").read_text() == stamp


def test_a_touched_file_is_fetched_again(tmp_path: Path) -> None:
    root = copy_of_tools(tmp_path, with_crds=True)
    touched = root / ".tools" / "crds" / "flux" / "source.toolkit.fluxcd.io_gitrepositories.yaml"
    want = touched.read_bytes()
    touched.write_text("# edited by hand\n")
    result = build_crds(root)
    assert result.returncode == 0, result.stderr
    assert "crds: fetching" in result.stdout
    assert touched.read_bytes() == want


@pytest.mark.parametrize(
    ("reason", "old", "new", "want_in_error"),
    [
        (
            "A module whose sum is not the recorded one is refused.",
            "h1:nG534/bI6nVpyHra7ONAk6xDB3xPsVT+EOLHZHXPrrc=",
            "h1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
            "tools/crds.lock records h1:AAAA",
        ),
        (
            "A line the script does not know is refused.",
            "copy flux github.com/fluxcd/source-controller",
            "paste flux github.com/fluxcd/source-controller",
            "unknown line: paste",
        ),
    ],
)
def test_a_bad_lock_fails_and_leaves_no_crds(
    tmp_path: Path, reason: str, old: str, new: str, want_in_error: str
) -> None:
    root = copy_of_tools(tmp_path, with_crds=False)
    lock = root / "tools" / "crds.lock"
    assert old in lock.read_text()
    lock.write_text(lock.read_text().replace(old, new))
    result = build_crds(root)
    assert result.returncode != 0, reason
    assert want_in_error in result.stderr, result.stderr
    assert not (root / ".tools" / "crds").exists(), reason
    assert sorted(p.name for p in (root / ".tools").iterdir()) == ["bin"], "no staging left"
