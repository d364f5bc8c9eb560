"""The images `make images` built, unpacked, and ways to run them (sandbox.rootfs).

Every test here is marked ``images``; it is skipped, with the command to run,
when the images have not been built (`make test` builds them first).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from sandbox import rootfs
from tests.schemas import ROOT

IMAGES_DIR = Path(os.environ.get("IMAGES_DIR", rootfs.IMAGES_DIR))
RUN_TIMEOUT_SECONDS = 60


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test here `images`."""
    for item in items:
        if Path(str(item.fspath)).is_relative_to(Path(__file__).parent):
            item.add_marker(pytest.mark.images)


def unpacked(name: str) -> rootfs.Image:
    """The image ``name`` as `make images` unpacked it; skip when it has not been built."""
    try:
        return rootfs.built(name, IMAGES_DIR)
    except FileNotFoundError as error:
        pytest.skip(str(error))


def oci_config(name: str) -> dict[str, Any]:
    """The OCI image config of the image tagged ``name`` in the built layout."""
    layout = IMAGES_DIR / "oci"
    if not (layout / "index.json").is_file():
        pytest.skip(f"{layout} is not built: run `make images` (as root)")

    def blob(digest: str) -> dict[str, Any]:
        algorithm, _, hexdigest = digest.partition(":")
        found: dict[str, Any] = json.loads((layout / "blobs" / algorithm / hexdigest).read_text())
        return found

    index = json.loads((layout / "index.json").read_text())
    manifest = next(
        m
        for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == name
    )
    return blob(blob(manifest["digest"])["config"]["digest"])


@pytest.fixture(scope="session")
def function_image() -> rootfs.Image:
    return unpacked("function")


@pytest.fixture(scope="session")
def provider_image() -> rootfs.Image:
    return unpacked("provider")


def python_in(
    image: rootfs.Image, code: str, binds: Sequence[rootfs.Bind] = ()
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with the image's /venv/bin/python, as the image's user."""
    process = rootfs.popen(
        image,
        ["-c", code],
        command=["/venv/bin/python"],
        binds=binds,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out, err = process.communicate(timeout=RUN_TIMEOUT_SECONDS)
    finally:
        if process.poll() is None:
            rootfs.stop(process)
    return subprocess.CompletedProcess(process.args, process.returncode, out.decode(), err.decode())


class Running:
    """A process of an image, its log in a file."""

    def __init__(self, process: subprocess.Popen[bytes], log: Path) -> None:
        self.process = process
        self.log_path = log
        self.exit_code: int | None = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.process.poll() is None


@contextlib.contextmanager
def running(
    image: rootfs.Image,
    args: Sequence[str],
    log: Path,
    *,
    command: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    binds: Sequence[rootfs.Bind] = (),
) -> Iterator[Running]:
    """Run the image's entrypoint (or ``command``) with ``args``; stop it (SIGTERM) after."""
    with log.open("ab") as output:
        process = rootfs.popen(
            image,
            args,
            command=command,
            env=env,
            binds=binds,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    run = Running(process, log)
    try:
        yield run
    finally:
        run.exit_code = rootfs.stop(process)


def owned_by(image: rootfs.Image, *paths: Path) -> None:
    """Give files to the image's user, as a pod's fsGroup would make them readable."""
    for path in paths:
        os.chown(path, image.uid, image.gid)


def built_epoch() -> int:
    """The SOURCE_DATE_EPOCH the images were built with (their creation time)."""
    created = oci_config("function")["created"]
    return int(datetime.fromisoformat(created).timestamp())


def fail_if_stale() -> None:
    """Fail, rather than test old images, when the tree changed since `make images`."""
    fingerprint = IMAGES_DIR / "fingerprint"
    if not fingerprint.is_file():
        return  # not built: every test that needs them skips
    current = subprocess.run(
        [str(ROOT / "tools" / "images.sh"), "fingerprint"],
        env={**os.environ, "SOURCE_DATE_EPOCH": str(built_epoch())},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if current != fingerprint.read_text().strip():
        pytest.fail(f"the images in {IMAGES_DIR} are older than the tree: run `make images`")


@pytest.fixture(scope="session", autouse=True)
def images_are_current() -> None:
    """Every image test runs the tree's own images."""
    fail_if_stale()
