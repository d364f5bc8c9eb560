"""How a process of ours (function, provider, backup controller) is launched.

The one place that knows where our programs come from: the console scripts
of the development virtualenv (`VirtualenvLauncher`), or the images `make
images` built (`ImageLauncher`): each program runs from its image's unpacked
root filesystem by `sandbox.rootfs`, as uid 65532 in its own mount and pid
namespaces, as a container runtime would run it.

A `pathlib.Path` among a program's arguments, or in `files` (a variable
naming a file, as a pod's projected token), is a host file or folder the
program reads: the virtualenv passes it as it is; an image gets it bound in
read-only, readable by the image's group as a pod's `fsGroup` would make it,
and the argument or variable names it where the process sees it.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sandbox import rootfs
from sandbox.processes import ImageProcess, Process

# Where a host path a program reads is mounted inside an image (its private /tmp).
IMAGE_MOUNTS = "/tmp/sandbox"  # noqa: S108 (each process's own tmpfs, see sandbox.rootfs)
# The image each of our programs ships in: the Backup controller is the provider image.
IMAGE_OF = {
    "function-controlplane": "function",
    "controlplane-provider": "provider",
    "controlplane-backup-controller": "provider",
}

Argument = str | Path


@dataclass(frozen=True)
class Command:
    """What to run: the argv, the extra environment and working folder, or an image.

    With `image`, the argv runs inside that image's root filesystem with the
    `binds` mounted, and the environment is the image's with `env` only (never
    the host's).
    """

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    image: rootfs.Image | None = None
    binds: tuple[rootfs.Bind, ...] = ()

    def process(self, name: str, log_path: Path, env: Mapping[str, str]) -> Process:
        """The process running this command with `env` added, its output in `log_path`."""
        merged = {**env, **self.env}
        if self.image is None:
            return Process(name, self.argv, log_path, env=merged, cwd=self.cwd)
        return ImageProcess(name, self.image, self.argv, log_path, env=merged, binds=self.binds)


class Launcher(Protocol):
    """Gives the command that runs one of our programs with its arguments."""

    def command(
        self, program: str, *args: Argument, files: Mapping[str, Path] | None = None
    ) -> Command:
        """The command running `program` (a console script name) with `args`.

        A `Path` in `args` is a file or folder the program reads; `files` are
        variables that name one.
        """
        ...


@dataclass(frozen=True)
class VirtualenvLauncher:
    """Runs our console scripts from a virtualenv's bin folder (this interpreter's by default)."""

    bin_dir: Path = field(default_factory=lambda: Path(sys.executable).parent)

    def command(
        self, program: str, *args: Argument, files: Mapping[str, Path] | None = None
    ) -> Command:
        """The console script `program` of the virtualenv, with `args` and `files`."""
        script = self.bin_dir / program
        if not script.is_file():
            raise FileNotFoundError(f"{script} is missing: run `make .venv/.installed`")
        env = {name: str(path) for name, path in (files or {}).items()}
        return Command((str(script), *(str(arg) for arg in args)), env=env)


def readable_by_group(path: Path, gid: int) -> None:
    """Give `path` (a whole tree if a folder) to group `gid` with read access, as `fsGroup` does.

    The owner and the other bits stay: a secret the host wrote 0600 becomes
    0640 for the image's group, never readable by everyone.
    """
    paths = [path, *(path.rglob("*") if path.is_dir() else ())]
    for each in paths:
        mode = each.lstat().st_mode
        if stat.S_ISLNK(mode):
            continue
        os.chown(each, -1, gid)
        wanted = stat.S_IRGRP | (stat.S_IXGRP if stat.S_ISDIR(mode) else 0)
        each.chmod(stat.S_IMODE(mode) | wanted)


@dataclass(frozen=True)
class ImageLauncher:
    """Runs our programs from the images `make images` unpacked (`rootfs.built`)."""

    images_dir: Path = rootfs.IMAGES_DIR

    def image(self, program: str) -> rootfs.Image:
        """The unpacked image that ships `program`; FileNotFoundError if it is not built."""
        if program not in IMAGE_OF:
            raise ValueError(f"{program} ships in no image (known: {', '.join(IMAGE_OF)})")
        image = rootfs.built(IMAGE_OF[program], self.images_dir)
        if not (image.rootfs / "venv" / "bin" / program).is_file():
            msg = f"the {IMAGE_OF[program]} image has no /venv/bin/{program}: run `make images`"
            raise FileNotFoundError(msg)
        return image

    def check(self) -> None:
        """Raise, saying what to do, unless every program's image is built and this is root.

        Raises:
            FileNotFoundError: An image is not built.
            PermissionError: Not root (namespaces, mounts and chroot need it).
        """
        if os.geteuid() != 0:
            raise PermissionError("running the images needs root (namespaces, mounts, chroot)")
        for program in IMAGE_OF:
            self.image(program)

    def command(
        self, program: str, *args: Argument, files: Mapping[str, Path] | None = None
    ) -> Command:
        """`/venv/bin/<program>` of its image with `args`; each `Path` bound in read-only.

        Each of `files` is bound in too, its variable naming it inside.
        """
        image = self.image(program)
        argv = [f"/venv/bin/{program}"]
        binds: list[rootfs.Bind] = []

        def bound(path: Path) -> str:
            source = path.resolve()
            target = f"{IMAGE_MOUNTS}/{len(binds)}/{source.name}"
            readable_by_group(source, image.gid)
            binds.append(rootfs.Bind(source, target))
            return target

        argv.extend(bound(arg) if isinstance(arg, Path) else arg for arg in args)
        env = {name: bound(path) for name, path in (files or {}).items()}
        return Command(tuple(argv), env=env, image=image, binds=tuple(binds))
