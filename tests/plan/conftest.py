"""Shared pieces of the plan's tests: the build program, a team repository, a staged composite."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.paths import TOOLS_BIN
from tests.builders import composite, example_input

BUILD_TOOL = TOOLS_BIN / "controlplane-plan-build"
SOURCE_URL = "https://github.com/acmeorg/myctp-config"


@pytest.fixture(scope="session")
def build_tool() -> Path:
    """The build program tools/build.sh builds; the tests using it skip without it."""
    if not BUILD_TOOL.is_file():
        pytest.skip(f"{BUILD_TOOL} is not built: run tools/build.sh plan_build")
    return BUILD_TOOL


def staged_composite(**source: Any) -> dict[str, Any]:
    """A ControlPlane with two stages, packages then config, and the given source fields."""
    return composite(
        {
            "source": {
                "url": SOURCE_URL,
                "stages": [
                    {"name": "packages", "path": "./packages"},
                    {"name": "config", "path": "./config", "dependsOn": ["packages"]},
                ],
                "substitute": {"ENVIRONMENT": "prod"},
                **source,
            }
        }
    )


def function_input() -> dict[str, Any]:
    """The example function input, which allows any public git host."""
    return example_input()


def write(root: Path, files: Mapping[str, Any]) -> None:
    """Write ``files`` under ``root``: YAML documents (a list for several) or text."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, str):
            path.write_text(content)
        elif isinstance(content, list):
            path.write_text(yaml.safe_dump_all(content))
        else:
            path.write_text(yaml.safe_dump(content))


def git(root: Path, *args: str) -> str:
    """Run git in ``root``; its output."""
    done = subprocess.run(
        ["git", "-C", str(root), "-c", "user.email=t@example.org", "-c", "user.name=t", *args],
        capture_output=True,
        check=True,
        text=True,
    )
    return done.stdout.strip()


def commit(
    root: Path, files: Mapping[str, Any], message: str, *, remove: tuple[str, ...] = ()
) -> str:
    """Write ``files``, remove ``remove``, commit everything; the commit's sha."""
    if not (root / ".git").exists():
        root.mkdir(parents=True, exist_ok=True)
        git(root, "init", "-q", "-b", "main")
    for name in remove:
        (root / name).unlink()
    write(root, files)
    git(root, "add", "-A")
    git(root, "commit", "-q", "--allow-empty", "-m", message)
    return git(root, "rev-parse", "HEAD")


def configmap(
    name: str, data: Mapping[str, str], namespace: str = "default", **metadata: Any
) -> dict[str, Any]:
    """A ConfigMap manifest."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, **metadata},
        "data": dict(data),
    }
