"""Assemble the runtime root filesystem of the images, like Google's distroless.

``tools/images.sh`` extracts Debian's python3 and the libraries it needs with
``mmdebstrap --variant=extract``, which runs no maintainer scripts. This module
does what those scripts and a distroless build would do, and no more:

- ``extract-hook ROOT`` (mmdebstrap's extract hook, while the downloaded
  ``.deb`` files are still in ROOT): record every package kept in
  ``/var/lib/dpkg/status.d/`` (where scanners and our SBOM look, as in
  distroless), delete the files of the tools apt pulled in as dependencies
  (:data:`DROPPED`: a package manager, an archiver, an awk; no shell is ever
  pulled in), and build ``/etc/ssl/certs/ca-certificates.crt`` from Debian's
  ca-certificates package;
- ``finish ROOT SOURCE_DATE_EPOCH`` (after the venv is copied in): users
  (root and nonroot 65532), no host files (``resolv.conf``, ``hostname``,
  device nodes, apt's state), the standard library's ``.pyc`` files compiled
  with unchecked hashes, and every time clamped to ``SOURCE_DATE_EPOCH``.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

# Packages apt resolves as dependencies that a Python process never runs. python3-minimal
# depends on dpkg, dpkg on tar, tzdata on debconf; base-files pre-depends on awk.
# Their libraries that nothing else uses go too.
DROPPED = {
    "dpkg": "the package manager",
    "debconf": "the package configuration tool (Perl, which is not there)",
    "tar": "an archiver only dpkg uses",
    "mawk": "an awk only maintainer scripts use",
    "libacl1": "only tar links it",
    "libselinux1": "only dpkg and tar link it",
    "libpcre2-8-0": "only libselinux1 links it",
    "libmd0": "only dpkg links it",
}
STATUS_DIR = "var/lib/dpkg/status.d"
CA_BUNDLE = "etc/ssl/certs/ca-certificates.crt"
CA_PACKAGE = "ca-certificates"
CA_SOURCE = "usr/share/ca-certificates/mozilla/"

NONROOT = 65532
PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"
    f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = f"root:x:0:\nnogroup:x:65534:\nnonroot:x:{NONROOT}:\n"

# What mmdebstrap and apt leave that belongs to the build machine, not the image.
HOST_LEFTOVERS = (
    "etc/resolv.conf",
    "etc/hostname",
    "etc/fstab",
    "etc/apt",
    "var/lib/apt",
    "var/cache/apt",
    "var/cache/debconf",
    "var/log/apt",
)
DPKG_DIR = "var/lib/dpkg"


def control(deb: Path) -> str:
    """The control paragraph of a ``.deb``, ending in one newline."""
    text = subprocess.run(
        ["dpkg-deb", "--field", str(deb)], capture_output=True, text=True, check=True
    ).stdout
    return text.rstrip("\n") + "\n"


def field(paragraph: str, name: str) -> str:
    """The value of a single-line field of a control paragraph ("" when absent)."""
    prefix = f"{name}:"
    for line in paragraph.splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip()
    return ""


def file_tree(deb: Path) -> tarfile.TarFile:
    """A ``.deb``'s file system tree, as a tar archive in memory."""
    tree = subprocess.run(
        ["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True
    ).stdout
    return tarfile.open(fileobj=io.BytesIO(tree))


def relative(name: str) -> PurePosixPath:
    """A tar member's path relative to the root (``./usr/bin/x`` -> ``usr/bin/x``)."""
    return PurePosixPath(os.path.normpath(name.lstrip("/")))


def remove_package_files(root: Path, deb: Path) -> None:
    """Delete what ``deb`` extracted into ``root``, and its directories left empty."""
    with file_tree(deb) as archive:
        entries = archive.getmembers()
    for entry in entries:
        path = root / relative(entry.name)
        if not entry.isdir() and (path.is_symlink() or path.exists()):
            path.unlink()
    directories = sorted(
        (
            root / relative(e.name)
            for e in entries
            if e.isdir() and relative(e.name) != PurePosixPath(".")
        ),
        key=lambda p: len(p.parts),
        reverse=True,
    )
    for directory in directories:
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()


def ca_bundle(deb: Path) -> bytes:
    """Debian's CA bundle as update-ca-certificates builds it: every Mozilla root, in order."""
    with file_tree(deb) as archive:
        certificates = sorted(
            (
                m
                for m in archive.getmembers()
                if m.isfile()
                and m.name.endswith(".crt")
                and str(relative(m.name)).startswith(CA_SOURCE)
            ),
            key=lambda m: m.name,
        )
        if not certificates:
            msg = f"{deb.name} carries no certificates under /{CA_SOURCE}"
            raise ValueError(msg)
        parts = []
        for member in certificates:
            handle = archive.extractfile(member)
            assert handle is not None
            parts.append(handle.read().rstrip(b"\n") + b"\n")
    return b"".join(parts)


def download(package: str, into: Path) -> Path:
    """Download a package's ``.deb`` with the apt configuration mmdebstrap uses."""
    env = {**os.environ, "APT_CONFIG": os.environ["MMDEBSTRAP_APT_CONFIG"]}
    subprocess.run(
        # The scratch folder is root's: apt's _apt user could not write there.
        ["apt-get", "download", "--quiet", "-o", "APT::Sandbox::User=root", package],
        cwd=into,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return next(into.glob(f"{package}_*.deb"))


def extract_hook(root: Path) -> None:
    """Record the kept packages, drop :data:`DROPPED`, add the CA bundle (see the module)."""
    debs = [root / p.lstrip("/") for p in os.environ["MMDEBSTRAP_ESSENTIAL"].split()]
    status = root / STATUS_DIR
    status.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        paragraph = control(deb)
        package = field(paragraph, "Package")
        if package in DROPPED:
            remove_package_files(root, deb)
        else:
            (status / package).write_text(paragraph, encoding="utf-8")
    with tempfile.TemporaryDirectory() as scratch:
        deb = download(CA_PACKAGE, Path(scratch))
        bundle = root / CA_BUNDLE
        bundle.parent.mkdir(parents=True, exist_ok=True)
        bundle.write_bytes(ca_bundle(deb))
        (status / CA_PACKAGE).write_text(control(deb), encoding="utf-8")


def remove(path: Path) -> None:
    """Delete a file, link or tree if it is there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def add_users(root: Path) -> None:
    """Users root and nonroot (65532, home ``/home/nonroot``), as distroless has them."""
    (root / "etc" / "passwd").write_text(PASSWD, encoding="utf-8")
    (root / "etc" / "group").write_text(GROUP, encoding="utf-8")
    home = root / "home" / "nonroot"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, NONROOT, NONROOT)
    home.chmod(0o700)
    (root / "tmp").chmod(0o1777)


def remove_host_files(root: Path) -> None:
    """Drop what belongs to the machine that built the image (see :data:`HOST_LEFTOVERS`)."""
    for leftover in HOST_LEFTOVERS:
        remove(root / leftover)
    for entry in (root / "dev").iterdir():
        remove(entry)
    for entry in (root / DPKG_DIR).iterdir():
        if entry.name != "status.d":
            remove(entry)
    for entry in (root / "tmp").iterdir():
        remove(entry)


def compile_standard_library(root: Path) -> None:
    """The stdlib's ``.pyc`` files, made by the image's own interpreter, free of times."""
    subprocess.run(
        [
            "chroot",
            str(root),
            "/usr/bin/python3",
            "-B",
            "-m",
            "compileall",
            "-q",
            "--invalidation-mode",
            "unchecked-hash",
            "/usr/lib/python3.11",
        ],
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C.UTF-8"},
        check=True,
    )


def clamp_times(root: Path, epoch: int) -> None:
    """Set every time later than ``epoch`` to ``epoch`` (links themselves, not their targets)."""
    for directory, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(directory, name)
            if path.lstat().st_mtime > epoch:
                os.utime(path, (epoch, epoch), follow_symlinks=False)
    if root.lstat().st_mtime > epoch:
        os.utime(root, (epoch, epoch))


def finish(root: Path, epoch: int) -> None:
    """Users, no host files, a compiled stdlib, clamped times (see the module)."""
    add_users(root)
    compile_standard_library(root)
    remove_host_files(root)
    clamp_times(root, epoch)


def main(argv: list[str]) -> None:
    """``extract-hook ROOT`` or ``finish ROOT SOURCE_DATE_EPOCH``."""
    command, root = argv[0], Path(argv[1])
    if command == "extract-hook":
        extract_hook(root)
    elif command == "finish":
        finish(root, int(argv[2]))
    else:
        msg = f"unknown command {command!r}: extract-hook or finish"
        raise SystemExit(msg)


if __name__ == "__main__":
    main(sys.argv[1:])
