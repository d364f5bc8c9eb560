"""``python -m tools.docs [--check]``: write the generated docs, or say which are stale.

Writes every generated page and block (``make docs``), then fails naming each
field and flag that has no description. With ``--check`` nothing is written:
it fails naming each stale file.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tools.docs import pages


def main(argv: list[str]) -> int:
    """Write (or with ``--check`` compare) every generated file; 1 when something is wrong."""
    check = argv == ["--check"]
    if argv and not check:
        print("usage: python -m tools.docs [--check]", file=sys.stderr)
        return 2
    files = pages.generated()
    stale = [path for path, content in files.items() if _read(path) != content]
    # A page of a kind no schema defines any more.
    left_over = [path for path in pages.REFERENCE.glob("*.md") if path not in files]
    for path in stale:
        print(f"{path.relative_to(pages.ROOT)} {VERBS[check]}", file=sys.stderr)
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(files[path])
    for path in left_over:
        print(f"{path.relative_to(pages.ROOT)} {LEFT_OVER[check]}", file=sys.stderr)
        if not check:
            path.unlink()
    problems = pages.undescribed()
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems or (check and (stale or left_over)) else 0


VERBS = {True: "is stale: run `make docs`", False: "written"}
LEFT_OVER = {True: "documents no schema: run `make docs` to remove it", False: "removed"}


def _read(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
