"""The Spaces backend: one ``spaces.upbound.io`` ControlPlane per Instance.

``SpacesConnector`` reads the Instance's provider config and the Space's
credentials from its secret: a kubeconfig (``Secret``), or a robot's or user's
token exchanged for short-lived organisation tokens (``UpboundTokens``, Upbound
Cloud; ``provider.spaces.upbound``). ``SpacesClient`` observes, creates, updates
and deletes the ControlPlane named by the Instance's external name, and hands
the ControlPlane's kubeconfig back as the Instance's connection detail: the one
the Space wrote, or, in Upbound Cloud, whose Spaces write none, one it writes
itself on the Space's ingress with the current token.

What the Space publishes of its ingress (``upbound-system/ingress-public``,
``provider.spaces.ingress``) is the default host a control plane's kubeconfig
may name; the connector records it in the provider config's
``status.space.ingressHost`` for the Backup controller.

Given ``on_control_plane``, the connector watches what it reads instead of
reading it on every poll: per Space credentials secret in use, that one Secret
(a field selector on its name); per Space and group in use, the group's
ControlPlanes, its ControlPlane connection secrets (``kubeconfig-*``; other
Secrets of the group are dropped before caching, and only the ``kubeconfig``
key is kept) and the published ingress. A Space that refuses watches is listed
every poll interval instead (``provider.cache``). A ControlPlane or its secret
changing calls ``on_control_plane`` with its Instance's key, so a ControlPlane
turning Ready wakes its Instance at once; a new organisation token wakes every
Instance of its Space. Watches start on first use and stop when no provider
config names them.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from provider import kube, kubeconfig
from provider.backup.restore.instance import InstanceRestore, RestoreBounds
from provider.backup.restore.restorer import Restorer
from provider.cache import CachedClient, Informer, without_managed_fields
from provider.kube import Cluster, JsonObject, KubeError
from provider.kubeconfig import ControlPlaneHosts
from provider.managed import conditions, meta
from provider.managed.external import Creation, ManagedObject, Observation, Update
from provider.managed.policy import Policies
from provider.model import (
    CLUSTER_PROVIDER_CONFIGS,
    CONTROL_PLANES,
    KUBECONFIG_KEY,
    PROVIDER_CONFIGS,
    ControlPlaneSpec,
    ControlPlaneStatus,
    Credentials,
    InstanceSpec,
    InvalidError,
    ProviderConfigSpec,
    ProviderConfigStatus,
    UpboundSettings,
    credentials_namespace,
    parse,
)
from provider.spaces import desired, ingress, readiness, upgrades
from provider.spaces.desired import CONNECTION_SECRET_PREFIX as _CONNECTION_SECRET_PREFIX
from provider.spaces.ingress import Ingress
from provider.spaces.upbound import OrganizationTokens

# Which Instance a ControlPlane is for: written when the provider creates it,
# checked before anything of it (its kubeconfig above all) reaches an Instance.
OWNER_NAMESPACE = "controlplane.spaces.upbound.io/instance-namespace"
OWNER_NAME = "controlplane.spaces.upbound.io/instance-name"
OWNER_UID = "controlplane.spaces.upbound.io/instance-uid"
# How long a reconcile waits for a new watch's first list before it reports the Space.
SYNC_TIMEOUT_SECONDS = kube.REQUEST_TIMEOUT_SECONDS

InstanceKey = tuple[str, str]

log = logging.getLogger(__name__)


class AdoptionError(KubeError):
    """A ControlPlane that belongs to another Instance; the message names neither its owner."""


class ConnectError(Exception):
    """The provider config or its credentials cannot be used; the message names which."""


def cached_space_secret(secret: JsonObject) -> JsonObject | None:
    """What is cached of a Space secret: a ControlPlane's kubeconfig, nothing of any other."""
    metadata = secret.get("metadata") or {}
    if not str(metadata.get("name", "")).startswith(_CONNECTION_SECRET_PREFIX):
        return None
    kubeconfig = (secret.get("data") or {}).get(KUBECONFIG_KEY)
    return {
        "metadata": {
            key: metadata[key]
            for key in ("name", "namespace", "uid", "resourceVersion")
            if key in metadata
        },
        "data": {KUBECONFIG_KEY: kubeconfig} if kubeconfig else {},
    }


def instance_of(control_plane: Mapping[str, Any]) -> list[InstanceKey]:
    """The key of the Instance a ControlPlane was made for (none for a foreign one)."""
    annotations = meta.annotations_of(control_plane)
    namespace, name = annotations.get(OWNER_NAMESPACE), annotations.get(OWNER_NAME)
    return [(namespace, name)] if namespace and name else []


@dataclass
class _Watches:
    """Informers run until ``close``."""

    stop: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def run(self, informer: Informer) -> Informer:
        self.tasks.append(asyncio.create_task(informer.run(self.stop)))
        return informer

    async def close(self) -> None:
        self.stop.set()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@dataclass
class _Space:
    """A Space client for one credentials secret version and group, with its caches if watched.

    ``tokens`` are Upbound Cloud's organisation tokens (``UpboundTokens``), whose
    Spaces write no connection secrets: the provider writes each kubeconfig on the
    ingress, ``fallback_ingress`` (the Space's URL) until the Space's own is read.
    """

    version: str
    cluster: Cluster
    cache: CachedClient
    watches: _Watches | None = None
    tokens: OrganizationTokens | None = None
    fallback_ingress: Ingress | None = None
    # What the Space publishes (None: nothing readable), and when it was read (monotonic).
    published: Ingress | None = None
    published_at: float | None = None

    async def close(self) -> None:
        if self.watches is not None:
            await self.watches.close()
        if self.tokens is not None:
            await self.tokens.close()
        await self.cluster.close()


class SpacesConnector:
    """Connects Instances to the Space their provider config names."""

    def __init__(
        self,
        local: Cluster,
        *,
        restorer: Restorer | None = None,
        restores: RestoreBounds | None = None,
        on_request: kube.RequestHook | None = None,
        cache: CachedClient | None = None,
        on_control_plane: Callable[[InstanceKey], None] | None = None,
        controlplane_hosts: ControlPlaneHosts | None = None,
        poll_interval: float = 60.0,
        releases: Sequence[str] = (),
    ) -> None:
        """``local`` is the cluster the Instances live in; ``restorer`` restores Backups.

        ``restores`` bounds the restores running at once and each one's time.
        ``cache`` reads provider configs; ``on_control_plane`` turns on the
        Space watches and hears which Instance a ControlPlane change (or its
        restore's progress, or a new Upbound token) concerns.
        ``controlplane_hosts`` are the hosts a ControlPlane's kubeconfig may name
        (none given: what the Space publishes). ``poll_interval`` is how often a
        Space whose API has no watch is listed, and what it publishes read again.
        ``releases`` are the Crossplane versions the Spaces support, the steps of
        an upgrade of more than one minor.
        """
        self.local = local
        self.releases = tuple(releases)
        self.controlplane_hosts = controlplane_hosts or ControlPlaneHosts()
        self.poll_interval = poll_interval
        bounds = restores or RestoreBounds()
        self.restoring = (
            InstanceRestore(
                restorer, limit=bounds.limit, deadline=bounds.deadline, wake=on_control_plane
            )
            if restorer is not None
            else None
        )
        self.on_request = on_request
        self.cache = cache or CachedClient(local)
        self.on_control_plane = on_control_plane
        # One client per credentials secret version and group, so a steady poll
        # reuses its connections and rotated credentials are picked up at once.
        self._spaces: dict[tuple[str, str, str], _Space] = {}
        # Watches of the Space credentials secrets in use, one Secret each.
        self._credentials: dict[tuple[str, str], tuple[Informer, _Watches]] = {}
        self._closing: set[asyncio.Task[None]] = set()

    async def connect(self, managed: ManagedObject) -> SpacesClient:
        """A client for the Space of ``managed``'s provider config."""
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        ref = spec.provider_config_ref
        namespace = managed["metadata"].get("namespace", "")
        resource = PROVIDER_CONFIGS if ref.kind == "ProviderConfig" else CLUSTER_PROVIDER_CONFIGS
        config = await self.cache.get(
            resource, namespace if ref.kind == "ProviderConfig" else None, ref.name
        )
        if config is None:
            msg = f"cannot get {ref.kind} {ref.name}: not found"
            raise ConnectError(msg)
        settings = parse(
            ProviderConfigSpec, config.get("spec") or {}, f"{ref.kind} {ref.name} spec"
        )
        credentials = settings.spaces.credentials
        selector = credentials.secret_ref
        try:
            secret_namespace = credentials_namespace(ref.kind, ref.name, selector, namespace)
        except InvalidError as error:
            raise ConnectError(str(error)) from None
        group = settings.spaces.namespace
        space = await self._space(secret_namespace, group, credentials)
        published = await self._published(space)
        await self._record(resource, config, published)
        return SpacesClient(
            space.cluster,
            group,
            self.restoring,
            cache=space.cache,
            controlplane_hosts=self.controlplane_hosts,
            published=published,
            tokens=space.tokens,
            ingress=published or space.fallback_ingress,
            releases=self.releases,
        )

    async def _space(self, namespace: str, group: str, credentials: Credentials) -> _Space:
        """The Space client of a credentials secret (a kubeconfig, or an Upbound token)."""
        selector = credentials.secret_ref
        name, key = selector.name, selector.key
        where = f"secret {namespace}/{name}"
        secret = await self._credential(namespace, name)
        if secret is None:
            msg = f"cannot get the Space credentials: {where} not found"
            raise ConnectError(msg)
        version = str(secret["metadata"].get("resourceVersion", ""))
        upbound = credentials.upbound if credentials.source == "UpboundTokens" else None
        if upbound is not None:
            # The settings are part of what the client is made of.
            version = f"{version}/{upbound.model_dump_json()}"
        cached = self._spaces.get((namespace, name, group))
        if cached is not None and cached.version == version:
            return cached
        tokens = None
        fallback = None
        if upbound is None:
            config = _kubeconfig_of(secret, key, where)
            try:
                cluster = await Cluster.from_kubeconfig(config, on_request=self.on_request)
            except KubeError as error:
                msg = f"cannot use the Space kubeconfig: key {key!r} of {where} {error}"
                raise ConnectError(msg) from None
        else:
            ca_pem = _ca_of(upbound)
            tokens = OrganizationTokens(
                upbound.token_endpoint,
                upbound.organization,
                _token_of(secret, key, where),
                ca_pem=ca_pem,
            )
            cluster = Cluster.with_token_source(
                upbound.space_url, ca_pem, tokens, on_request=self.on_request
            )
            fallback = ingress.from_url(upbound.space_url, ca_pem)
        stale = [k for k, v in self._spaces.items() if k[:2] == (namespace, name)]
        for other in [k for k in stale if self._spaces[k].version != version]:
            await self._spaces.pop(other).close()
        space = self._watched(version, cluster, group)
        space.tokens, space.fallback_ingress = tokens, fallback
        if tokens is not None:
            tokens.on_refresh = lambda: self._wake_all(space)
        self._spaces[(namespace, name, group)] = space
        return space

    async def _published(self, space: _Space) -> Ingress | None:
        """What the Space publishes of its ingress: from its watch, else read once a poll.

        None when it publishes nothing this client may read (the ConfigMap is absent,
        or its Role does not grant it): the Space's own host is then the default.
        """
        watched = space.cache.informer(kube.CONFIG_MAPS)
        if watched is not None:
            with contextlib.suppress(KubeError):
                await watched.wait_synced(SYNC_TIMEOUT_SECONDS)
            if watched.fresh():
                return _ingress_of(
                    watched.get(ingress.INGRESS_NAMESPACE, ingress.INGRESS_CONFIGMAP)
                )
        # Not watched, or its Role grants only get: read it, at most once a poll interval.
        now = time.monotonic()
        if space.published_at is not None and now - space.published_at < self.poll_interval:
            return space.published
        try:
            found = await space.cluster.get(
                kube.CONFIG_MAPS, ingress.INGRESS_NAMESPACE, ingress.INGRESS_CONFIGMAP
            )
        except kube.ForbiddenError:
            found = None
        except KubeError:
            # An unreachable Space: Observe, which reads it next, says so; ask again then.
            return space.published
        space.published, space.published_at = _ingress_of(found), now
        return space.published

    async def _record(
        self, resource: kube.Resource, config: JsonObject, published: Ingress | None
    ) -> None:
        """Keep the Space's published ingress host in the provider config's status.

        The Backup controller, which never reaches the Space, allows the same host
        from there; a ClusterProviderConfig's status is written by the provider alone.
        """
        host = published.host if published is not None else ""
        try:
            status = parse(ProviderConfigStatus, config.get("status") or {}, "status")
        except InvalidError:
            status = ProviderConfigStatus()
        if status.space.ingress_host == host:
            return
        metadata = config["metadata"]
        await self.local.merge_patch(
            resource,
            metadata.get("namespace"),
            metadata["name"],
            {"status": {"space": {"ingressHost": host}}},
            subresource="status",
        )

    async def _credential(self, namespace: str, name: str) -> JsonObject | None:
        """The Space credentials secret: from its own watch when watching, else read."""
        if self.on_control_plane is None:
            return await self.local.get(kube.SECRETS, namespace, name)
        known = self._credentials.get((namespace, name))
        if known is None:
            watches = _Watches()
            informer = watches.run(
                Informer(
                    self.local,
                    kube.SECRETS,
                    namespace=namespace,
                    field_selector=f"metadata.name={name}",
                    relist_interval=self.poll_interval,
                )
            )
            known = self._credentials[(namespace, name)] = (informer, watches)
        await known[0].wait_synced(SYNC_TIMEOUT_SECONDS)
        return known[0].get(namespace, name)

    def _watched(self, version: str, cluster: Cluster, group: str) -> _Space:
        """A Space, with watches of the group's ControlPlanes and their secrets when watching.

        A Space whose API has no watch (Upbound Cloud's), or whose Role grants only
        list, is listed every poll interval instead (``provider.cache``).
        """
        notify = self.on_control_plane
        if notify is None:
            return _Space(version, cluster, CachedClient(cluster))
        watches = _Watches()
        control_planes = Informer(
            cluster,
            CONTROL_PLANES,
            namespace=group,
            transform=without_managed_fields,
            relist_interval=self.poll_interval,
        )
        secrets = Informer(
            cluster,
            kube.SECRETS,
            namespace=group,
            transform=cached_space_secret,
            relist_interval=self.poll_interval,
        )

        def control_plane_changed(_: str, obj: JsonObject, __: JsonObject | None) -> None:
            for instance in instance_of(obj):
                notify(instance)

        def secret_changed(_: str, obj: JsonObject, __: JsonObject | None) -> None:
            name = str(obj["metadata"].get("name", "")).removeprefix(_CONNECTION_SECRET_PREFIX)
            for instance in instance_of(control_planes.get(group, name) or {}):
                notify(instance)

        # What the Space publishes of its ingress (one ConfigMap, by name).
        published = Informer(
            cluster,
            kube.CONFIG_MAPS,
            namespace=ingress.INGRESS_NAMESPACE,
            field_selector=f"metadata.name={ingress.INGRESS_CONFIGMAP}",
            relist_interval=self.poll_interval,
        )
        control_planes.add_handler(control_plane_changed)
        secrets.add_handler(secret_changed)
        for informer in (control_planes, secrets, published):
            watches.run(informer)
        cache = CachedClient(cluster, [control_planes, secrets, published])
        return _Space(version, cluster, cache, watches)

    def _wake_all(self, space: _Space) -> None:
        """Queue every Instance of the Space's group: a new token goes into their kubeconfigs."""
        if self.on_control_plane is None:
            return
        for control_plane in space.cache.cached(CONTROL_PLANES) or []:
            for instance in instance_of(control_plane):
                self.on_control_plane(instance)

    def prune(self, in_use: set[tuple[str, str, str]]) -> None:
        """Stop the watches and clients of Spaces no provider config names any more.

        ``in_use`` holds (secret namespace, secret name, group) of every provider config.
        """
        for space in [k for k in self._spaces if k not in in_use]:
            self._close_later(self._spaces.pop(space).close())
        secrets = {(namespace, name) for namespace, name, _ in in_use}
        for secret in [k for k in self._credentials if k not in secrets]:
            self._close_later(self._credentials.pop(secret)[1].close())

    def _close_later(self, closing: Any) -> None:
        task = asyncio.ensure_future(closing)
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        """Close every Space client, stop every watch and every restore."""
        if self.restoring is not None:
            await self.restoring.close()
        for space in self._spaces.values():
            await space.close()
        self._spaces.clear()
        for _, watches in self._credentials.values():
            await watches.close()
        self._credentials.clear()
        await asyncio.gather(*self._closing, return_exceptions=True)


def _kubeconfig_of(secret: JsonObject, key: str, where: str) -> JsonObject:
    """The parsed kubeconfig at ``key`` of a Space kubeconfig secret; ConnectError if none."""
    encoded = (secret.get("data") or {}).get(key)
    if not encoded:
        msg = f"cannot get the Space kubeconfig: {where} has no key {key!r}"
        raise ConnectError(msg)
    try:
        return kube.load_kubeconfig_text(base64.b64decode(encoded, validate=True).decode())
    except (binascii.Error, UnicodeDecodeError, KubeError) as error:
        detail = str(error) if isinstance(error, KubeError) else "is not valid base64 text"
        msg = f"cannot use the Space kubeconfig: key {key!r} of {where} {detail}"
        raise ConnectError(msg) from None


def _ingress_of(config_map: JsonObject | None) -> Ingress | None:
    """The ingress an ``ingress-public`` ConfigMap publishes; None for none (or a bad one)."""
    if config_map is None:
        return None
    try:
        return ingress.published(config_map.get("data"))
    except ingress.IngressError as error:
        log.warning(
            "the Space's published ingress is not usable", extra={"fields": {"error": str(error)}}
        )
        return None


def _token_of(secret: JsonObject, key: str, where: str) -> str:
    """The robot's or user's token at ``key`` of a secret, trimmed; ConnectError if none."""
    encoded = (secret.get("data") or {}).get(key)
    try:
        token = base64.b64decode(encoded or "", validate=True).decode().strip()
    except (binascii.Error, UnicodeDecodeError):
        token = ""
    if not token or any(c.isspace() for c in token):
        msg = f"cannot get the Upbound token: {where} has no token at key {key!r}"
        raise ConnectError(msg)
    return token


def _ca_of(upbound: UpboundSettings) -> str | None:
    """The PEM of ``upbound.certificateAuthorityData``, or None for the public CAs."""
    if not upbound.certificate_authority_data:
        return None
    try:
        return base64.b64decode(upbound.certificate_authority_data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        msg = "spec.spaces.credentials.upbound.certificateAuthorityData is not base64 PEM"
        raise ConnectError(msg) from None


def spaces_in_use(configs: list[JsonObject]) -> set[tuple[str, str, str]]:
    """(secret namespace, secret name, group) of each valid provider config."""
    found = set()
    for config in configs:
        with contextlib.suppress(InvalidError):
            settings = parse(ProviderConfigSpec, config.get("spec") or {}, "spec")
            selector = settings.spaces.credentials.secret_ref
            own = config["metadata"].get("namespace", "")
            kind = "ProviderConfig" if own else "ClusterProviderConfig"
            name = config["metadata"].get("name", "")
            namespace = credentials_namespace(kind, name, selector, own)
            found.add((namespace, selector.name, settings.spaces.namespace))
    return found


class SpacesClient:
    """Manages the ControlPlane of one Instance in one Space group."""

    def __init__(
        self,
        space: Cluster,
        group: str,
        restoring: InstanceRestore | None = None,
        *,
        cache: CachedClient | None = None,
        controlplane_hosts: ControlPlaneHosts | None = None,
        published: Ingress | None = None,
        tokens: OrganizationTokens | None = None,
        ingress: Ingress | None = None,
        releases: Sequence[str] = (),
    ) -> None:
        """``group`` is the Space namespace where ControlPlanes are made.

        ``cache`` reads the group's ControlPlanes and their secrets from watches;
        a ControlPlane's kubeconfig must name a host ``controlplane_hosts`` allows
        (by default ``published``, what the Space publishes of its ingress). With
        ``tokens`` (Upbound Cloud, whose Spaces write no connection secrets) the
        kubeconfig is written here: the control plane on ``ingress``, its CA, a token.
        ``releases`` are the Crossplane versions the Space supports: an upgrade of
        more than one minor steps through them (``upgrades``).
        """
        self.releases = tuple(releases)
        self.space = space
        self.group = group
        self.restoring = restoring
        self.cache = cache or CachedClient(space)
        self.controlplane_hosts = controlplane_hosts or ControlPlaneHosts()
        self.published = published
        self.tokens = tokens
        self.ingress = ingress

    async def observe(self, managed: ManagedObject) -> Observation:
        """Find the ControlPlane; report what the Space says of it, and its kubeconfig.

        Up to date when the patch ``desired.changes`` would send is empty: a
        version the Space upgraded past the Instance's is up to date.
        """
        name = meta.external_name(managed)
        watched = self.cache.informer(CONTROL_PLANES)
        if watched is not None:
            # An unreachable Space fails here, as a read would.
            await watched.wait_synced(SYNC_TIMEOUT_SECONDS)
        found = await self.cache.get(CONTROL_PLANES, self.group, name)
        if found is None:
            return Observation(exists=False)
        policies = Policies.of((managed.get("spec") or {}).get("managementPolicies"))
        if _ownership(managed, found) == "claim" and policies.should_update:
            await self.cache.merge_patch(
                CONTROL_PLANES, self.group, name, {"metadata": _owner_metadata(managed)}
            )
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        where = f"ControlPlane {name}"
        status = parse(ControlPlaneStatus, found.get("status") or {}, f"{where} status")
        actual = parse(ControlPlaneSpec, found.get("spec") or {}, f"{where} spec")
        at_provider = managed.setdefault("status", {}).setdefault("atProvider", {})
        at_provider["id"] = status.control_plane_id or found["metadata"].get("uid", "")
        # What runs now: a Space writes an upgrade into the spec of what it upgrades.
        version = actual.crossplane.version
        if version:
            at_provider["crossplaneVersion"] = version
        else:
            at_provider.pop("crossplaneVersion", None)
        step = self._step(spec, found)
        if step.target:
            at_provider["upgrade"] = {"target": step.target, "message": step.message}
        else:
            at_provider.pop("upgrade", None)
        said = readiness.verdict(status)
        if step.stuck and not said.refused:
            said = readiness.Verdict(said.ready, step.message)
        if said.ready.status != "True":
            return self._observed(managed, spec, found, said)
        details, problem = await self._kubeconfig(actual, name)
        if problem:
            said = readiness.verdict(status, problem)
        ready = said.ready
        # A restore writes into the control plane: never under Observe-only policies.
        # Without a kubeconfig it is only recorded as pending.
        restoring = await self._restore(managed, spec, details) if policies.should_create else None
        if restoring is not None and ready.status == "True":
            ready = restoring
        return self._observed(managed, spec, found, said, ready, details)

    def _observed(  # noqa: PLR0917 (what one observation is made of)
        self,
        managed: ManagedObject,
        spec: InstanceSpec,
        found: Mapping[str, Any],
        said: readiness.Verdict,
        ready: conditions.Condition | None = None,
        details: Mapping[str, bytes] | None = None,
    ) -> Observation:
        return Observation(
            exists=True,
            up_to_date=not self._changes(managed, spec, found),
            late_init=desired.late_init(spec, _spec_of(found)),
            ready=ready or said.ready,
            connection_details=details or {},
            refused=said.refused,
        )

    def _changes(
        self, managed: ManagedObject, spec: InstanceSpec, found: Mapping[str, Any]
    ) -> dict[str, Any]:
        return desired.changes(
            spec,
            _spec_of(found),
            (found.get("metadata") or {}).get("labels") or {},
            desired.owner_labels(managed["metadata"]),
            self._connection_ref(meta.external_name(managed)),
            self._step(spec, found),
        )

    def _step(self, spec: InstanceSpec, found: Mapping[str, Any]) -> upgrades.Step:
        """The version to write now; a minor upgrade waits for the control plane to settle."""
        return desired.version_step(spec, _spec_of(found), self.releases, settled=_settled(found))

    def _connection_ref(self, name: str) -> dict[str, str] | None:
        """Where the Space writes a ControlPlane's kubeconfig; None in Upbound Cloud.

        Connection secrets are deprecated and exist only on self-hosted Spaces
        (upbound/docs ``cloud-spaces-docs/howtos/gitops-on-upbound.md`` connects to
        a Cloud control plane with ``up ctx`` instead), so none is asked of a Cloud Space.
        """
        if self.tokens is not None:
            return None
        return desired.connection_secret_ref(name, self.group)

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

    async def _kubeconfig(
        self, actual: ControlPlaneSpec, name: str
    ) -> tuple[dict[str, bytes], str]:
        """The ControlPlane's kubeconfig if it exists and passes the allow-list; else why not.

        The Instance's connection secret is read by teams and by the Backup
        controller, which parse it with ``provider.kubeconfig``'s allow-list:
        a kubeconfig it would refuse is not handed on.
        """
        if self.tokens is not None:
            return await self._written_kubeconfig(name)
        ref = actual.write_connection_secret_to_ref
        if ref is None or not ref.name:
            return {}, "the ControlPlane names no connection secret yet"
        namespace, name = ref.namespace or self.group, ref.name
        watched = self.cache.informer(kube.SECRETS)
        if (
            watched is not None
            and namespace == self.group
            and name.startswith(_CONNECTION_SECRET_PREFIX)
        ):
            await watched.wait_synced(SYNC_TIMEOUT_SECONDS)
            secret = await self.cache.get(kube.SECRETS, namespace, name)
        else:
            # Not one the cache keeps (a ControlPlane adopted with a secret of its own).
            secret = await self.space.get(kube.SECRETS, namespace, name)
        encoded = ((secret or {}).get("data") or {}).get(KUBECONFIG_KEY)
        where = f"secret {namespace}/{name}"
        if not encoded:
            return {}, f"waiting for the Space to write the control plane's kubeconfig ({where})"
        try:
            text = base64.b64decode(encoded, validate=True)
            credentials = kubeconfig.parse(kube.load_kubeconfig_text(text.decode()))
            self._check_host(credentials.server)
        except (kubeconfig.KubeconfigError, KubeError) as error:
            return {}, f"the control plane's kubeconfig in {where} is refused: {error}"
        except (binascii.Error, UnicodeDecodeError):
            return {}, f"the control plane's kubeconfig in {where} is not base64 text"
        return {KUBECONFIG_KEY: text}, ""

    def _check_host(self, server: str) -> None:
        published = self.published.pattern if self.published is not None else None
        self.controlplane_hosts.check(server, space_server=self.space.server, published=published)

    async def _written_kubeconfig(self, name: str) -> tuple[dict[str, bytes], str]:
        """A Cloud control plane's kubeconfig, as ``up ctx`` would point it, with a token.

        The server is the control plane's path on the Space's ingress, the CA the
        one the Space publishes (else the provider config's), the user the current
        organisation token: no exec, no token file. The provider writes it again
        with each new token, before the one it carries expires.
        """
        if self.tokens is None or self.ingress is None:
            return {}, "the Space's ingress is not known"
        server = ingress.control_plane_server(self.ingress, self.group, name)
        try:
            self._check_host(server)
        except kubeconfig.KubeconfigError as error:
            return {}, f"the control plane's kubeconfig is refused: {error}"
        token = await self.tokens()
        text = ingress.control_plane_kubeconfig(
            server, self.ingress.ca_pem, token, f"{self.group}-{name}"
        )
        return {KUBECONFIG_KEY: text}, ""

    async def create(self, managed: ManagedObject) -> Creation:
        """Create the ControlPlane."""
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        name = meta.external_name(managed)
        body = {
            "apiVersion": CONTROL_PLANES.api_version,
            "kind": CONTROL_PLANES.kind,
            "metadata": {"name": name, "namespace": self.group, **_owner_metadata(managed)},
            "spec": _created_spec(spec, self._connection_ref(name)),
        }
        try:
            await self.cache.create(CONTROL_PLANES, body)
        except kube.AlreadyExistsError:
            # The cache may lag behind a create of ours (a watch resuming after
            # an API server restart): the server has the last word.
            found = await self.space.get(CONTROL_PLANES, self.group, name)
            if found is not None and instance_of(found) == instance_of(body):
                watched = self.cache.informer(CONTROL_PLANES)
                if watched is not None:
                    watched.remember(found)
                return Creation()
            msg = (
                f"a ControlPlane named {name} already exists in Space group {self.group}; "
                "it is not adopted (an operator adopts it by annotating it with "
                f"{OWNER_NAMESPACE} and {OWNER_NAME})"
            )
            raise KubeError(msg) from None
        return Creation()

    async def update(self, managed: ManagedObject) -> Update:
        """Patch what differs from the Instance, and only that (see ``desired.changes``)."""
        spec = parse(InstanceSpec, managed.get("spec") or {}, "spec")
        name = meta.external_name(managed)
        found = await self.cache.get(CONTROL_PLANES, self.group, name)
        if found is None:
            msg = f"ControlPlane {name} in Space group {self.group} is gone"
            raise KubeError(msg)
        patch = self._changes(managed, spec, found)
        if patch:
            await self.cache.merge_patch(CONTROL_PLANES, self.group, name, patch)
        return Update()

    async def delete(self, managed: ManagedObject) -> None:
        """Delete the ControlPlane, and stop a restore into it."""
        if self.restoring is not None:
            await self.restoring.cancel(managed)
        await self.cache.delete(CONTROL_PLANES, self.group, meta.external_name(managed))


def _settled(found: Mapping[str, Any]) -> bool:
    """Whether the Space reports the ControlPlane ready and healthy on its current spec.

    A status older than the spec's generation (the Space has not answered the
    last version written) is not settled; a Space that writes no
    ``observedGeneration`` is taken at its word.
    """
    name = (found.get("metadata") or {}).get("name", "")
    status = parse(ControlPlaneStatus, found.get("status") or {}, f"ControlPlane {name} status")
    generation = (found.get("metadata") or {}).get("generation")
    answered = status.observed_generation
    if answered is not None and isinstance(generation, int) and answered < generation:
        return False
    return readiness.verdict(status).ready.status == "True"


def _spec_of(found: Mapping[str, Any]) -> ControlPlaneSpec:
    name = (found.get("metadata") or {}).get("name", "")
    return parse(ControlPlaneSpec, found.get("spec") or {}, f"ControlPlane {name} spec")


def _owner_metadata(managed: ManagedObject) -> dict[str, Any]:
    metadata = managed["metadata"]
    return {
        "annotations": {
            OWNER_NAMESPACE: str(metadata.get("namespace", "")),
            OWNER_NAME: str(metadata["name"]),
        },
        "labels": {OWNER_UID: str(metadata.get("uid", "")), **desired.owner_labels(metadata)},
    }


def _created_spec(spec: InstanceSpec, connection_ref: Mapping[str, str] | None) -> dict[str, Any]:
    """A new ControlPlane's spec; without a version or class the Space picks its own."""
    crossplane: dict[str, Any] = {
        "autoUpgrade": {"channel": spec.for_provider.crossplane.auto_upgrade.channel}
    }
    if spec.for_provider.crossplane.version:
        crossplane["version"] = spec.for_provider.crossplane.version
    created: dict[str, Any] = {"crossplane": crossplane}
    if connection_ref is not None:
        created["writeConnectionSecretToRef"] = dict(connection_ref)
    if spec.for_provider.class_:
        created["class"] = spec.for_provider.class_
    return created


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
