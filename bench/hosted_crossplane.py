"""A hosted control plane with and without Crossplane core inside: memory and start time.

Starts one etcd, the loopback registry and two hosted control planes on it
(`sandbox.hosted`): one bare, its kube-apiserver alone (what the system tests
run unless a scenario asks for Crossplane), and one with Crossplane core,
which installs the fixture Configuration (tests/fixtures/packages). Once the
Configuration is Healthy and its XRD Established, it reads the resident set
(VmRSS) and the peak (VmHWM) of every process of both, and prints them side by
side with the seconds each step took.

    .venv/bin/python -m bench.hosted_crossplane
"""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path

from bench.backup_job import status_mib
from sandbox.apiserver import APIServerFactory, run_etcd
from sandbox.hosted import HostedControlPlane
from sandbox.registry import Registry
from sandbox.spaces import wait_for
from tests.fixtures.packages import CONFIGURATION, CONFIGURATION_XRD

DEADLINE = 600.0


class Stopwatch:
    """Seconds since it was made or last read."""

    def __init__(self) -> None:
        self._last = time.monotonic()

    def lap(self) -> float:
        now = time.monotonic()
        seconds, self._last = now - self._last, now
        return seconds


def memory_row(name: str, pid: int | None) -> str:
    if pid is None:
        return f"| {name} | - | - |"
    return f"| {name} | {status_mib(pid, 'VmRSS'):.0f} | {status_mib(pid, 'VmHWM'):.0f} |"


def measure(folder: Path, factory: APIServerFactory, registry: Registry) -> None:
    steps: dict[str, float] = {}
    watch = Stopwatch()
    bare = HostedControlPlane("bare", factory(name="bare"), folder / "bare")
    steps["bare: kube-apiserver to /readyz"] = watch.lap()
    inside = HostedControlPlane("crossplane", factory(name="crossplane"), folder / "crossplane")
    steps["with Crossplane: kube-apiserver to /readyz"] = watch.lap()
    try:
        core = inside.start_crossplane()
        steps["with Crossplane: core init and start, to core's /readyz"] = watch.lap()
        wait_for("Crossplane running", inside.crossplane_running, DEADLINE)
        steps["with Crossplane: then its CRDs Established (running)"] = watch.lap()
        reference = registry.push(CONFIGURATION)
        watch.lap()
        inside.install_configuration(CONFIGURATION.name, reference)
        wait_for(
            "the Configuration Installed and Healthy",
            partial(inside.configuration_healthy, CONFIGURATION.name),
            DEADLINE,
        )
        wait_for(
            f"XRD {CONFIGURATION_XRD} Established",
            partial(inside.xrd_established, CONFIGURATION_XRD),
            DEADLINE,
        )
        steps["the Configuration applied, to Healthy and its XRD Established"] = watch.lap()
        print("| process | RSS (MiB) | peak RSS (MiB) |")
        print("|---|---:|---:|")
        print(memory_row("bare: kube-apiserver", bare.server.pid))
        print(memory_row("with Crossplane: kube-apiserver", inside.server.pid))
        print(memory_row("with Crossplane: core", core.process.pid if core.process else None))
        print()
        print("| step | seconds |")
        print("|---|---:|")
        for step, seconds in steps.items():
            print(f"| {step} | {seconds:.1f} |")
    finally:
        inside.stop()


def main() -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-hosted-") as name,
        run_etcd(parent_dir=Path(name)) as etcd,
        APIServerFactory(etcd, parent_dir=Path(name)) as factory,
    ):
        registry = Registry(Path(name) / "registry")
        registry.start()
        try:
            measure(Path(name), factory, registry)
        finally:
            registry.stop()


if __name__ == "__main__":
    main()
