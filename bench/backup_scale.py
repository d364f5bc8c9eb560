"""Backup and restore throughput and memory at 1,000 and 10,000 objects.

Real API servers and a real S3 (SeaweedFS). Each backup and restore runs in
a process of its own (bench/backup_job.py) so its peak RSS is measured
alone; beside it, the baseline: ``kubectl get -o yaml`` of the same kinds.

    .venv/bin/python -m bench.backup_scale [--sizes 1000 10000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from bench.backup_job import peak_rss_mib
from sandbox.apiserver import APIServerFactory, run_etcd
from sandbox.s3 import run_seaweedfs
from sandbox.spaces import PROVIDER_CRDS, Kube, wait_for
from tests.backup.test_roundtrip import (
    BACKUP_CRDS,
    PROVIDER_CRD,
    backup_object,
    instance_with_kubeconfig,
)

ROOT = Path(__file__).resolve().parent.parent
KUBECTL = ROOT / ".tools" / "bin" / "kubectl"
NAMESPACES = 10
BUCKET = "bench"


def seed(source: Kube, start: int, stop: int) -> None:
    """Objects start..stop-1: 40% configmaps, 30% secrets, 30% custom resources."""

    def one(index: int) -> None:
        namespace = f"app-{index % NAMESPACES}"
        kind = index % 10
        if kind < 4:
            source.core.create_namespaced_config_map(
                namespace, {"metadata": {"name": f"config-{index}"}, "data": {"value": "x" * 200}}
            )
        elif kind < 7:
            source.put_secret(namespace, f"secret-{index}", {"token": os.urandom(48)})
        else:
            source.create(
                "buckets",
                {
                    "apiVersion": "s3.example.org/v1",
                    "kind": "Bucket",
                    "metadata": {"name": f"bucket-{index}", "namespace": namespace},
                    "spec": {"forProvider": {"region": "eu-west-1", "index": index}},
                },
                "s3.example.org",
                "v1",
            )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(start, stop)))


def clusters(factory: APIServerFactory) -> tuple[Kube, Kube, dict[str, Any]]:
    """The local cluster (Instance ``myctp``, Backups) and the source control plane.

    The source has the package-owned CRD of the seeded custom resources, which
    is returned for a target to install, and the namespaces ``seed`` fills.
    """
    local = Kube(factory(name="local"))
    local.apply_crds(PROVIDER_CRDS, BACKUP_CRDS)
    source = Kube(factory(name="source"))
    crd = dict(PROVIDER_CRD)
    source.extensions.create_custom_resource_definition(crd)
    wait_for("the CRD", partial(source.established, crd["metadata"]["name"]))
    for index in range(NAMESPACES):
        source.namespace(f"app-{index}")
    instance_with_kubeconfig(local, source.server, "myctp")
    return local, source, crd


def backup_body(name: str, endpoint: str) -> dict[str, Any]:
    """A Backup of ``myctp`` into the bench's bucket."""
    body = backup_object(name, "myctp", endpoint)
    body["spec"]["storage"]["bucket"] = BUCKET
    return body


def job(*args: str, env: dict[str, str], tree: Path = ROOT) -> dict[str, Any]:
    """Run bench/backup_job.py with ``tree``'s code (this interpreter); its JSON line."""
    done = subprocess.run(
        [sys.executable, "-m", "bench.backup_job", *args],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": str(tree)},
        check=False,
        cwd=tree,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def backed_up(
    local: Kube, source: Kube, seeded: int, size: int, endpoint: str, env: dict[str, str]
) -> tuple[str, dict[str, Any]]:
    """Grow the source from ``seeded`` to ``size`` objects and back it up: the Backup's name."""
    seed(source, seeded, size)
    name = f"bench-{size}"
    local.create("backups", backup_body(name, endpoint))
    return name, job("backup", str(local.server.kubeconfig_path), "team-a", name, env=env)


def restore_target(factory: APIServerFactory, name: str, crd: dict[str, Any]) -> Kube:
    """A fresh control plane with the seeded CRD owned by its package, as Crossplane installs it.

    A restore applies objects only of CRDs Crossplane owns.
    """
    target = Kube(factory(name=name))
    target.extensions.create_custom_resource_definition(crd)
    wait_for("the CRD", partial(target.established, crd["metadata"]["name"]))
    return target


def kubectl_baseline(kubeconfig: Path) -> dict[str, float]:
    """``kubectl get -o yaml`` of the same kinds: wall time and peak RSS."""
    kinds = "namespaces,configmaps,secrets,buckets.s3.example.org"
    argv = [str(KUBECTL), "--kubeconfig", str(kubeconfig), "get", kinds, "-A", "-o", "yaml"]
    start = time.perf_counter()
    peak = 0.0
    with Path(os.devnull).open("wb") as sink:
        process = subprocess.Popen(argv, stdout=sink)
        # VmHWM only grows, so its last reading before exit is the peak (to 20 ms);
        # the child's ru_maxrss would count the bench's own memory it forked from.
        while process.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                peak = max(peak, peak_rss_mib(process.pid))
            time.sleep(0.02)
    seconds = time.perf_counter() - start
    if process.returncode != 0:
        raise SystemExit("kubectl failed")
    return {"seconds": seconds, "peak_rss_mib": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    args = parser.parse_args()
    rows = []
    monkeypatch = pytest.MonkeyPatch()
    with run_etcd() as etcd, APIServerFactory(etcd) as factory, run_seaweedfs() as s3:
        s3.configure(monkeypatch)
        s3.create_bucket(BUCKET)
        # The operator allows the loopback plain-http S3 explicitly.
        env = {**os.environ, "ALLOWED_S3_ENDPOINTS": s3.endpoint}
        local, source, crd = clusters(factory)
        seeded = 0
        for size in sorted(args.sizes):
            name, backed = backed_up(local, source, seeded, size, s3.endpoint, env)
            seeded = size
            baseline = kubectl_baseline(source.server.kubeconfig_path)
            target = restore_target(factory, f"target-{size}", crd)
            restored = job(
                "restore",
                str(local.server.kubeconfig_path),
                "team-a",
                name,
                str(target.server.kubeconfig_path),
                env=env,
            )
            rows.append((size, backed, baseline, restored))
    monkeypatch.undo()
    print(
        f"{'objects':>8} {'export+upload':>14} {'obj/s':>8} {'RSS MiB':>8} | "
        f"{'kubectl get':>11} {'obj/s':>8} {'RSS MiB':>8} | "
        f"{'restore':>8} {'obj/s':>8} {'RSS MiB':>8}"
    )
    for _, backed, baseline, restored in rows:
        count = backed["objects"]
        print(
            f"{count:>8} {backed['seconds']:>13.1f}s {count / backed['seconds']:>8.0f} "
            f"{backed['peak_rss_mib']:>8.1f} | {baseline['seconds']:>10.1f}s "
            f"{count / baseline['seconds']:>8.0f} {baseline['peak_rss_mib']:>8.1f} | "
            f"{restored['seconds']:>7.1f}s {restored['objects'] / restored['seconds']:>8.0f} "
            f"{restored['peak_rss_mib']:>8.1f}"
        )


if __name__ == "__main__":
    main()
