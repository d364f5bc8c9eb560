"""kube-controller-manager with the controllers the platform relies on.

Crossplane's composed resources, Backups owned by their schedules, and
namespaces being deleted all need the garbage collector and the namespace
controller; Crossplane's ClusterRoles, which aggregate the rules of others
by label (its chart's, the RBAC manager's, ours in deploy/), need the
ClusterRole aggregation controller. Nothing else of the controller manager
is run (there are no nodes, pods or services here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sandbox.apiserver import APIServer, free_port
from sandbox.paths import TOOLS_BIN
from sandbox.processes import Process

KUBE_CONTROLLER_MANAGER_BIN = TOOLS_BIN / "kube-controller-manager"
CONTROLLERS = (
    "garbage-collector-controller",
    "namespace-controller",
    "clusterrole-aggregation-controller",
)


@dataclass
class ControllerManager:
    """One kube-controller-manager for one API server."""

    server: APIServer
    workdir: Path
    process: Process | None = None
    # Which of its controllers run (a test of ResourceQuotas adds the quota controller).
    controllers: tuple[str, ...] = CONTROLLERS

    def start(self) -> None:
        """Start it; it is ready when its informers sync, which nothing here waits for."""
        if not KUBE_CONTROLLER_MANAGER_BIN.is_file():
            raise FileNotFoundError(
                f"{KUBE_CONTROLLER_MANAGER_BIN} is missing: "
                "run tools/build.sh kube_controller_manager"
            )
        kubeconfig = str(self.server.kubeconfig_path)
        self.process = Process(
            "kube-controller-manager",
            [
                str(KUBE_CONTROLLER_MANAGER_BIN),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--controllers={','.join(self.controllers)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.workdir / 'kube-controller-manager-certs'}",
                "--use-service-account-credentials=false",
                "--concurrent-gc-syncs=5",
                "--v=1",
            ],
            self.workdir / "kube-controller-manager.log",
        )
        self.process.start()

    def stop(self) -> None:
        """Stop it."""
        if self.process is not None:
            self.process.stop()
