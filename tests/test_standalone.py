"""The repository stands on its own: nothing in it reads a folder beside the clone.

A user's clone has nothing next to it; the upstream CRDs come from pinned
modules through ``tools/build.sh crds`` (tools/CRDS.md). This test names the
ways the old layout was reached, so it is the one tracked file allowed to
spell them, and it leaves itself out by its own path.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
THIS_FILE = Path(__file__).resolve().relative_to(ROOT).as_posix()

# A sibling folder of the clone by relative path, by an environment variable
# that pointed at it, by an absolute path on the build machine, or by a path
# built from the repository root's parent.
OUTSIDE_READS = re.compile(r"\.\./shared|SHARED_DIR|/work/shared|\.parent\s*/\s*['\"]shared['\"]")


def repository_files() -> list[str]:
    """Every file git tracks or would track (not ignored), relative to the root."""
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    return [name for name in listing.split("\0") if name]


def outside_reads(text: str) -> list[str]:
    """The lines of ``text`` that reach outside the clone, numbered from 1."""
    return [
        f"{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if OUTSIDE_READS.search(line)
    ]


@dataclass(frozen=True)
class LineCase:
    reason: str
    line: str
    want_flagged: bool


LINE_CASES = [
    LineCase("A relative path to the sibling folder is flagged.", "see ../shared/crds", True),
    LineCase(
        "The old environment variable is flagged.",
        'Path(os.environ.get("SHARED_DIR", ROOT.parent / "shared"))',
        True,
    ),
    LineCase("A path built from the root's parent is flagged.", "ROOT.parent / 'shared'", True),
    LineCase("The build machine's absolute path is flagged.", "cp -r /work/shared/crds .", True),
    LineCase(
        "The fetched CRDs inside the clone are not flagged.", 'ROOT / ".tools" / "crds"', False
    ),
    LineCase(
        "The Spaces SharedBackupConfig kind is not flagged.",
        "spaces.upbound.io_sharedbackupconfigs.yaml",
        False,
    ),
]


@pytest.mark.parametrize("case", LINE_CASES, ids=lambda case: case.reason)
def test_the_check_flags_every_way_of_reaching_beside_the_clone(case: LineCase) -> None:
    assert bool(outside_reads(case.line)) is case.want_flagged, case.reason


def test_no_tracked_file_reads_a_folder_beside_the_clone() -> None:
    files = repository_files()
    # The listing is the repository's: it holds this very file.
    assert THIS_FILE in files, files
    found = {}
    for name in files:
        if name == THIS_FILE:
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        if lines := outside_reads(text):
            found[name] = lines
    assert not found, f"files that reach beside the clone: {found}"


# Tests that read the upstream CRDs both ways: in-process JSON Schema
# (tests/schemas.py) and `crossplane beta validate` with its seeded cache
# (tests/e2e/crossplane.py).
SCHEMA_TESTS = (
    "tests/function/test_compose.py",
    "tests/e2e/test_crossplane_render.py",
    "-k",
    "not in_process_render and not crossplane_render_validate",
)


def test_the_schema_tests_pass_in_a_copy_with_nothing_beside_it(tmp_path: Path) -> None:
    # A copy of the repository's files alone in a folder, as a user's clone
    # is; only the ignored, fetched .tools is shared with this checkout.
    clone = tmp_path / "alone" / "repository"
    for name in repository_files():
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    (clone / ".tools").symlink_to((ROOT / ".tools").resolve())
    assert sorted(p.name for p in clone.parent.iterdir()) == ["repository"]

    where = subprocess.run(
        [sys.executable, "-c", "import tests.schemas as s; print(s.ROOT)"],
        cwd=clone,
        capture_output=True,
        text=True,
        check=True,
    )
    assert where.stdout.strip() == str(clone), "the copy must run its own tests"

    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *SCHEMA_TESTS],
        cwd=clone,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
