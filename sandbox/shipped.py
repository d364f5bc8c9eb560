"""Our controllers' flags and environment as deploy/ ships them, for the sandbox to run them with.

The backup controller's come from its Deployment
(``deploy/backup-controller/deployment.yaml``), the provider's from its
DeploymentRuntimeConfig (``deploy/provider/runtimeconfig.yaml``), read from the
files, so the sandbox and the system tests run what a platform team installs.
Only what one host running every process must change is changed, and said:

- ``--metrics-bind-address``: every process shares loopback, so the sandbox
  gives each its own port (``sandbox.ours.Controller``);
- a variable from the downward API (``POD_NAMESPACE``) is the namespace the
  pod would run in: the Deployment's (its kustomization's ``namespace``), or
  ``crossplane-system`` for the provider, whose package runtime sets it so;
- ``overrides``: flags the caller sets in place of the shipped ones (the
  provider's ``--poll``: the sandbox's Space takes seconds where a real one
  takes minutes, and its poll is shortened alike).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from sandbox.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
BACKUP_CONTROLLER = DEPLOY / "backup-controller"
PROVIDER_RUNTIME_CONFIG = DEPLOY / "provider" / "runtimeconfig.yaml"
METRICS_FLAG = "--metrics-bind-address"
# Where Crossplane's package runtime runs a provider, and the POD_NAMESPACE it sets.
PROVIDER_NAMESPACE = "crossplane-system"


@dataclass(frozen=True)
class Shipped:
    """One controller's command-line flags and environment, as deploy/ ships them."""

    args: tuple[str, ...]
    env: dict[str, str]

    def with_flags(self, overrides: Sequence[str]) -> tuple[str, ...]:
        """The shipped flags with those ``overrides`` names replaced by ``overrides``.

        ``overrides`` are ``--flag=value``, ``--flag value`` or ``--flag``.
        """
        replaced = {_name(arg) for arg in overrides if arg.startswith("--")}
        return (*(arg for arg in self.args if _name(arg) not in replaced), *overrides)


def backup_controller() -> Shipped:
    """The backup controller's container, from its Deployment."""
    namespace = yaml.safe_load((BACKUP_CONTROLLER / "kustomization.yaml").read_text())["namespace"]
    deployment = yaml.safe_load((BACKUP_CONTROLLER / "deployment.yaml").read_text())
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return _shipped(container, namespace)


def provider() -> Shipped:
    """The provider's container, from its DeploymentRuntimeConfig."""
    config = yaml.safe_load(PROVIDER_RUNTIME_CONFIG.read_text())
    (container,) = config["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
    shipped = _shipped(container, PROVIDER_NAMESPACE)
    return Shipped(shipped.args, {"POD_NAMESPACE": PROVIDER_NAMESPACE, **shipped.env})


def _shipped(container: dict[str, Any], namespace: str) -> Shipped:
    args = tuple(str(arg) for arg in container.get("args") or ())
    for arg in args:
        if not arg.startswith("--"):
            msg = f"{arg!r}: the sandbox reads shipped flags as --flag or --flag=value"
            raise ValueError(msg)
    env: dict[str, str] = {}
    for variable in container.get("env") or ():
        if "value" in variable:
            env[variable["name"]] = str(variable["value"])
        elif (variable.get("valueFrom") or {}).get("fieldRef", {}).get(
            "fieldPath"
        ) == "metadata.namespace":
            env[variable["name"]] = namespace
        else:
            msg = f"{variable['name']}: the sandbox cannot give a pod this variable"
            raise ValueError(msg)
    return Shipped(tuple(arg for arg in args if _name(arg) != METRICS_FLAG), env)


def _name(arg: str) -> str:
    return arg.partition("=")[0]
