"""Each controller runs as the identity its install ships; only the harness is admin.

For each process the test finds the kubeconfig it was launched with (its
`--kubeconfig` argument, mapped back from inside an image, or its
KUBECONFIG), and asks the API server who that is (a SelfSubjectReview). The
AWS stand-in plays provider-aws inside the sandbox's own process: its
kubeconfigs are the ones it was given per member of the family.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sandbox import identity
from sandbox.platform import Platform
from sandbox.processes import ImageProcess, Process


def launched_with(process: Process) -> Path | None:
    """The kubeconfig file `process` was started with (host path), or None."""
    if "--kubeconfig" in process.argv:
        given = process.argv[process.argv.index("--kubeconfig") + 1]
        if isinstance(process, ImageProcess):
            return next(bind.source for bind in process.binds if bind.target == given)
        return Path(given)
    variable = process.env.get("KUBECONFIG")
    return Path(variable) if variable else None


# Each process as the platform holds it now (a scenario may have restarted it).
PROCESSES: dict[str, Callable[[Platform], Process | None]] = {
    "crossplane": lambda platform: platform.core.process,
    "crossplane-rbac-manager": lambda platform: platform.core.rbac_manager,
    "controlplane-provider": lambda platform: platform.provider.process,
    "controlplane-backup-controller": lambda platform: platform.backup_controller.process,
    "function-controlplane": lambda platform: platform.function.process,
    "source-controller": lambda platform: platform.flux.controllers[0].process,
    "kustomize-controller": lambda platform: platform.flux.controllers[1].process,
}


def process_named(platform: Platform, name: str) -> Process:
    found = PROCESSES[name](platform)
    assert found is not None, f"{name} was not started"
    assert found.name == name
    assert found.running(), f"{name} is not running"
    return found


def of_process(name: str) -> Callable[[Platform], Path | None]:
    return lambda platform: launched_with(process_named(platform, name))


def of_standin(service: str) -> Callable[[Platform], Path | None]:
    return lambda platform: platform.aws.kubeconfigs[service]


@dataclass(frozen=True)
class IdentityCase:
    reason: str
    kubeconfig: Callable[[Platform], Path | None]
    # The user name, or a prefix of it where the name is a package revision's.
    user: str
    admin: bool = False


CASES = [
    IdentityCase(
        "Crossplane core runs as the ServiceAccount its Helm chart makes.",
        of_process("crossplane"),
        "system:serviceaccount:crossplane-system:crossplane",
    ),
    IdentityCase(
        "Core's RBAC manager runs as the chart's rbac-manager ServiceAccount.",
        of_process("crossplane-rbac-manager"),
        "system:serviceaccount:crossplane-system:rbac-manager",
    ),
    IdentityCase(
        "Our provider runs as the ServiceAccount deploy/provider's runtime config names.",
        of_process("controlplane-provider"),
        "system:serviceaccount:crossplane-system:provider-controlplane",
    ),
    IdentityCase(
        "The Backup controller runs as deploy/backup-controller's ServiceAccount.",
        of_process("controlplane-backup-controller"),
        "system:serviceaccount:controlplane-system:controlplane-backup",
    ),
    IdentityCase(
        "provider-aws-s3's stand-in runs as the ServiceAccount of its package's revision.",
        of_standin("s3"),
        "system:serviceaccount:crossplane-system:upbound-provider-aws-s3-",
    ),
    IdentityCase(
        "provider-aws-iam's stand-in runs as the ServiceAccount of its package's revision.",
        of_standin("iam"),
        "system:serviceaccount:crossplane-system:upbound-provider-aws-iam-",
    ),
    IdentityCase(
        "Flux's source-controller runs as the ServiceAccount Flux's install makes.",
        of_process("source-controller"),
        "system:serviceaccount:flux-system:source-controller",
    ),
    IdentityCase(
        "Flux's kustomize-controller runs as the ServiceAccount Flux's install makes.",
        of_process("kustomize-controller"),
        "system:serviceaccount:flux-system:kustomize-controller",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_each_controller_runs_as_the_identity_its_install_ships(
    platform: Platform, case: IdentityCase
) -> None:
    kubeconfig = case.kubeconfig(platform)
    assert kubeconfig is not None, case.reason
    who = identity.whoami(kubeconfig)
    assert who.username.startswith(case.user), (case.reason, who)
    assert who.username == case.user or case.user.endswith("-"), (case.reason, who)
    assert who.admin == case.admin, (case.reason, who)


def test_the_function_holds_no_kubernetes_credentials(platform: Platform) -> None:
    # Core calls the function over gRPC; the function calls no API server.
    function = process_named(platform, "function-controlplane")
    assert launched_with(function) is None
    assert not any("kubeconfig" in argument for argument in function.argv)


def test_the_harness_alone_is_admin(platform: Platform) -> None:
    assert identity.whoami(platform.kubeconfig).admin
    # The one cluster-admin binding of a ServiceAccount is Flux's own install's:
    # cluster-reconciler, for kustomize-controller (helm-controller is not run).
    rbac: Any = client.RbacAuthorizationV1Api(platform.kube.api)
    bindings = rbac.list_cluster_role_binding()
    to_accounts = {
        (binding.metadata.name, subject.namespace, subject.name)
        for binding in bindings.items
        if binding.role_ref.name == "cluster-admin"
        for subject in binding.subjects or ()
        if subject.kind == "ServiceAccount"
    }
    assert to_accounts == {
        ("cluster-reconciler", "flux-system", "kustomize-controller"),
        ("cluster-reconciler", "flux-system", "helm-controller"),
    }


@dataclass(frozen=True)
class FluxRuleCase:
    reason: str
    account: str
    verb: str
    group: str
    resource: str
    allowed: bool


FLUX_RULES = [
    FluxRuleCase(
        "source-controller reads the Secrets of a GitRepository (crd-controller).",
        "source-controller",
        "list",
        "",
        "secrets",
        allowed=True,
    ),
    FluxRuleCase(
        "source-controller writes its own kinds' status (crd-controller).",
        "source-controller",
        "update",
        "source.toolkit.fluxcd.io",
        "gitrepositories",
        allowed=True,
    ),
    FluxRuleCase(
        "source-controller writes no Secrets: Flux's install gives it none.",
        "source-controller",
        "create",
        "",
        "secrets",
        allowed=False,
    ),
    FluxRuleCase(
        "source-controller may not change RBAC: only kustomize-controller is cluster-admin.",
        "source-controller",
        "create",
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        allowed=False,
    ),
    FluxRuleCase(
        "kustomize-controller holds cluster-admin, as Flux's cluster-reconciler binds it.",
        "kustomize-controller",
        "create",
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        allowed=True,
    ),
]


@pytest.mark.parametrize("case", FLUX_RULES, ids=lambda case: case.reason)
def test_flux_runs_with_the_rules_of_its_own_install(
    platform: Platform, case: FluxRuleCase
) -> None:
    account = identity.ServiceAccount("flux-system", case.account)
    allowed = identity.allowed(platform.management, account, case.verb, case.group, case.resource)
    assert allowed == case.allowed, case.reason


def test_a_team_kustomization_never_applies_with_kustomize_controllers_rights(
    platform: Platform,
) -> None:
    # deploy/tenancy, applied as the install guide says, refuses it at admission.
    body = {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "as-flux", "namespace": "default"},
        "spec": {
            "interval": "10m",
            "prune": True,
            "path": "./",
            "sourceRef": {"kind": "GitRepository", "name": "any"},
        },
    }
    objects: Any = client.CustomObjectsApi(platform.kube.api)
    with pytest.raises(client.ApiException) as refused:
        objects.create_namespaced_custom_object(
            "kustomize.toolkit.fluxcd.io", "v1", "default", "kustomizations", body
        )
    assert refused.value.status == 403
    assert "controlplane-kustomization-identity" in str(refused.value.body)


def test_core_composes_flux_and_backup_kinds_only_through_the_role_deploy_ships(
    platform: Platform,
) -> None:
    # The chart's rules do not reach Flux's or the Backup controller's kinds:
    # deploy/crossplane's aggregated ClusterRole does, and it has been aggregated.
    core = identity.ServiceAccount("crossplane-system", "crossplane")
    rbac: Any = client.RbacAuthorizationV1Api(platform.kube.api)
    aggregated = rbac.read_cluster_role("crossplane")
    groups = {group for rule in aggregated.rules or () for group in rule.api_groups or ()}
    assert {"kustomize.toolkit.fluxcd.io", "source.toolkit.fluxcd.io"} <= groups
    for group, resource in (
        ("kustomize.toolkit.fluxcd.io", "kustomizations"),
        ("source.toolkit.fluxcd.io", "gitrepositories"),
        ("controlplane.spaces.upbound.io", "backupschedules"),
    ):
        assert identity.allowed(platform.management, core, "create", group, resource)
    assert not identity.allowed(
        platform.management, core, "create", "controlplane.spaces.upbound.io", "backups"
    )
