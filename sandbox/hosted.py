"""A hosted control plane: its API server and, when asked for, Crossplane core running on it.

An Upbound Space's hosted control plane is a Crossplane control plane. Here
it is a kube-apiserver on the sandbox's etcd; `start_crossplane` runs the
same `CrossplaneCore` as the management cluster's against it (package
runtime External, its webhook on a loopback port of its own), so packages
that need no runtime, Configurations, install there from the loopback
registry. Core costs memory and start time, so it starts only for the
control planes that ask for it, once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from sandbox.apiserver import APIServer
from sandbox.crossplane import PKG, CrossplaneCore, condition_true, package_healthy
from sandbox.spaces import Kube

XRD_GROUP_VERSION = ("apiextensions.crossplane.io", "v2")


@dataclass
class HostedControlPlane:
    """One hosted control plane: `server`, and `core` once `start_crossplane` has run.

    Its API server belongs to the factory that started it, which removes its
    folder when it closes; `stop` stops core and the API server's process.
    """

    name: str
    server: APIServer
    workdir: Path
    core: CrossplaneCore | None = None
    _starting: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @cached_property
    def kube(self) -> Kube:
        """A client of its API server."""
        return Kube(self.server)

    def start_crossplane(self) -> CrossplaneCore:
        """Run Crossplane core on this control plane (once; later calls return it)."""
        with self._starting:
            if self.core is None:
                # The Space installs core here, not the platform team: it runs as admin.
                core = CrossplaneCore(
                    self.server,
                    self.workdir / "crossplane",
                    f"crossplane-{self.name}",
                    chart_rbac=False,
                )
                try:
                    core.init()
                    core.start()
                except BaseException:
                    core.stop()
                    raise
                self.core = core
            return self.core

    def crossplane_running(self) -> bool:
        """Whether Crossplane runs here: core's process up and ready, its CRDs Established.

        What the Space reports as the ControlPlane's CrossplaneRunning condition.
        """
        return self.core is not None and self.core.running()

    def stop(self) -> None:
        """Stop core, if it was started, then the API server (again: nothing more)."""
        with self._starting:
            core, self.core = self.core, None
        if core is not None:
            core.stop()
        self.server.stop()

    def install_configuration(self, name: str, reference: str) -> None:
        """Install the Configuration package at `reference` under `name`."""
        self.kube.create(
            "configurations",
            {
                "apiVersion": "/".join(PKG),
                "kind": "Configuration",
                "metadata": {"name": name},
                "spec": {"package": reference},
            },
            *PKG,
        )

    def configuration_healthy(self, name: str) -> bool:
        """Whether the Configuration `name` is Installed and Healthy."""
        return package_healthy(self.kube, "configurations", name)

    def xrd_established(self, name: str) -> bool:
        """Whether the XRD `name` is Established."""
        found = self.kube.get("compositeresourcedefinitions", None, name, *XRD_GROUP_VERSION)
        return condition_true(found, "Established")
