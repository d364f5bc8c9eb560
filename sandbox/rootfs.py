"""Run a process from an image's unpacked root filesystem, as a container runtime would.

``tools/images.sh`` unpacks each image as an OCI runtime bundle
(``config.json`` and ``rootfs/``, by ``umoci unpack``). :func:`popen` runs a
command of it with no container engine: ``unshare`` makes a mount and a pid
namespace, and this file, run as a script inside them, mounts ``/proc``, a
minimal ``/dev``, a fresh ``/tmp`` and any bind mounts, makes the root file
system read-only, chroots, changes to the image's working directory, drops to
its user (groups, gid, uid; no new privileges) and execs the command, which is
then the namespace's first process (pid 1). The network is the host's, so the
process listens on and reaches loopback ports like any other.

Stop it with :func:`stop`: it signals the namespace's first process, as a
kubelet does (``unshare`` itself passes no signal on), then kills it after a
grace period. It needs root (the tests and CI run as root). Standard library
only; nothing here depends on pytest.

Where a process of the development venv would start, the same command runs
from the image::

    image = rootfs.built("provider")  # .build/images/provider, from `make images`
    process = rootfs.popen(
        image,
        ["--kubeconfig", "/tmp/kube/kubeconfig"],
        binds=[rootfs.Bind(kubeconfig_folder, "/tmp/kube")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    ...
    rootfs.stop(process)

``command=["/venv/bin/controlplane-backup-controller"]`` runs the Backup
controller from the provider image. Files the process reads must be readable
by its user (65532), as a pod's ``fsGroup`` would make them.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SPEC_VARIABLE = "SANDBOX_ROOTFS_SPEC"
# Where `make images` (tools/images.sh) unpacks the images of this checkout.
IMAGES_DIR = Path(__file__).resolve().parents[1] / ".build" / "images"
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
DEVICE_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}
DEFAULT_GRACE_SECONDS = 10.0
FIRST_PROCESS_DEADLINE_SECONDS = 10.0

# mount(2) flags, from <sys/mount.h>.
MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
PR_SET_NO_NEW_PRIVS = 38


@dataclass(frozen=True)
class Image:
    """What an unpacked image runs, and how: its bundle's ``config.json`` process."""

    rootfs: Path
    args: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str
    uid: int
    gid: int

    @classmethod
    def unpacked(cls, bundle: Path) -> Image:
        """The image unpacked at ``bundle`` (a folder with ``config.json`` and ``rootfs/``)."""
        config = json.loads((bundle / "config.json").read_text(encoding="utf-8"))
        process = config["process"]
        env = dict(entry.split("=", 1) for entry in process.get("env", []))
        return cls(
            rootfs=(bundle / config["root"]["path"]).resolve(),
            args=tuple(process["args"]),
            env=env,
            cwd=process.get("cwd", "/"),
            uid=int(process["user"]["uid"]),
            gid=int(process["user"]["gid"]),
        )


def built(name: str, images_dir: Path = IMAGES_DIR) -> Image:
    """The image ``name`` (``function`` or ``provider``) that `make images` unpacked."""
    bundle = images_dir / name
    if not (bundle / "config.json").is_file():
        msg = f"{bundle} is not built: run `make images` (as root)"
        raise FileNotFoundError(msg)
    return Image.unpacked(bundle)


@dataclass(frozen=True)
class Bind:
    """A host file or folder mounted into the root filesystem.

    ``target`` must exist in the image or lie under ``/tmp`` (a fresh tmpfs for
    each process, where the mount point is made): the unpacked image is never
    written to.
    """

    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class Spec:
    """Everything the namespace's first process needs before it execs the command."""

    rootfs: str
    argv: list[str]
    env: dict[str, str]
    cwd: str
    uid: int
    gid: int
    binds: list[dict[str, Any]] = field(default_factory=list)


def popen(
    image: Image,
    args: Sequence[str] = (),
    *,
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    binds: Sequence[Bind] = (),
    **options: Any,
) -> subprocess.Popen[bytes]:
    """Start ``command`` (default: the image's entrypoint) with ``args`` in ``image``.

    Like a Kubernetes container: ``command`` replaces the entrypoint, ``args``
    follow it, ``env`` is added to the image's (``HOME`` from the user's home
    unless set). ``options`` go to :class:`subprocess.Popen` (``stdout``,
    ``stderr``...). Stop the process with :func:`stop`.
    """
    merged = {"HOME": "/home/nonroot" if image.uid else "/root", **image.env, **(env or {})}
    spec = Spec(
        rootfs=str(image.rootfs),
        argv=[*(command if command is not None else image.args), *args],
        env=merged,
        cwd=image.cwd,
        uid=image.uid,
        gid=image.gid,
        binds=[
            {"source": str(b.source.resolve()), "target": b.target, "read_only": b.read_only}
            for b in binds
        ],
    )
    launcher = [
        "unshare",
        "--mount",
        "--pid",
        "--fork",
        "--propagation",
        "private",
        "--kill-child",
        # -I: the launcher runs on the host's interpreter with nothing of the
        # environment or site-packages; it needs only the standard library.
        sys.executable,
        "-I",
        str(Path(__file__).resolve()),
    ]
    host_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        SPEC_VARIABLE: json.dumps(spec.__dict__),
    }
    return subprocess.Popen(launcher, env=host_env, **options)


def first_process(launcher: subprocess.Popen[bytes]) -> int | None:
    """The host pid of the namespace's first process (``None`` once it has gone)."""
    deadline = time.monotonic() + FIRST_PROCESS_DEADLINE_SECONDS
    children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children")
    while launcher.poll() is None:
        try:
            found = children.read_text().split()
        except OSError:
            return None
        if found:
            return int(found[0])
        if time.monotonic() > deadline:
            msg = f"unshare (pid {launcher.pid}) started no process in time"
            raise TimeoutError(msg)
        time.sleep(0.01)
    return None


def signal_process(launcher: subprocess.Popen[bytes], signum: int) -> None:
    """Send ``signum`` to the namespace's first process, if it still runs."""
    pid = first_process(launcher)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)


def stop(launcher: subprocess.Popen[bytes], grace: float = DEFAULT_GRACE_SECONDS) -> int:
    """SIGTERM the process, SIGKILL it after ``grace`` seconds; its exit status.

    As the first process of its pid namespace it gets SIGTERM only if it
    handles it, exactly as in a pod; when it exits, the kernel ends everything
    else in the namespace.
    """
    signal_process(launcher, signal.SIGTERM)
    try:
        return launcher.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        # unshare --kill-child takes the first process with it.
        launcher.kill()
        return launcher.wait()


# What follows runs inside the namespaces, as the launcher script.


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    libc = _libc()
    encoded = [None if value is None else value.encode() for value in (source, target, fstype)]
    if libc.mount(encoded[0], encoded[1], encoded[2], flags, data.encode() or None) != 0:
        errno = ctypes.get_errno()
        msg = f"mount {source} on {target} ({fstype}): {os.strerror(errno)}"
        raise OSError(errno, msg)


def _bind(source: str, target: str, *, read_only: bool) -> None:
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _mount_point(rootfs: Path, target: str, *, directory: bool) -> Path:
    """The host path of ``target``, made only under the private ``/tmp``."""
    path = rootfs / target.lstrip("/")
    if path.exists():
        return path
    if not Path("/", target).is_relative_to("/tmp"):  # noqa: S108 (the process's own tmpfs)
        msg = f"{target} does not exist in the image; bind mounts go to existing paths or /tmp"
        raise FileNotFoundError(msg)
    if directory:
        path.mkdir(parents=True)
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    return path


def _enter(spec: Spec) -> None:
    """Mount, chroot, drop privileges and exec (see the module's docstring)."""
    rootfs = Path(spec.rootfs)
    _bind(spec.rootfs, spec.rootfs, read_only=False)
    _mount("proc", str(rootfs / "proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    dev = rootfs / "dev"
    _mount("tmpfs", str(dev), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=755,size=64k")
    for device in DEVICES:
        (dev / device).touch()
        _bind(f"/dev/{device}", str(dev / device), read_only=False)
    for name, link in DEVICE_LINKS.items():
        (dev / name).symlink_to(link)
    (dev / "shm").mkdir()
    _mount("tmpfs", str(dev / "shm"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    _mount("tmpfs", str(rootfs / "tmp"), "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for bind in spec.binds:
        source = str(bind["source"])
        point = _mount_point(rootfs, str(bind["target"]), directory=Path(source).is_dir())
        _bind(source, str(point), read_only=bool(bind["read_only"]))
    _mount(None, spec.rootfs, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    os.chroot(spec.rootfs)
    os.chdir(spec.cwd)
    os.setgroups([])
    os.setgid(spec.gid)
    os.setuid(spec.uid)
    if _libc().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    os.execvpe(spec.argv[0], spec.argv, spec.env)  # noqa: S606


if __name__ == "__main__":
    _enter(Spec(**json.loads(os.environ.pop(SPEC_VARIABLE))))
