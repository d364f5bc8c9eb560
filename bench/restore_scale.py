"""Restore throughput and peak RSS at 1,000 and 10,000 objects: a baseline commit beside this tree.

Real API servers (one etcd) and a real S3 (SeaweedFS). One backup per size is
taken with this tree's code; each restore then runs in a process of its own
(bench/backup_job.py, so its peak RSS is its own) into a fresh control plane,
once with the baseline's code (``git archive`` of ``--baseline`` into a
temporary folder, run from there with the same interpreter) and once with
this tree's. Beside the wall time (which depends on whatever else runs on the
machine), the CPU milliseconds per object of the restore process, of the
target kube-apiserver and of the etcd they share: the work each side did,
which is what two cores can overlap at best.

    .venv/bin/python -m bench.restore_scale [--sizes 1000 10000] [--baseline COMMIT] [--repeat N]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from bench import backup_scale
from bench.backup_scale import BUCKET, clusters
from sandbox.apiserver import APIServerFactory, run_etcd
from sandbox.s3 import run_seaweedfs

ROOT = Path(__file__).resolve().parent.parent
# main before issue 10's restore work: one apply per object, 16 at a time, a UID map.
BASELINE = "ee5e9f6"


def cpu_seconds(pid: int) -> float:
    """User and system CPU time a running process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def etcd_pid(data_dir: Path) -> int:
    """The pid of the etcd serving ``data_dir`` (the sandbox keeps its process to itself)."""
    wanted = f"--data-dir={data_dir}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if wanted in (proc / "cmdline").read_bytes().split(b"\0"):
                return int(proc.name)
        except OSError:
            continue
    raise LookupError(f"no etcd serves {data_dir}")


def children_cpu_seconds() -> float:
    """User and system CPU time of the children waited for so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def job(tree: Path, *args: str, env: dict[str, str]) -> dict[str, Any]:
    """``backup_scale.job`` with ``tree``'s code, and its CPU time, user and system."""
    before = children_cpu_seconds()
    result = backup_scale.job(*args, env=env, tree=tree)
    result["cpu_seconds"] = children_cpu_seconds() - before
    return result


def checkout(commit: str, into: Path) -> Path:
    """The files of ``commit``, without touching this repository's worktrees."""
    archived = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archived.stdout, check=True)
    return into


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument(
        "--repeat", type=int, default=1, help="restores of each size by each code, alternating"
    )
    args = parser.parse_args()
    rows: list[tuple[int, str, dict[str, Any]]] = []
    monkeypatch = pytest.MonkeyPatch()
    with (
        tempfile.TemporaryDirectory(prefix="restore-baseline-") as folder,
        run_etcd() as etcd,
        APIServerFactory(etcd) as factory,
        run_seaweedfs() as s3,
    ):
        trees = {
            f"baseline {args.baseline}": checkout(args.baseline, Path(folder)),
            "this tree": ROOT,
        }
        s3.configure(monkeypatch)
        s3.create_bucket(BUCKET)
        env = {**os.environ, "ALLOWED_S3_ENDPOINTS": s3.endpoint}
        local, source, crd = clusters(factory)
        etcd_process = etcd_pid(etcd.data_dir)
        seeded = 0
        for size in sorted(args.sizes):
            name, _ = backup_scale.backed_up(local, source, seeded, size, s3.endpoint, env)
            seeded = size
            # Alternating which code goes first evens out a machine whose load drifts.
            runs = [
                item
                for turn in range(args.repeat)
                for item in (list(trees.items()) if turn % 2 == 0 else reversed(trees.items()))
            ]
            for label, tree in runs:
                kube = backup_scale.restore_target(factory, f"target-{size}-{len(rows)}", crd)
                target = kube.server
                server = target.lifecycle.process if target.lifecycle else None
                pid = server._popen.pid if server else 0
                server_before, etcd_before = cpu_seconds(pid), cpu_seconds(etcd_process)
                restored = job(
                    tree,
                    "restore",
                    str(local.server.kubeconfig_path),
                    "team-a",
                    name,
                    str(target.kubeconfig_path),
                    env=env,
                )
                restored["server_cpu_seconds"] = cpu_seconds(pid) - server_before
                restored["etcd_cpu_seconds"] = cpu_seconds(etcd_process) - etcd_before
                target.stop()
                rows.append((size, label, restored))
    monkeypatch.undo()
    print(
        "| code | objects | seconds | obj/s | peak RSS MiB | restore CPU ms/obj "
        "| kube-apiserver CPU ms/obj | etcd CPU ms/obj |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for _, label, restored in rows:
        objects = restored["objects"]
        per_object = [
            1000 * restored[column] / objects
            for column in ("cpu_seconds", "server_cpu_seconds", "etcd_cpu_seconds")
        ]
        print(
            f"| {label} | {objects:,} | {restored['seconds']:.1f} | "
            f"{objects / restored['seconds']:,.0f} | {restored['peak_rss_mib']:.1f} | "
            + " | ".join(f"{value:.2f}" for value in per_object)
            + " |"
        )


if __name__ == "__main__":
    main()
