"""controlplane-plan of a 500-object repository against a live control plane, beside `flux diff`.

A real kube-apiserver (on a real etcd) is the control plane and the
management cluster at once. A team repository of two stages (packages: 100
objects, config: 400; ConfigMaps and Secrets with the platform's variables)
is built and applied as Flux would (field manager kustomize-controller, its
owner labels), its Kustomizations created with their inventories; then a
push changes 100 objects, adds 50 and removes 50. Measured, wall time per
run (median of ``--repeat``):

- ``controlplane-plan`` live, base to head, JSON out: every object built by
  ``controlplane-plan-build``, GET and dry-run applied, the prunes read;
- ``flux diff kustomization`` for each stage (the flux CLI, ``tools/build.sh
  flux_cli``): its own build and one dry-run apply per object, in sequence.
  It needs each Kustomization to exist in the cluster it diffs against
  (fluxcd/flux2#5439), which the bench provides.

    .venv/bin/python -m bench.plan_scale [--objects 500] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.restore_scale import children_cpu_seconds, cpu_seconds, etcd_pid
from plan import build, stages
from plan.live import FIELD_MANAGER, KUSTOMIZATIONS
from provider.kube import Cluster, Resource, kubeconfig_file
from sandbox.apiserver import APIServer, APIServerFactory, run_etcd
from sandbox.paths import TOOLS, TOOLS_BIN
from tests.builders import composite, example_input

ROOT = Path(__file__).resolve().parent.parent
BUILD_TOOL = TOOLS_BIN / "controlplane-plan-build"
FLUX = TOOLS_BIN / "flux"
KUBECTL = TOOLS_BIN / "kubectl"
KUSTOMIZATION_CRDS = TOOLS / "flux" / "kustomize-controller" / "crds"
NAMESPACE = "team-a"
APPS = "apps"
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), "-c", "user.email=b@example.org", "-c", "user.name=b", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def manifest(index: int, revision: str) -> dict[str, Any]:
    """Object ``index``: every tenth a Secret, the rest ConfigMaps, with the platform's variable."""
    metadata = {"name": f"object-{index:04d}", "namespace": APPS}
    if index % 10 == 0:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "stringData": {"token": f"{revision}-secret-{index}"},
        }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {"owner": "${CONTROLPLANE_NAME}", "revision": revision, "index": str(index)},
    }


def write_tree(repo: Path, objects: dict[int, str], packages: int) -> None:
    for stage in ("packages", "config"):
        for old in (repo / stage).glob("*.yaml"):
            old.unlink()
    for index, revision in objects.items():
        folder = repo / ("packages" if index < packages else "config")
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{index:04d}.yaml").write_text(yaml.safe_dump(manifest(index, revision)))


def repository(root: Path, total: int) -> tuple[Path, str, str, dict[str, int]]:
    """Base and head commits; the head changes, adds and removes a fifth, a tenth and a tenth."""
    repo = root / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    packages = total // 5
    base = dict.fromkeys(range(total), "base")
    write_tree(repo, base, packages)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base_sha = git(repo, "rev-parse", "HEAD")
    head = dict(base)
    changed, added, removed = total // 5, total // 10, total // 10
    for index in range(changed):
        head[index * 4 + 1] = "head"
    for index in range(total - removed, total):
        del head[index]
    for index in range(total, total + added):
        head[index] = "head"
    write_tree(repo, head, packages)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "head")
    counts = {"change": changed, "create": added, "delete": removed}
    return repo, base_sha, git(repo, "rev-parse", "HEAD"), counts


async def seed(server: APIServer, repo: Path, base: str, found: tuple[stages.Stage, ...]) -> None:
    """Apply the base as Flux would, and record each stage's Kustomization with its inventory."""
    cluster = await Cluster.from_kubeconfig(kubeconfig_file(server.kubeconfig_path))
    try:
        for name in (NAMESPACE, APPS):
            await cluster.apply(
                NAMESPACES,
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                field_manager=FIELD_MANAGER,
            )
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "myctp-kubeconfig", "namespace": NAMESPACE},
            "data": {"kubeconfig": base64.b64encode(server.kubeconfig.encode()).decode()},
        }
        await cluster.apply(SECRETS, secret, field_manager="bench")
        git(repo, "checkout", "-q", base)
        slots = asyncio.Semaphore(16)

        async def put(obj: dict[str, Any]) -> None:
            async with slots:
                resource = SECRETS if obj["kind"] == "Secret" else CONFIGMAPS
                await cluster.apply(resource, obj, field_manager=FIELD_MANAGER)

        for stage in found:
            objects = build.build(BUILD_TOOL, repo, stage.kustomization)
            await asyncio.gather(*(put(dict(item.object)) for item in objects))
            body = {k: v for k, v in stage.kustomization.items() if k != "status"}
            created = await cluster.create(KUSTOMIZATIONS, body)
            created["status"] = {
                "inventory": {
                    "entries": [
                        {"id": f"{APPS}_{item.id.name}__{item.id.kind}", "v": "v1"}
                        for item in objects
                    ]
                }
            }
            await cluster.replace_status(KUSTOMIZATIONS, created)
        git(repo, "checkout", "-q", "main")
    finally:
        await cluster.close()


@dataclass
class Run:
    """One run: its wall time, and the CPU seconds of the command and of the servers it asked."""

    wall: float
    command_cpu: float
    server_cpu: float


def timed(
    argv: list[str], env: dict[str, str], ok: set[int], servers: list[int]
) -> tuple[Run, str]:
    before = children_cpu_seconds(), sum(cpu_seconds(pid) for pid in servers)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in ok:
        raise RuntimeError(f"{Path(argv[0]).name} exited {done.returncode}: {done.stderr[-2000:]}")
    run = Run(
        elapsed,
        children_cpu_seconds() - before[0],
        sum(cpu_seconds(pid) for pid in servers) - before[1],
    )
    return run, done.stdout


def report(name: str, runs: list[Run]) -> None:
    """Medians: the wall time, the CPU seconds, and the CPU bound on two idle cores."""
    wall = statistics.median(r.wall for r in runs)
    command = statistics.median(r.command_cpu for r in runs)
    server = statistics.median(r.server_cpu for r in runs)
    print(f"{name}: wall s median {wall:.2f} (runs {[round(r.wall, 2) for r in runs]})")
    print(
        f"  CPU s median: command {command:.2f}, kube-apiserver and etcd {server:.2f}; "
        f"on two idle cores at least {(command + server) / 2:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--profile", type=Path, help="also write a CPU profile (cProfile) of one plan here"
    )
    args = parser.parse_args()
    if not BUILD_TOOL.is_file():
        raise SystemExit(f"{BUILD_TOOL} is missing: tools/build.sh plan_build")
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as folder:
        root = Path(folder)
        repo, base, head, expected = repository(root, args.objects)
        xr = composite(
            {
                "source": {
                    "url": "https://github.com/acmeorg/bench",
                    "stages": [
                        {"name": "packages", "path": "./packages"},
                        {"name": "config", "path": "./config", "dependsOn": ["packages"]},
                    ],
                }
            }
        )
        (root / "xr.yaml").write_text(yaml.safe_dump(xr))
        (root / "input.yaml").write_text(yaml.safe_dump(example_input()))
        found = stages.render(xr, example_input())
        with run_etcd(parent_dir=root) as etcd, APIServerFactory(etcd, parent_dir=root) as factory:
            server = factory(name="plane")
            subprocess.run(
                [
                    str(KUBECTL),
                    "--kubeconfig",
                    str(server.kubeconfig_path),
                    "apply",
                    "--server-side",
                    "-f",
                    str(KUSTOMIZATION_CRDS),
                ],
                check=True,
                capture_output=True,
            )
            subprocess.run(
                [
                    str(KUBECTL),
                    "--kubeconfig",
                    str(server.kubeconfig_path),
                    "wait",
                    "--for=condition=Established",
                    "crd/kustomizations.kustomize.toolkit.fluxcd.io",
                ],
                check=True,
                capture_output=True,
            )
            asyncio.run(seed(server, repo, base, found))
            env = {**os.environ, "CONTROLPLANE_PLAN_BUILD": str(BUILD_TOOL)}
            plan_argv = [
                str(ROOT / ".venv" / "bin" / "controlplane-plan"),
                "--controlplane",
                str(root / "xr.yaml"),
                "--function-input",
                str(root / "input.yaml"),
                "--management-kubeconfig",
                str(server.kubeconfig_path),
                "--repo",
                str(repo),
                "--base",
                base,
                "--head",
                head,
                "-o",
                "json",
            ]
            servers = [int(server.pid or 0), etcd_pid(etcd.data_dir)]
            plans = []
            for _ in range(args.repeat):
                run, out = timed(plan_argv, env, {2}, servers)
                plans.append(run)
            if args.profile:
                profiled = [
                    str(ROOT / ".venv" / "bin" / "python"),
                    "-c",
                    "import cProfile, sys; from plan.cli import main; "
                    f"sys.argv = ['controlplane-plan', *{plan_argv[1:]!r}]; "
                    "p = cProfile.Profile(); p.enable(); "
                    "exec('try:\\n main()\\nexcept SystemExit:\\n pass'); "
                    f"p.disable(); p.dump_stats({str(args.profile)!r})",
                ]
                timed(profiled, env, {0}, servers)
            summary = yaml.safe_load(out)["summary"]
            print(f"{args.objects} objects; the plan: {summary} (expected {expected})")
            print(f"load average before: {os.getloadavg()[0]:.1f}")
            report("controlplane-plan", plans)
            if not FLUX.is_file():
                print("flux diff kustomization: not built (tools/build.sh flux_cli)")
                return
            diffs = []
            for _ in range(args.repeat):
                total = Run(0.0, 0.0, 0.0)
                for stage in found:
                    run, _ = timed(
                        [
                            str(FLUX),
                            "diff",
                            "kustomization",
                            stage.kustomization_name,
                            "--namespace",
                            NAMESPACE,
                            "--path",
                            str(repo / stage.path),
                            "--kubeconfig",
                            str(server.kubeconfig_path),
                            "--progress-bar=false",
                        ],
                        env,
                        {0, 1},
                        servers,
                    )
                    total = Run(
                        total.wall + run.wall,
                        total.command_cpu + run.command_cpu,
                        total.server_cpu + run.server_cpu,
                    )
                diffs.append(total)
            report("flux diff kustomization, both stages in turn", diffs)


if __name__ == "__main__":
    main()
