"""A memory limit for one process, as a container runtime sets it: a cgroup of its own.

The limit is the kernel's, with the kernel's OOM killer: a cgroup v2 child
(``memory.max``) where this machine's memory controller is on the unified
hierarchy, else a cgroup v1 child of the memory controller
(``memory.limit_in_bytes``), which is what the kubelet writes for a pod's
limit on a cgroup v1 node. Either is made beside the test's own cgroup, so
creating it needs the rights to write there (root here); ``skip_reason`` says
why not otherwise.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
GIB = 1024**3


@dataclass(frozen=True)
class MemoryCgroup:
    """One cgroup with a memory limit; processes join it by writing their pid into it."""

    path: Path
    version: int
    limit: int

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in it."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for line in (self.path / name).read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def peak(self) -> int:
        """The most memory its processes have held at once, in bytes."""
        name = "memory.peak" if self.version == 2 else "memory.max_usage_in_bytes"
        return int((self.path / name).read_text())

    def usage(self) -> int:
        """The memory its processes hold now, in bytes."""
        name = "memory.current" if self.version == 2 else "memory.usage_in_bytes"
        return int((self.path / name).read_text())


def _own_memory_cgroup() -> tuple[Path, int] | None:
    """This process's memory cgroup folder and its version, if either hierarchy has one."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return CGROUP_ROOT / "memory" / path.lstrip("/"), 1
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if hierarchy == "0" and not controllers:
            unified = CGROUP_ROOT if (CGROUP_ROOT / "cgroup.controllers").exists() else None
            if unified is None:
                unified = CGROUP_ROOT / "unified"
            folder = unified / path.lstrip("/")
            enabled = (folder.parent / "cgroup.subtree_control").read_text().split()
            if "memory" in enabled:
                return folder.parent, 2
    return None


def skip_reason() -> str | None:
    """Why a memory cgroup cannot be made here, or None when it can."""
    if os.geteuid() != 0:
        return "a memory cgroup needs root"
    try:
        found = _own_memory_cgroup()
    except (OSError, ValueError) as error:
        return f"cannot read this process's cgroups: {error}"
    if found is None:
        return "no memory controller on either cgroup hierarchy"
    if not os.access(found[0], os.W_OK):
        return f"cannot create a cgroup under {found[0]}"
    return None


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[MemoryCgroup]:
    """A new cgroup limited to ``limit`` bytes (no swap); removed once its processes are gone."""
    found = _own_memory_cgroup()
    if found is None:
        msg = "no memory controller on either cgroup hierarchy"
        raise RuntimeError(msg)
    parent, version = found
    path = parent / f"controlplane-test-{uuid.uuid4().hex[:8]}"
    path.mkdir()
    try:
        if version == 2:
            (path / "memory.max").write_text(str(limit))
            (path / "memory.swap.max").write_text("0")
        else:
            (path / "memory.limit_in_bytes").write_text(str(limit))
            with contextlib.suppress(OSError):
                # No swap on this machine; where there is, the limit covers it too.
                (path / "memory.memsw.limit_in_bytes").write_text(str(limit))
        yield MemoryCgroup(path, version, limit)
    finally:
        with contextlib.suppress(OSError):
            path.rmdir()
