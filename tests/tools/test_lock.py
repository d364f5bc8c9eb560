"""The image's lock: every resolved distribution hashed, the product left out."""

from __future__ import annotations

from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.schemas import ROOT
from tools import lock


def item(name: str, version: str, hashes: dict[str, str] | None) -> dict[str, Any]:
    info: dict[str, Any] = {"url": f"https://files.example/{name}.whl"}
    if hashes is not None:
        info["archive_info"] = {"hashes": hashes}
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def test_the_lock_pins_and_hashes_every_distribution_but_the_product() -> None:
    report = {
        "install": [
            item("acme-controlplane", "0.1.0", None),
            item("PyYAML", "6.0.4", {"sha256": "aa"}),
            item("boto3", "1.44.8", {"sha256": "bb"}),
        ]
    }
    assert lock.lock_lines(report) == [
        "boto3==1.44.8 --hash=sha256:bb",
        "PyYAML==6.0.4 --hash=sha256:aa",
    ]


def test_a_distribution_resolved_without_a_hash_is_refused() -> None:
    with pytest.raises(ValueError, match="local-thing"):
        lock.lock_lines({"install": [item("local-thing", "1.0", None)]})


def test_the_committed_lock_satisfies_every_dependency_in_pyproject() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pinned = {
        canonicalize_name(line.split("==")[0]): Version(line.split("==")[1].split()[0])
        for line in (ROOT / "tools" / "image-requirements.txt").read_text().splitlines()
        if line and not line.startswith("#")
    }
    requirements = [
        Requirement(r)
        for r in (*project["project"]["dependencies"], *project["build-system"]["requires"])
    ]
    stale = [
        str(r)
        for r in requirements
        if canonicalize_name(r.name) not in pinned
        or pinned[canonicalize_name(r.name)] not in r.specifier
    ]
    assert stale == [], "run `tools/images.sh lock`"
