"""The sandbox's git server: what a commit pushes is what a smart-HTTP clone gets."""

from __future__ import annotations

import subprocess
from pathlib import Path

from sandbox.git import GitServer


def clone(url: str, into: Path) -> Path:
    done = subprocess.run(
        ["git", "clone", "--quiet", url, str(into)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return into


def head(folder: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_clone_over_smart_http_gets_the_last_commit_and_only_its_files(tmp_path: Path) -> None:
    with GitServer(tmp_path / "repositories") as server:
        repository = server.repository("team")
        repository.commit({"app/a.yaml": "a: 1\n", "app/b.yaml": "b: 1\n"}, "first")
        sha = repository.commit({"app/a.yaml": "a: 2\n"}, "second")
        # Smart HTTP: git asks for info/refs with service=git-upload-pack.
        cloned = clone(repository.url, tmp_path / "clone")
    assert head(cloned) == sha
    assert (cloned / "app" / "a.yaml").read_text() == "a: 2\n"
    assert not (cloned / "app" / "b.yaml").exists()


def test_an_unknown_repository_is_not_found(tmp_path: Path) -> None:
    with GitServer(tmp_path / "repositories") as server:
        done = subprocess.run(
            ["git", "ls-remote", f"{server.url}/missing.git"],
            capture_output=True,
            text=True,
            check=False,
        )
    assert done.returncode != 0
    assert "not found" in done.stderr.lower() or "404" in done.stderr
