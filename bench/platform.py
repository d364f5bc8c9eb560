"""The whole platform: how long a team waits for its ControlPlane, and what the parts cost.

Starts the sandbox platform once (real Crossplane core, Flux, our function,
provider and backup controller), then measures:

- seconds from applying one ControlPlane (git source, backups every minute)
  to Ready and to its first Backup Completed, beside the baseline of one bare
  Instance (the provider and the Space alone, no composition) applied in the
  same run;
- seconds from applying N ControlPlanes at once until all are Ready;
- the peak RSS (VmHWM) of core, the function, the provider and the backup
  controller over the run;
- the RSS of one hosted control plane once Crossplane core runs in it (its
  kube-apiserver and core), and the seconds until the Space reported it
  ``CrossplaneRunning``.

Every wait is against the sandbox's Space as it is by default: seconds to
provision and to delete a control plane (``sandbox.platform``'s
``PROVISIONING_DELAY`` and ``DELETION_DELAY``), kubeconfigs through its front.

    .venv/bin/python -m bench.platform [--controlplanes 20]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from bench.backup_job import peak_rss_mib
from bench.hosted_crossplane import memory_row
from sandbox.platform import SPACE_GROUP, Platform
from sandbox.spaces import SPACES_GROUP, SPACES_VERSION, condition, wait_for

XR = ("platform.acme.io", "v1alpha1", "controlplanes")
INSTANCE = ("controlplane.spaces.upbound.io", "v1alpha1", "instances")
DEADLINE = 900.0
BACKUP_PLURAL = ("backups",)
BACKUP_GROUP_VERSION = ("controlplane.spaces.upbound.io", "v1alpha1")


def controlplane(namespace: str, name: str, url: str) -> dict[str, Any]:
    """A ControlPlane with a git source and backups every minute."""
    return {
        "apiVersion": "platform.acme.io/v1alpha1",
        "kind": "ControlPlane",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {"url": url, "path": "./app", "interval": "1m"},
            "backup": {"schedule": "* * * * *"},
        },
    }


def first_backup_completed(platform: Platform, namespace: str) -> bool:
    found = platform.kube.list_of(*BACKUP_PLURAL, namespace, *BACKUP_GROUP_VERSION)
    return any(condition(b, "Completed").get("status") == "True" for b in found)


def bare_instance(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "Instance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "forProvider": {},
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"},
            "writeConnectionSecretToRef": {"name": f"{name}-kubeconfig"},
        },
    }


def ready(platform: Platform, kind: tuple[str, str, str], namespace: str, name: str) -> bool:
    group, version, plural = kind
    found = platform.kube.get(plural, namespace, name, group, version)
    return condition(found, "Ready").get("status") == "True"


def apply_and_wait(
    platform: Platform, kind: tuple[str, str, str], objects: list[dict[str, Any]]
) -> float:
    """Create the objects at once; seconds until every one is Ready."""
    group, version, plural = kind
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda obj: platform.kube.create(plural, obj, group, version), objects))
    for obj in objects:
        metadata = obj["metadata"]
        wait_for(
            f"{plural} {metadata['namespace']}/{metadata['name']} Ready",
            partial(ready, platform, kind, metadata["namespace"], metadata["name"]),
            timeout=DEADLINE,
        )
    return time.monotonic() - started


def crossplane_running(platform: Platform, name: str) -> bool:
    """Whether the Space reports Crossplane running in its ControlPlane ``name``."""
    found = platform.space.get("controlplanes", SPACE_GROUP, name, SPACES_GROUP, SPACES_VERSION)
    return condition(found, "CrossplaneRunning").get("status") == "True"


def hosted_with_crossplane(platform: Platform, namespace: str, name: str) -> list[str]:
    """Start core in the composite's hosted control plane; the report's lines."""
    instance = platform.kube.get("instances", namespace, name, *INSTANCE[:2])
    assert instance is not None
    hosted = instance["metadata"]["annotations"]["crossplane.io/external-name"]
    started = time.monotonic()
    plane = platform.crossplane_in(hosted)
    wait_for(
        "the Space reporting CrossplaneRunning",
        partial(crossplane_running, platform, hosted),
        timeout=DEADLINE,
    )
    seconds = time.monotonic() - started
    core = plane.core.process.pid if plane.core and plane.core.process else None
    return [
        "| process of one hosted control plane with Crossplane inside | RSS (MiB) "
        "| peak RSS (MiB) |",
        "|---|---:|---:|",
        memory_row("kube-apiserver", plane.server.pid),
        memory_row("crossplane core", core),
        "",
        f"Crossplane started and reported CrossplaneRunning in {seconds:.1f} s.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--controlplanes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-platform-") as folder:
        started = time.monotonic()
        with Platform(Path(folder)) as platform:
            print(f"platform started in {time.monotonic() - started:.0f} s")
            print(
                f"the Space provisions in {platform.provisioning_delay:.0f} s "
                f"and deletes in {platform.deletion_delay:.0f} s"
            )
            repository = platform.git.repository("bench")
            repository.commit(
                {
                    "app/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n"
                    "  name: bench\n  namespace: default\ndata:\n  value: bench\n"
                },
                "bench",
            )
            platform.kube.namespace("bench-one")
            baseline = apply_and_wait(platform, INSTANCE, [bare_instance("bench-one", "bare")])
            applied = time.monotonic()
            one = apply_and_wait(platform, XR, [controlplane("bench-one", "one", repository.url)])
            wait_for(
                "the first Backup Completed",
                partial(first_backup_completed, platform, "bench-one"),
                timeout=DEADLINE,
            )
            backed_up = time.monotonic() - applied
            platform.kube.namespace("bench-many")
            many = apply_and_wait(
                platform,
                XR,
                [
                    controlplane("bench-many", f"ctp-{i:02d}", repository.url)
                    for i in range(args.controlplanes)
                ],
            )
            hosted = hosted_with_crossplane(platform, "bench-one", "one")
            parts = {
                "crossplane core": platform.core.process,
                "function": platform.function.process,
                "provider": platform.provider.process,
                "backup controller": platform.backup_controller.process,
            }
            print()
            print("| measure | seconds |")
            print("|---|---:|")
            print(f"| one bare Instance to Ready (baseline: provider + Space) | {baseline:.1f} |")
            print(f"| one ControlPlane (git source, backups) to Ready | {one:.1f} |")
            print(
                f"| the same, to its first Backup Completed (schedule every minute) "
                f"| {backed_up:.1f} |"
            )
            print(f"| {args.controlplanes} ControlPlanes at once, until all Ready | {many:.1f} |")
            print()
            print("| process | peak RSS (MiB) |")
            print("|---|---:|")
            for name, process in parts.items():
                pid = process.pid if process is not None else None
                rss = peak_rss_mib(pid) if pid is not None else float("nan")
                print(f"| {name} | {rss:.0f} |")
            print()
            print("\n".join(hosted))


if __name__ == "__main__":
    main()
