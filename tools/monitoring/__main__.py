"""``python -m tools.monitoring [--check]``: write the monitoring files, or name the stale."""

from __future__ import annotations

import sys

from tools.monitoring import generate


def main(argv: list[str]) -> int:
    """Write (or with ``--check`` compare) every generated file; 1 when one is stale on --check."""
    check = argv == ["--check"]
    if argv and not check:
        print("usage: python -m tools.monitoring [--check]", file=sys.stderr)
        return 2
    stale = False
    for path, content in generate.generated().items():
        if path.exists() and path.read_text() == content:
            continue
        stale = True
        print(
            f"{path.relative_to(generate.ROOT)} {'is stale' if check else 'written'}",
            file=sys.stderr,
        )
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
