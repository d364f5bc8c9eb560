"""What the images hold: the product and Debian 12's Python, nothing to log in or install with."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pytest

from sandbox import rootfs
from tests.images.conftest import oci_config, python_in
from tests.schemas import ROOT

SITE_PACKAGES = "venv/lib/python3.11/site-packages"
LOCK = ROOT / "tools" / "image-requirements.txt"
PRODUCT = "acme_controlplane"
# Shells, package managers and build tools, by file name, anywhere in the image.
FORBIDDEN_NAMES = {
    "sh", "bash", "dash", "ash", "zsh", "busybox", "su", "sudo",
    "apt", "apt-get", "dpkg", "dpkg-deb", "pip", "pip3", "pip3.11", "easy_install",
    "tar", "awk", "mawk", "perl", "gcc", "cc",
}  # fmt: skip


def test_no_file_in_the_image_is_a_shell_a_package_manager_or_a_build_tool(
    function_image: rootfs.Image,
) -> None:
    found = [
        str(Path(directory, name).relative_to(function_image.rootfs))
        for directory, _, files in os.walk(function_image.rootfs)
        for name in files
        if name in FORBIDDEN_NAMES
    ]
    assert found == []


@dataclass
class AbsentCase:
    reason: str
    path: str


ABSENT = [
    AbsentCase("pip leaves the venv once it has installed the lock", f"{SITE_PACKAGES}/pip"),
    AbsentCase("setuptools built the product and went", f"{SITE_PACKAGES}/setuptools"),
    AbsentCase("the venv has no activate scripts (no shell to source them)", "venv/bin/activate"),
    AbsentCase("the sandbox package is for development only", f"{SITE_PACKAGES}/sandbox"),
    AbsentCase("the build machine's resolver is not copied in", "etc/resolv.conf"),
    AbsentCase("the build machine's name is not copied in", "etc/hostname"),
    AbsentCase("apt's state from the build is gone", "var/lib/apt"),
    AbsentCase("no dpkg database; status.d records the packages", "var/lib/dpkg/status"),
]  # fmt: skip


@pytest.mark.parametrize("case", ABSENT, ids=lambda case: case.reason)
def test_a_build_leftover_is_absent(function_image: rootfs.Image, case: AbsentCase) -> None:
    path = function_image.rootfs / case.path
    assert not path.exists() and not path.is_symlink(), case.path


def test_the_image_has_no_device_nodes_of_its_own(function_image: rootfs.Image) -> None:
    assert list((function_image.rootfs / "dev").iterdir()) == []


def locked_names() -> set[str]:
    return {
        normalized(line.split("==", 1)[0])
        for line in LOCK.read_text().splitlines()
        if line and not line.startswith("#")
    }


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def test_the_venv_holds_exactly_the_product_and_its_locked_dependencies(
    function_image: rootfs.Image,
) -> None:
    installed = {
        normalized(path.name.split("-", 1)[0])
        for path in (function_image.rootfs / SITE_PACKAGES).glob("*.dist-info")
    }
    expected = (locked_names() - {"setuptools"}) | {PRODUCT}
    assert installed == expected
    assert not installed & {"pytest", "mypy", "ruff", "hypothesis", "moto"}, "no dev extras"


def test_the_product_installed_only_the_function_and_provider_packages(
    function_image: rootfs.Image,
) -> None:
    record = next((function_image.rootfs / SITE_PACKAGES).glob(f"{PRODUCT}-*.dist-info/RECORD"))
    top_levels = {line.split("/", 1)[0] for line in record.read_text().splitlines() if "/" in line}
    assert {name for name in top_levels if not name.endswith(".dist-info") and name != ".."} == {
        "function",
        "provider",
    }


def test_every_pyc_is_checked_by_hash_never_by_time(function_image: rootfs.Image) -> None:
    headers = [
        path.read_bytes()[:16]
        for tree in ("usr/lib/python3.11", "venv")
        for path in (function_image.rootfs / tree).rglob("*.pyc")
    ]
    assert len(headers) > 1000
    # PEP 552: flags 0b01, a source hash that is not checked, so nothing depends on mtimes.
    assert {int.from_bytes(h[4:8], "little") for h in headers} == {0b01}


def test_no_file_is_newer_than_the_images_creation_time(function_image: rootfs.Image) -> None:
    created = datetime.fromisoformat(oci_config("function")["created"]).timestamp()
    newer = [
        str(Path(directory, name))
        for directory, dirs, files in os.walk(function_image.rootfs)
        for name in (*dirs, *files)
        if Path(directory, name).lstat().st_mtime > created
    ]
    assert newer == []


def test_debian_packages_are_recorded_and_the_dropped_tools_are_not(
    function_image: rootfs.Image,
) -> None:
    recorded = {p.name for p in (function_image.rootfs / "var/lib/dpkg/status.d").iterdir()}
    assert {"python3.11", "libpython3.11-stdlib", "libssl3", "libstdc++6", "ca-certificates"} <= (
        recorded
    )
    assert not recorded & {"dpkg", "tar", "debconf", "mawk", "bash", "dash"}


def test_the_image_python_runs_as_nonroot_on_a_read_only_root_with_its_own_certificates(
    function_image: rootfs.Image,
) -> None:
    result = python_in(
        function_image,
        "import os, ssl, sys, zoneinfo\n"
        "print(os.getuid(), os.getgid(), os.getgroups(), os.getpid(), os.getcwd())\n"
        "print(sys.version_info[:2], ssl.create_default_context().cert_store_stats()['x509_ca'])\n"
        "print(zoneinfo.ZoneInfo('Europe/Berlin'))\n"
        "try:\n    open('/venv/written', 'w')\nexcept OSError as error:\n    print(error.errno)\n"
        "for name in ('pip', 'sandbox'):\n"
        "    try:\n        __import__(name)\n    except ImportError:\n        print('no', name)\n",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "65532 65532 [] 1 /home/nonroot", "nonroot, no groups, pid 1, its home"
    version, roots = lines[1].rsplit(" ", 1)
    assert version == "(3, 11)"
    assert int(roots) > 100, "Debian's CA bundle"
    assert lines[2] == "Europe/Berlin", "tzdata"
    assert lines[3] == "30", "EROFS: the root file system is read-only"
    assert lines[4:] == ["no pip", "no sandbox"]


def elf_files(root: Path) -> list[Path]:
    found = []
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            if not path.is_symlink() and path.is_file():
                with path.open("rb") as handle:
                    if handle.read(4) == b"\x7fELF":
                        found.append(path)
    return found


def test_every_binary_and_library_finds_the_libraries_it_links_in_the_image(
    function_image: rootfs.Image,
) -> None:
    """The packages dropped from the runtime stage took nothing a kept file needs."""
    root = function_image.rootfs
    files = elf_files(root)
    assert len(files) > 100
    missing = []
    for path in files:
        # The image's own dynamic loader resolves against the image's libraries.
        listed = subprocess.run(
            [
                "chroot",
                str(root),
                "/lib64/ld-linux-x86-64.so.2",
                "--list",
                f"/{path.relative_to(root)}",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout
        missing += [
            f"{path.relative_to(root)}: {line.strip()}"
            for line in listed.splitlines()
            if "not found" in line
        ]
    assert missing == []


def test_every_command_in_the_venv_starts(function_image: rootfs.Image) -> None:
    """No console script points at a module the image lacks (the sandbox's, say)."""
    scripts = sorted(
        p.name
        for p in (function_image.rootfs / "venv" / "bin").iterdir()
        if p.is_file() and not p.is_symlink() and p.read_bytes().startswith(b"#!")
    )
    assert {"controlplane-backup-controller", "controlplane-provider", "function-controlplane"} <= (
        set(scripts)
    )
    for script in scripts:
        process = rootfs.popen(
            function_image,
            ["--help"],
            command=[f"/venv/bin/{script}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        output = process.communicate(timeout=60)[0].decode()
        assert process.returncode == 0, f"{script}: {output}"
        assert "usage:" in output.lower(), script
