"""A hosted control plane: its API server and, when asked for, Crossplane core running on it.

An Upbound Space's hosted control plane is a Crossplane control plane. Here
it is a kube-apiserver on the sandbox's etcd; `start_crossplane` runs the
same `CrossplaneCore` as the management cluster's against it (package
runtime External, its webhook on a loopback port of its own), so packages
that need no runtime, Configurations, install there from the loopback
registry. Core costs memory and start time, so it starts only for the
control planes that ask for it, once.

`grant_token_role` gives the control plane the RBAC its connection token is
held to (the front sends requests on as `CONTROLPLANE_USER`, a member of
`CONTROLPLANE_GROUP`): Upbound's predefined control-plane roles let an admin
token write Crossplane's kinds, managed resources, composites and claims,
Namespaces, Secrets and ConfigMaps, and leave RBAC and CRDs read-only
(docs/simulated-space.md cites them). Here the group is bound to
cluster-admin and an admission policy refuses its writes to RBAC and to
CustomResourceDefinitions with 403: those refusals are modelled; writes
Upbound's roles also refuse (Pods, Deployments, Services) are still allowed.
"""

from __future__ import annotations

import json
import subprocess
import threading
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from sandbox.apiserver import APIServer
from sandbox.crossplane import PKG, CrossplaneCore, condition_true, package_healthy
from sandbox.kubectl import KUBECTL_BIN, kubectl
from sandbox.spacefront import CONTROLPLANE_GROUP, CONTROLPLANE_USER
from sandbox.spaces import Kube, wait_for

XRD_GROUP_VERSION = ("apiextensions.crossplane.io", "v2")
TOKEN_ROLE = "upbound-controlplane-admin"
TOKEN_ROLE_MESSAGE = "the control plane's token may not write RBAC or CustomResourceDefinitions"
_TOKEN_RBAC: list[dict[str, object]] = [
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": TOKEN_ROLE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": "cluster-admin",
        },
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": CONTROLPLANE_GROUP}
        ],
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": TOKEN_ROLE},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["rbac.authorization.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["*"],
                    },
                    {
                        "apiGroups": ["apiextensions.k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE", "DELETE"],
                        "resources": ["customresourcedefinitions"],
                    },
                ]
            },
            "validations": [
                {
                    "expression": f"!('{CONTROLPLANE_GROUP}' in request.userInfo.groups)",
                    "message": TOKEN_ROLE_MESSAGE,
                    "reason": "Forbidden",
                }
            ],
        },
    },
    {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": TOKEN_ROLE},
        "spec": {"policyName": TOKEN_ROLE, "validationActions": ["Deny"]},
    },
]


@dataclass
class HostedControlPlane:
    """One hosted control plane: `server`, and `core` once `start_crossplane` has run.

    Its API server belongs to the factory that started it; `stop` stops what
    this object started, core.
    """

    name: str
    server: APIServer
    workdir: Path
    core: CrossplaneCore | None = None
    _starting: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def grant_token_role(self) -> None:
        """The connection token's role here; return once the API server enforces it."""
        kubectl(
            self.server.kubeconfig_path,
            *("apply", "--server-side", "--field-manager=space", "-f", "-"),
            stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": _TOKEN_RBAC}),
        )
        wait_for(f"{self.name}'s token role in force", self._token_role_enforced, 60)

    def _token_role_enforced(self) -> bool:
        probe = subprocess.run(
            [
                str(KUBECTL_BIN),
                f"--kubeconfig={self.server.kubeconfig_path}",
                f"--as={CONTROLPLANE_USER}",
                f"--as-group={CONTROLPLANE_GROUP}",
                *("create", "clusterrole", "probe", "--verb=get", "--resource=pods"),
                "--dry-run=server",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return TOKEN_ROLE_MESSAGE in probe.stderr

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
        """Stop core, if it was started."""
        if self.core is not None:
            self.core.stop()

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
