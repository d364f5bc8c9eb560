"""Drives the real crossplane CLI that ``tools/build.sh`` builds into ``.tools/bin``."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.schemas import OUR_CRDS, ROOT, XRDS, upstream_crds

BINARY = ROOT / ".tools" / "bin" / "crossplane"
DEVELOPMENT_TARGET = "render.crossplane.io/runtime-development-target"
TIMEOUT_SECONDS = 120


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run the crossplane CLI; fail with its output when it is missing."""
    if not BINARY.exists():
        msg = f"{BINARY} is missing: build it with tools/build.sh (make test does)"
        raise FileNotFoundError(msg)
    return subprocess.run(
        [str(BINARY), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
    )


def render(
    folder: Path, composition: Path, function_address: str, observed: Path
) -> list[dict[str, Any]]:
    """``crossplane render`` of an example against the function at ``function_address``.

    The example's ``required/`` folder, when it has one, holds the resources the
    function may ask for; an ``observed`` folder without YAML (nothing composed
    yet) is passed as no observed resources, which crossplane render wants.
    """
    extra: list[str] = []
    if any(observed.glob("*.yaml")):
        extra += ["--observed-resources", str(observed)]
    if (folder / "required").is_dir():
        extra += ["--required-resources", str(folder / "required")]
    result = run(
        "render",
        "xr.yaml",
        str(composition),
        "functions.yaml",
        *extra,
        "--include-full-xr",
        "--function-annotations",
        f"{DEVELOPMENT_TARGET}={function_address}",
        cwd=folder,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


# `beta validate` loads Crossplane's own CRDs from a package it would pull
# from an OCI registry. No registry but the package ones is reachable here, so
# the cache is seeded with the upstream Crossplane CRDs that tools/build.sh
# fetched into .tools/crds/crossplane (from the crossplane module of the same
# version as the CLI) under a name of our own, which validate then reads
# instead of pulling.
CROSSPLANE_SCHEMAS_IMAGE = "local/crossplane-crds:upstream"


def extensions(into: Path) -> Path:
    """A folder of every CRD and XRD (but Crossplane's own) to validate against."""
    for source in (*sorted(p for p in upstream_crds().iterdir() if p.is_dir()), *OUR_CRDS, XRDS):
        if source.name != "crossplane":
            shutil.copytree(source, into / f"{source.parent.name}-{source.name}")
    return into


def seeded_cache(into: Path) -> Path:
    """A validate cache holding the upstream Crossplane CRDs as its Crossplane package."""
    package = into / CROSSPLANE_SCHEMAS_IMAGE.replace(":", "@")
    package.mkdir(parents=True)
    documents = [p.read_text() for p in sorted((upstream_crds() / "crossplane").glob("*.yaml"))]
    (package / "package.yaml").write_text("\n---\n".join(documents))
    return into


def validate(
    extensions_dir: Path, cache: Path, resources: Path
) -> subprocess.CompletedProcess[str]:
    """``crossplane beta validate`` offline, against the seeded cache."""
    return run(
        "beta",
        "validate",
        str(extensions_dir),
        str(resources),
        "--cache-dir",
        str(cache),
        "--crossplane-image",
        CROSSPLANE_SCHEMAS_IMAGE,
        "--error-on-missing-schemas",
    )
