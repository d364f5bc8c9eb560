"""The package root of the Configuration: its crossplane.yaml with the XRDs and Compositions.

`crossplane xpkg build` packs every YAML file under its package root, so the
Configuration's root is assembled: `package/configuration/crossplane.yaml`
beside copies of `xrds/` and `compositions/` (their folders kept). `make
release` builds the shipped one (tools/images.sh); the sandbox assembles the
same root and sets its compositions' Input, as a platform team builds its own
(docs/install.md). Standard library only: the build machine's python3 runs it.

    python -m tools.packages configuration DEST
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGURATION_META = ROOT / "package" / "configuration" / "crossplane.yaml"
API_FOLDERS = ("xrds", "compositions")


def api_files(root: Path = ROOT) -> list[Path]:
    """The XRDs and Compositions the Configuration holds, relative to `root`."""
    return sorted(
        path.relative_to(root) for folder in API_FOLDERS for path in (root / folder).rglob("*.yaml")
    )


def configuration_root(dest: Path) -> Path:
    """Assemble the Configuration's package root in `dest` (emptied first)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    shutil.copyfile(CONFIGURATION_META, dest / "crossplane.yaml")
    for relative in api_files():
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / relative, target)
    return dest


def main(argv: list[str]) -> int:
    """`configuration DEST`: assemble the shipped Configuration's root in DEST."""
    if len(argv) != 2 or argv[0] != "configuration":
        print("usage: python -m tools.packages configuration DEST", file=sys.stderr)
        return 2
    configuration_root(Path(argv[1]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
