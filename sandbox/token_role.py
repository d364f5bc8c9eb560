"""The role of a hosted control plane's connection token inside it: controlplane-admin.

Upbound's predefined control-plane roles let an admin token write
Crossplane's kinds, managed resources, composites and claims, Namespaces,
Secrets and ConfigMaps, and leave RBAC and CustomResourceDefinitions
read-only; none grants impersonation (docs/simulated-space.md cites them).
The Space's front (`sandbox.spacefront`) sends a control plane's requests on
as `CONTROLPLANE_USER`, a member of `CONTROLPLANE_GROUP`; `grant` binds the
group to cluster-admin in the control plane and adds an admission policy
that refuses its writes to RBAC and to CustomResourceDefinitions with 403, so
the control plane's own API server answers. Those refusals are modelled;
writes Upbound's roles also refuse (Pods, Deployments, Services) are still
allowed.
"""

from __future__ import annotations

import json
import subprocess
import time

from sandbox.apiserver import APIServer
from sandbox.kubectl import KUBECTL_BIN, kubectl

CONTROLPLANE_USER = "upbound:controlplane-token"
CONTROLPLANE_GROUP = "upbound:controlplane-admins"
TOKEN_ROLE = "upbound-controlplane-admin"
TOKEN_ROLE_MESSAGE = "the control plane's token may not write RBAC or CustomResourceDefinitions"
_RBAC: list[dict[str, object]] = [
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
# How long the API server may take to load the policy, and how often it is asked.
_IN_FORCE_SECONDS = 60.0
_POLL_SECONDS = 0.5


def grant(server: APIServer) -> None:
    """Give `server` the token's role; return once its API server enforces it."""
    kubectl(
        server.kubeconfig_path,
        *("apply", "--server-side", "--field-manager=space", "-f", "-"),
        stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": _RBAC}),
    )
    deadline = time.monotonic() + _IN_FORCE_SECONDS
    while not _enforced(server):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{server.name}: the token's role is not in force")
        time.sleep(_POLL_SECONDS)


def _enforced(server: APIServer) -> bool:
    """Whether a write to RBAC as the token's user is refused by the policy (a dry run)."""
    probe = subprocess.run(
        [
            str(KUBECTL_BIN),
            f"--kubeconfig={server.kubeconfig_path}",
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
