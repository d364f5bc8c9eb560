"""One backup or one restore in a process of its own, so its peak RSS is its own.

    python -m bench.backup_job backup LOCAL_KUBECONFIG NAMESPACE BACKUP
    python -m bench.backup_job restore LOCAL_KUBECONFIG NAMESPACE BACKUP TARGET_KUBECONFIG

Prints one JSON line: seconds, objects, peak_rss_mib. ``BENCH_PROFILE=FILE`` writes a
cProfile of the job to FILE.
"""

from __future__ import annotations

import asyncio
import cProfile
import json
import os
import sys
import time
from pathlib import Path

import yaml

from provider.backup.controllers.backups import BACKUPS, BackupReconciler
from provider.backup.restore.restorer import Restorer
from provider.backup.storage.tenancy import EndpointPolicy
from provider.kube import Cluster


def _allowed() -> EndpointPolicy:
    """The operator's allowed S3 endpoints, as the controllers read them."""
    return EndpointPolicy.of(os.environ.get("ALLOWED_S3_ENDPOINTS", "").split())


def peak_rss_mib(pid: int) -> float:
    """VmHWM: the process's peak resident set since it exec'd (ru_maxrss would count the fork)."""
    return status_mib(pid, "VmHWM")


def status_mib(pid: int, field: str) -> float:
    """A memory field of /proc/PID/status (VmRSS, VmHWM...) in MiB; NaN if it has none."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def backup(local_kubeconfig: str, namespace: str, name: str) -> int:
    local = await Cluster.from_kubeconfig(yaml.safe_load(Path(local_kubeconfig).read_text()))
    try:
        await BackupReconciler(local, endpoints=_allowed()).reconcile(namespace, name)
        found = await local.get(BACKUPS, namespace, name)
        status = (found or {}).get("status") or {}
        if status.get("phase") != "Completed":
            raise SystemExit(f"backup did not complete: {status}")
        return int(status["objects"])
    finally:
        await local.close()


async def restore(local_kubeconfig: str, namespace: str, name: str, target: str) -> int:
    local = await Cluster.from_kubeconfig(yaml.safe_load(Path(local_kubeconfig).read_text()))
    try:
        outcome = await Restorer(local, endpoints=_allowed()).restore(
            namespace, name, yaml.safe_load(Path(target).read_text())
        )
        return outcome.objects
    finally:
        await local.close()


def main() -> None:
    verb, *args = sys.argv[1:]
    start = time.perf_counter()
    run = backup(*args) if verb == "backup" else restore(*args)
    profile = os.environ.get("BENCH_PROFILE")
    if profile:
        # cProfile of the whole job, for `python -m pstats`; it slows the job down.
        with cProfile.Profile() as profiler:
            objects = asyncio.run(run)
        profiler.dump_stats(profile)
    else:
        objects = asyncio.run(run)
    seconds = time.perf_counter() - start
    peak = peak_rss_mib(os.getpid())
    print(json.dumps({"seconds": seconds, "objects": objects, "peak_rss_mib": peak}))


if __name__ == "__main__":
    main()
