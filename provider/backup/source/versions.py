"""What a control plane says it runs: its Kubernetes version, and Crossplane's where it says.

Kubernetes: the API server's ``/version`` (``gitVersion``), which every API
server serves.

Crossplane, in order of authority:

1. For a hosted control plane, the Instance's
   ``status.atProvider.crossplaneVersion``: the provider copies it from the
   Space's ControlPlane, and it is what the Space runs now (a Space writes an
   upgrade into that spec). A Space runs Crossplane outside the control
   plane's API, so the control plane itself has nothing to show; and the
   Space's word is the one its version table, channels and refusals use
   (``2.1.4-up.2``), the form ``provider.spaces.versions`` orders.
2. Otherwise (``controlplane-backup`` against any control plane), what the
   control plane itself reports, found as ``up controlplane migration``
   finds it: the Deployment named ``crossplane``, its
   ``app.kubernetes.io/version`` label (the Helm chart's) and the
   ``--enable-*`` arguments of its ``crossplane`` (or
   ``universal-crossplane``) container, its feature flags.

A control plane that answers neither (no Deployment, or no right to list
them) has no Crossplane version to report: that is recorded as unknown, and
never fails a backup. Only what is asked for is read: one small list.
"""

from __future__ import annotations

import logging

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from provider.backup.format.archive import SourceVersions
from provider.kube import Cluster, KubeError, Resource
from provider.model import InvalidError, parse

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
CROSSPLANE_DEPLOYMENT = "crossplane"
CROSSPLANE_CONTAINERS = frozenset({"crossplane", "universal-crossplane"})
VERSION_LABEL = "app.kubernetes.io/version"
FEATURE_FLAG_PREFIX = "--enable"
# One Deployment is expected; a few more (one per namespace) are read, never a long list.
MAX_DEPLOYMENTS = 8
MAX_ANSWER_BYTES = 1024 * 1024

log = logging.getLogger(__name__)


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore")


class KubernetesVersion(_Model):
    """The API server's ``/version``."""

    git_version: str = ""


class _Container(_Model):
    name: str = ""
    args: list[str] = Field(default_factory=list)


class _PodSpec(_Model):
    containers: list[_Container] = Field(default_factory=list)


class _Template(_Model):
    spec: _PodSpec = _PodSpec()


class _DeploymentSpec(_Model):
    template: _Template = _Template()


class _Metadata(_Model):
    name: str = ""
    labels: dict[str, str] = Field(default_factory=dict)


class Deployment(_Model):
    """The parts of a Deployment that say which Crossplane runs, and with which flags."""

    metadata: _Metadata = _Metadata()
    spec: _DeploymentSpec = _DeploymentSpec()


class DeploymentList(_Model):
    """A list of Deployments."""

    items: list[Deployment] = Field(default_factory=list)


def crossplane_of(deployments: DeploymentList) -> SourceVersions:
    """Crossplane's version and feature flags from its Deployment, as ``up`` reads them."""
    for deployment in deployments.items:
        if deployment.metadata.name != CROSSPLANE_DEPLOYMENT:
            continue
        containers = deployment.spec.template.spec.containers
        container = next((c for c in containers if c.name in CROSSPLANE_CONTAINERS), None)
        args = container.args if container is not None else []
        flags = tuple(arg for arg in args if arg.startswith(FEATURE_FLAG_PREFIX))
        return SourceVersions(
            crossplane=deployment.metadata.labels.get(VERSION_LABEL, ""), feature_flags=flags
        )
    return SourceVersions()


async def kubernetes_version(cluster: Cluster) -> str:
    """The API server's ``gitVersion``; empty when it does not say."""
    try:
        answer = await cluster.request(
            "GET", "/version", label="version", max_bytes=MAX_ANSWER_BYTES
        )
        return parse(KubernetesVersion, answer, "/version").git_version
    except (KubeError, InvalidError) as error:
        log.info("no Kubernetes version", extra={"fields": {"why": str(error)}})
        return ""


async def reported_crossplane(cluster: Cluster) -> SourceVersions:
    """Crossplane's version and flags as the control plane itself reports them, if it does."""
    try:
        answer = await cluster.request(
            "GET",
            DEPLOYMENTS.path(),
            query={
                "fieldSelector": f"metadata.name={CROSSPLANE_DEPLOYMENT}",
                "limit": str(MAX_DEPLOYMENTS),
            },
            label=DEPLOYMENTS.plural,
            max_bytes=MAX_ANSWER_BYTES,
        )
        return crossplane_of(parse(DeploymentList, answer, "deployments"))
    except (KubeError, InvalidError) as error:
        log.info("no Crossplane Deployment", extra={"fields": {"why": str(error)}})
        return SourceVersions()


async def source_versions(cluster: Cluster, crossplane: str = "") -> SourceVersions:
    """What ``cluster`` runs; ``crossplane``, when given (a Space's word), overrides its own."""
    reported = await reported_crossplane(cluster)
    return SourceVersions(
        kubernetes=await kubernetes_version(cluster),
        crossplane=crossplane or reported.crossplane,
        feature_flags=reported.feature_flags,
    )
