"""Write the image's hashed requirements lock from a ``pip install --dry-run --report``.

``tools/images.sh lock`` resolves ``pyproject.toml`` (and setuptools, which
builds the product inside the image) and hands the report to this module; the
image build then installs exactly these files with ``--require-hashes``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

PRODUCT = "acme-controlplane"
HEADER = """\
# The image's Python distributions, resolved from pyproject.toml for CPython 3.11 on
# x86_64 glibc (Debian 12) and hashed. Written by `tools/images.sh lock`; do not edit.
"""


def lock_lines(report: dict[str, Any]) -> list[str]:
    """``name==version --hash=sha256:...`` for every resolved distribution but the product."""
    lines = []
    for item in report["install"]:
        metadata = item["metadata"]
        if metadata["name"] == PRODUCT:
            continue
        hashes = item["download_info"].get("archive_info", {}).get("hashes", {})
        if "sha256" not in hashes:
            msg = f"{metadata['name']} was resolved without a sha256 (not from an index?)"
            raise ValueError(msg)
        lines.append(f"{metadata['name']}=={metadata['version']} --hash=sha256:{hashes['sha256']}")
    return sorted(lines, key=str.lower)


def main(report_path: str, lock_path: str) -> None:
    """Write the lock at ``lock_path`` from the pip report at ``report_path``."""
    report = json.loads(Path(report_path).read_text(encoding="utf-8"))
    Path(lock_path).write_text(HEADER + "\n".join(lock_lines(report)) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(*sys.argv[1:])
