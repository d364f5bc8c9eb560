"""Where the sandbox finds the repository, the tools it built and the upstream CRDs."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# Built by tools/build.sh from the Go module proxy; never committed.
TOOLS = REPO_ROOT / ".tools"
TOOLS_BIN = TOOLS / "bin"
# The upstream CRDs, pinned and fetched by `tools/build.sh crds`.
UPSTREAM_CRDS = TOOLS / "crds"
