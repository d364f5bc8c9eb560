"""examples/team-quickstart in the sandbox: its repository served, its ControlPlane pointed at it.

The example's ``repository/`` folder is what a team's git repository holds;
the sandbox commits it into a repository of its own git server, and writes the
example's ControlPlane (with its namespace) with ``spec.source.url`` naming
that repository, ready for ``kubectl apply -f``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sandbox.git import GitServer
from sandbox.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "team-quickstart"
REPOSITORY = EXAMPLE / "repository"


def repository_files(folder: Path = REPOSITORY) -> dict[str, str]:
    """The example repository's files by their path in it."""
    return {
        path.relative_to(folder).as_posix(): path.read_text()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def manifests(url: str) -> list[dict[str, Any]]:
    """The example's namespace and ControlPlane, syncing from ``url``."""
    composite: dict[str, Any] = yaml.safe_load((EXAMPLE / "xr.yaml").read_text())
    composite["spec"]["source"]["url"] = url
    namespace = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": composite["metadata"]["namespace"]},
    }
    return [namespace, composite]


def prepare(git: GitServer, workdir: Path) -> Path:
    """Serve the example's repository and write its manifests; the file to apply."""
    repository = git.repository("team-quickstart")
    repository.commit(repository_files(), "examples/team-quickstart/repository")
    path = workdir / "team-quickstart.yaml"
    path.write_text(yaml.safe_dump_all(manifests(repository.url), sort_keys=False))
    return path
