"""The Spaces backend: one ``spaces.upbound.io`` ControlPlane per Instance.

``SpacesConnector`` reads the Instance's provider config and the Space's
kubeconfig from its secret; ``SpacesClient`` observes, creates, updates and
deletes the ControlPlane named by the Instance's external name, and hands the
ControlPlane's kubeconfig back as the Instance's connection detail.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Literal

from provider import kube
from provider.backup.instance_restore import InstanceRestore
from provider.backup.restore import Restorer
from provider.kube import Cluster, KubeError
from provider.managed import conditions, meta
from provider.managed.external import Creation, ManagedObject, Observation, Update
from provider.managed.policy import Policies
from provider.model import (
    CLUSTER_PROVIDER_CONFIGS,
    CONTROL_PLANES,
    KUBECONFIG_KEY,
    PROVIDER_CONFIGS,
    InstanceSpec,
    ProviderConfigSpec,
    parse,
)

_CONNECTION_SECRET_PREFIX = "kubeconfig-"  # noqa: S105 (a name prefix)
# Which Instance a ControlPlane is for: written when the provider creates it,
# checked before anything of it (its kubeconfig above all) reaches an Instance.
OWNER_NAMESPACE = "controlplane.spaces.upbound.io/instance-namespace"
OWNER_NAME = "controlplane.spaces.upbound.io/instance-name"
OWNER_UID = "controlplane.spaces.upbound.io/instance-uid"


class AdoptionError(KubeError):
    """A ControlPlane that belongs to another Instance; the message names neither its owner."""


class ConnectError(Exception):
    """The provider config or its credentials cannot be used; the message names which."""


class SpacesConnector:
    """Connects Instances to the Space their provider config names."""

    def __init__(
        self,
        local: Cluster,
        *,
        restorer: Restorer | None = None,
        on_request: kube.RequestHook | None = None,
    ) -> None:
        """``local`` is the cluster the Instances live in; ``restorer`` restores Backups."""
        self.local = local
        self.restoring = InstanceRestore(local, restorer) if restorer is not None else None
        self.on_request = on_request
        # One client per kubeconfig secret version, so a steady poll reuses its
        # connections and a rotated kubeconfig is picked up on the next poll.
        self._spaces: dict[tuple[str, str, str], Cluster] = {}

    async def connect(self, managed: ManagedObject) -> SpacesClient:
        """A client for the Space of ``managed``'s provider config."""
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        ref = spec.provider_config_ref
        namespace = managed["metadata"].get("namespace", "")
        if ref.kind == "ProviderConfig":
            config = await self.local.get(PROVIDER_CONFIGS, namespace, ref.name)
        else:
            config = await self.local.get(CLUSTER_PROVIDER_CONFIGS, None, ref.name)
        if config is None:
            msg = f"cannot get {ref.kind} {ref.name}: not found"
            raise ConnectError(msg)
        settings = parse(
            ProviderConfigSpec, config.get("spec") or {}, f"{ref.kind} {ref.name} spec"
        )
        selector = settings.spaces.credentials.secret_ref
        secret_namespace = selector.namespace or namespace
        if ref.kind == "ProviderConfig" and secret_namespace != namespace:
            # A namespaced config may only use secrets of its own namespace.
            msg = (
                f"ProviderConfig {ref.name}: spec.spaces.credentials.secretRef.namespace "
                f"must be {namespace!r}, its own namespace (got {secret_namespace!r})"
            )
            raise ConnectError(msg)
        space = await self._space(secret_namespace, selector.name, selector.key)
        return SpacesClient(space, settings.spaces.namespace, self.restoring)

    async def _space(self, namespace: str, name: str, key: str) -> Cluster:
        where = f"secret {namespace}/{name}"
        secret = await self.local.get(kube.SECRETS, namespace, name)
        if secret is None:
            msg = f"cannot get the Space kubeconfig: {where} not found"
            raise ConnectError(msg)
        version = str(secret["metadata"].get("resourceVersion", ""))
        cached = self._spaces.get((namespace, name, version))
        if cached is not None:
            return cached
        encoded = (secret.get("data") or {}).get(key)
        if not encoded:
            msg = f"cannot get the Space kubeconfig: {where} has no key {key!r}"
            raise ConnectError(msg)
        try:
            text = base64.b64decode(encoded, validate=True).decode()
            config = kube.load_kubeconfig_text(text)
            space = await Cluster.from_kubeconfig(config, on_request=self.on_request)
        except (binascii.Error, UnicodeDecodeError, KubeError) as error:
            detail = str(error) if isinstance(error, KubeError) else "is not valid base64 text"
            msg = f"cannot use the Space kubeconfig: key {key!r} of {where} {detail}"
            raise ConnectError(msg) from None
        for stale in [k for k in self._spaces if k[:2] == (namespace, name)]:
            await self._spaces.pop(stale).close()
        self._spaces[(namespace, name, version)] = space
        return space

    async def close(self) -> None:
        """Close every Space client."""
        for space in self._spaces.values():
            await space.close()
        self._spaces.clear()


def _desired(spec: InstanceSpec, external_name: str, group: str) -> dict[str, Any]:
    crossplane: dict[str, Any] = {
        "autoUpgrade": {"channel": spec.for_provider.crossplane.auto_upgrade.channel}
    }
    if spec.for_provider.crossplane.version:
        crossplane["version"] = spec.for_provider.crossplane.version
    desired: dict[str, Any] = {
        "crossplane": crossplane,
        "writeConnectionSecretToRef": {
            "name": f"{_CONNECTION_SECRET_PREFIX}{external_name}",
            "namespace": group,
        },
    }
    if spec.for_provider.class_:
        desired["class"] = spec.for_provider.class_
    return desired


class SpacesClient:
    """Manages the ControlPlane of one Instance in one Space group."""

    def __init__(
        self, space: Cluster, group: str, restoring: InstanceRestore | None = None
    ) -> None:
        """``group`` is the Space namespace where ControlPlanes are made."""
        self.space = space
        self.group = group
        self.restoring = restoring

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the ControlPlane; late-initialise, report readiness and the kubeconfig."""
        name = meta.external_name(managed)
        found = await self.space.get(CONTROL_PLANES, self.group, name)
        if found is None:
            return Observation(exists=False)
        policies = Policies.of((managed.get("spec") or {}).get("managementPolicies"))
        if _ownership(managed, found) == "claim" and policies.should_update:
            await self.space.merge_patch(
                CONTROL_PLANES, self.group, name, {"metadata": _owner_metadata(managed)}
            )
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        actual = found.get("spec") or {}
        late_init = _late_init(spec, actual)
        up_to_date = _up_to_date(spec, actual)
        status = found.get("status") or {}
        at_provider = managed.setdefault("status", {}).setdefault("atProvider", {})
        at_provider["id"] = status.get("controlPlaneID") or found["metadata"].get("uid", "")
        version = (actual.get("crossplane") or {}).get("version")
        if version:
            at_provider["crossplaneVersion"] = version
        ready = conditions.find(status.get("conditions") or [], "Ready")
        if ready is None or ready.get("status") != "True":
            message = str((ready or {}).get("message") or "the ControlPlane is not ready yet")
            return Observation(
                exists=True,
                up_to_date=up_to_date,
                late_init=late_init,
                ready=conditions.unavailable(message),
            )
        details = await self._kubeconfig(found)
        # A restore writes into the control plane: never under Observe-only policies.
        restoring = await self._restore(managed, spec, details) if policies.should_create else None
        return Observation(
            exists=True,
            up_to_date=up_to_date,
            late_init=late_init,
            ready=restoring or conditions.available(),
            connection_details=details,
        )

    async def _restore(
        self, managed: ManagedObject, spec: InstanceSpec, details: Mapping[str, bytes]
    ) -> conditions.Condition | None:
        """Restore the Backup the Instance was created from, once; Ready=False while not done.

        ``status.atProvider.restore`` and the ``Restored`` condition say where it stands;
        a restore interrupted by a restart resumes at the step recorded there.
        """
        source = spec.for_provider.initial_restoration_from
        if source is None or self.restoring is None:
            return None
        return await self.restoring.run(
            managed, source.backup_ref.name, details.get(KUBECONFIG_KEY)
        )

    async def _kubeconfig(self, found: Mapping[str, Any]) -> dict[str, bytes]:
        ref = (found.get("spec") or {}).get("writeConnectionSecretToRef") or {}
        if not ref.get("name"):
            return {}
        secret = await self.space.get(
            kube.SECRETS, ref.get("namespace") or self.group, str(ref["name"])
        )
        encoded = ((secret or {}).get("data") or {}).get(KUBECONFIG_KEY)
        return {KUBECONFIG_KEY: base64.b64decode(encoded)} if encoded else {}

    async def create(self, managed: ManagedObject) -> Creation:
        """Create the ControlPlane."""
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        name = meta.external_name(managed)
        body = {
            "apiVersion": CONTROL_PLANES.api_version,
            "kind": CONTROL_PLANES.kind,
            "metadata": {"name": name, "namespace": self.group, **_owner_metadata(managed)},
            "spec": _desired(spec, name, self.group),
        }
        try:
            await self.space.create(CONTROL_PLANES, body)
        except kube.AlreadyExistsError:
            msg = (
                f"a ControlPlane named {name} already exists in Space group {self.group}; "
                "it is not adopted (an operator adopts it by annotating it with "
                f"{OWNER_NAMESPACE} and {OWNER_NAME})"
            )
            raise KubeError(msg) from None
        return Creation()

    async def update(self, managed: ManagedObject) -> Update:
        """Bring the ControlPlane's Crossplane and class to the Instance's."""
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        name = meta.external_name(managed)
        desired = _desired(spec, name, self.group)
        patch = {"spec": {"crossplane": desired["crossplane"], "class": desired.get("class")}}
        await self.space.merge_patch(CONTROL_PLANES, self.group, name, patch)
        return Update()

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the ControlPlane."""
        await self.space.delete(CONTROL_PLANES, self.group, meta.external_name(managed))


def _owner_metadata(managed: ManagedObject) -> dict[str, Any]:
    metadata = managed["metadata"]
    return {
        "annotations": {
            OWNER_NAMESPACE: str(metadata.get("namespace", "")),
            OWNER_NAME: str(metadata["name"]),
        },
        "labels": {OWNER_UID: str(metadata.get("uid", ""))},
    }


def _created(obj: Mapping[str, Any]) -> datetime | None:
    stamp = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None


def _ownership(managed: ManagedObject, found: Mapping[str, Any]) -> Literal["mine", "claim"]:
    """Whether a ControlPlane is this Instance's, or one it may claim; else AdoptionError.

    A ControlPlane made before owners were recorded has none: only the Instance that
    made it may claim it, the one whose external name is its old default and which
    is older than the ControlPlane. Any other is adopted only once an operator
    records the Instance as its owner in the Space, where teams cannot write.
    """
    metadata = managed["metadata"]
    annotations = meta.annotations_of(found)
    owner = (annotations.get(OWNER_NAMESPACE), annotations.get(OWNER_NAME))
    if owner == (metadata.get("namespace"), metadata["name"]):
        return "mine"
    found_metadata = found["metadata"]
    where = f"ControlPlane {found_metadata['name']} in Space group {found_metadata['namespace']}"
    if owner != (None, None):
        msg = f"{where} belongs to another Instance; it is not adopted"
        raise AdoptionError(msg)
    instance_created, found_created = _created(managed), _created(found)
    if (
        meta.external_name(managed) == meta.legacy_external_name(managed)
        and instance_created is not None
        and found_created is not None
        and instance_created <= found_created
    ):
        return "claim"
    msg = (
        f"{where} was not made for this Instance; it is adopted only once an operator "
        f"annotates it with {OWNER_NAMESPACE} and {OWNER_NAME}"
    )
    raise AdoptionError(msg)


def _up_to_date(spec: InstanceSpec, actual: Mapping[str, Any]) -> bool:
    """Whether the ControlPlane matches every field the Instance sets."""
    wanted = spec.for_provider
    crossplane = actual.get("crossplane") or {}
    channel = (crossplane.get("autoUpgrade") or {}).get("channel", "Stable")
    return (
        channel == wanted.crossplane.auto_upgrade.channel
        and wanted.crossplane.version in (None, crossplane.get("version"))
        and wanted.class_ in (None, actual.get("class"))
    )


def _late_init(spec: InstanceSpec, actual: Mapping[str, Any]) -> dict[str, Any]:
    """The Instance's unset version and class, as the ControlPlane has them."""
    for_provider: dict[str, Any] = {}
    version = (actual.get("crossplane") or {}).get("version")
    if version and not spec.for_provider.crossplane.version:
        for_provider["crossplane"] = {"version": version}
    if actual.get("class") and not spec.for_provider.class_:
        for_provider["class"] = actual["class"]
    return {"forProvider": for_provider} if for_provider else {}
