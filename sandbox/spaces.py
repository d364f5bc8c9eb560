"""A small sync client, a Spaces simulator (the Spaces controller) and the provider process."""

from __future__ import annotations

import base64
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal, TypeVar

import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from sandbox.apiserver import APIServer, free_port
from sandbox.paths import REPO_ROOT, UPSTREAM_CRDS
from sandbox.space_releases import POLICY_NAME, Releases, admission_binding, admission_policy
from sandbox.spacefront import SpaceFront

PROVIDER_CRDS = REPO_ROOT / "package" / "provider" / "crds"
SPACES_CRD = UPSTREAM_CRDS / "spaces" / "spaces.upbound.io_controlplanes.yaml"
GROUP, VERSION = "controlplane.spaces.upbound.io", "v1alpha1"
DEADLINE_SECONDS = 60.0
POLL_SECONDS = 0.1

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = DEADLINE_SECONDS) -> T:
    """Poll ``probe`` until it returns something truthy, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(POLL_SECONDS)
    msg = f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})"
    raise AssertionError(msg)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    """The object's condition of ``type_`` (empty when missing)."""
    for item in ((obj or {}).get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return dict(item)
    return {}


class Kube:
    """A small synchronous client for one API server, for arranging and asserting."""

    def __init__(self, server: APIServer) -> None:
        self.server = server
        # The sync client's generated models are typed strictly; tests pass dicts.
        self.api: Any = config.new_client_from_config(str(server.kubeconfig_path))  # type: ignore[no-untyped-call]
        self.custom: Any = client.CustomObjectsApi(self.api)
        self.core: Any = client.CoreV1Api(self.api)
        self.extensions: Any = client.ApiextensionsV1Api(self.api)

    def apply_crds(self, *paths: Path) -> None:
        """Create the CRDs in ``paths`` (files or folders) and wait until they are Established."""
        files = [
            p for path in paths for p in (sorted(path.glob("*.yaml")) if path.is_dir() else [path])
        ]
        names = []
        for file in files:
            for crd in yaml.safe_load_all(file.read_text()):
                if not crd:
                    continue
                with contextlib.suppress(ApiException):
                    self.extensions.create_custom_resource_definition(crd)
                names.append(crd["metadata"]["name"])
        for name in names:
            wait_for(f"CRD {name} Established", partial(self.established, name))

    def established(self, name: str) -> bool:
        """Established, and its storage serves lists (it answers 429 while initialising)."""
        try:
            crd = self.extensions.read_custom_resource_definition(name)
        except ApiException:
            return False
        if not any(
            c.type == "Established" and c.status == "True" for c in crd.status.conditions or []
        ):
            return False
        version = next(v.name for v in crd.spec.versions if v.storage)
        try:
            self.custom.list_cluster_custom_object(
                crd.spec.group, version, crd.spec.names.plural, limit=1
            )
        except ApiException:
            return False
        return True

    def namespace(self, name: str) -> None:
        """Create a namespace (once)."""
        with contextlib.suppress(ApiException):
            self.core.create_namespace({"metadata": {"name": name}})

    def get(
        self,
        plural: str,
        namespace: str | None,
        name: str,
        group: str = GROUP,
        version: str = VERSION,
    ) -> dict[str, Any] | None:
        """A custom object, or None."""
        try:
            if namespace:
                found = self.custom.get_namespaced_custom_object(
                    group, version, namespace, plural, name
                )
            else:
                found = self.custom.get_cluster_custom_object(group, version, plural, name)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(found)

    def list_of(
        self, plural: str, namespace: str, group: str, version: str
    ) -> list[dict[str, Any]]:
        """Custom objects of a namespace."""
        found = self.custom.list_namespaced_custom_object(group, version, namespace, plural)
        return list(found["items"])

    def create(
        self, plural: str, obj: dict[str, Any], group: str = GROUP, version: str = VERSION
    ) -> dict[str, Any]:
        """Create a custom object."""
        namespace = obj["metadata"].get("namespace")
        if namespace:
            return dict(
                self.custom.create_namespaced_custom_object(group, version, namespace, plural, obj)
            )
        return dict(self.custom.create_cluster_custom_object(group, version, plural, obj))

    def patch(  # noqa: PLR0917 (the object's coordinates, in the order the client takes them)
        self,
        plural: str,
        namespace: str | None,
        name: str,
        patch: dict[str, Any],
        group: str = GROUP,
        version: str = VERSION,
    ) -> None:
        """Merge-patch a custom object."""
        if namespace:
            self.custom.patch_namespaced_custom_object(
                group, version, namespace, plural, name, patch
            )
        else:
            self.custom.patch_cluster_custom_object(group, version, plural, name, patch)

    def delete(
        self,
        plural: str,
        namespace: str | None,
        name: str,
        group: str = GROUP,
        version: str = VERSION,
    ) -> None:
        """Delete a custom object (gone already is fine)."""
        try:
            if namespace:
                self.custom.delete_namespaced_custom_object(group, version, namespace, plural, name)
            else:
                self.custom.delete_cluster_custom_object(group, version, plural, name)
        except ApiException as error:
            if error.status != 404:
                raise

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A secret as a dict, or None."""
        try:
            found = self.core.read_namespaced_secret(name, namespace)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(self.api.sanitize_for_serialization(found))

    def put_secret(self, namespace: str, name: str, data: dict[str, bytes]) -> None:
        """Create or replace an Opaque secret."""
        body = {
            "metadata": {"name": name, "namespace": namespace},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        try:
            self.core.create_namespaced_secret(namespace, body)
        except ApiException as error:
            if error.status != 409:
                raise
            self.core.replace_namespaced_secret(name, namespace, body)

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """The events about an object."""
        found = self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        )
        return [dict(self.api.sanitize_for_serialization(e)) for e in found.items]


def provider_role(group: str, *, watch: bool, read: bool = True) -> dict[str, list[dict[str, Any]]]:
    """The Space Role the provider needs, by namespace: the group's, and the published ingress.

    ``watch`` adds ``watch`` to the reads; without ``read`` it may not even get or list.
    """
    reading = ["get", "list", *(["watch"] if watch else [])] if read else []
    return {
        group: [
            {
                "apiGroups": ["spaces.upbound.io"],
                "resources": ["controlplanes"],
                "verbs": [*reading, "create", "patch", "delete"],
            },
            {"apiGroups": [""], "resources": ["secrets"], "verbs": reading or ["create"]},
        ],
        INGRESS_NAMESPACE: [
            {
                "apiGroups": [""],
                "resources": ["configmaps"],
                "resourceNames": [INGRESS_CONFIGMAP],
                "verbs": ["get"],
            }
        ],
    }


def service_account_kubeconfig(
    space: Kube, namespace: str, account: str, rules: dict[str, list[dict[str, Any]]]
) -> str:
    """A kubeconfig of ``space``'s API server with a token of a new ServiceAccount.

    The account gets a Role per namespace of ``rules`` (each named after the account),
    as an operator following the self-hosted docs sets up the provider's identity in
    the host cluster.
    """
    rbac: Any = client.RbacAuthorizationV1Api(space.api)
    space.namespace(namespace)
    space.core.create_namespaced_service_account(namespace, {"metadata": {"name": account}})
    role = f"{account}-{namespace}"
    for where, granted in rules.items():
        space.namespace(where)
        rbac.create_namespaced_role(where, {"metadata": {"name": role}, "rules": granted})
        rbac.create_namespaced_role_binding(
            where,
            {
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
            },
        )
    minted = space.core.create_namespaced_service_account_token(
        account, namespace, {"spec": {"expirationSeconds": 7 * 24 * 3600}}
    )
    document = yaml.safe_load(space.server.kubeconfig)
    document["users"][0]["user"] = {"token": minted.status.token}
    return str(yaml.safe_dump(document))


@dataclass(frozen=True)
class Fault:
    """A fault the simulated Space reports on one ControlPlane until it is cleared.

    ``provisioning``: ControlPlaneProvisioned=False, reason ProvisioningError, with
    ``message`` (also ``status.message``); a ControlPlane not yet provisioned stays so.
    ``unhealthy``: Healthy=False, reason UnhealthyControlPlane. ``reconcile``: the
    Space's own Synced=False, reason ReconcileError.
    """

    kind: Literal["provisioning", "unhealthy", "reconcile"]
    message: str


class SpacesSimulator:
    """Plays the Spaces controller: provisions ControlPlanes and reports on them as a Space does.

    What it writes follows ``apis/spaces/v1beta1`` of github.com/upbound/up-sdk-go
    (``conditions.go``, ``controlplane_types.go``): a new ControlPlane is first
    ``Ready=False`` (``Creating``) with ``ControlPlaneProvisioned=False``; once
    provisioned (after ``provisioning_delay`` seconds, 0 by default) its kubeconfig
    Secret is written and it is ``Ready`` (``Available``), ``ControlPlaneProvisioned``
    (``Provisioned``), ``Healthy`` (``HealthyControlPlane``), ``Supported``
    (``SupportedCrossplaneVersion``, or False with the docs' "outside of the support
    window" message) and ``Synced`` (``ReconcileSuccess``), with ``controlPlaneID``,
    ``firstAvailableAt`` and ``status.message`` (the fault's, else none). A
    ControlPlane without a version gets the Stable release of the latest major,
    written into its spec.

    Versions (``sandbox.space_releases``): the Space's API server refuses an
    unsupported or lower version through a ValidatingAdmissionPolicy, and
    ``publish_release`` upgrades every ControlPlane whose channel is not None by
    writing the new version into ``spec.crossplane.version``, as a Space does.
    ``retire_release`` marks those on a retired version unsupported. Faults come on
    demand: ``inject`` a ``Fault``, ``clear`` it.

    The kubeconfig it writes points at ``hosted``: a real API server standing
    in for every hosted control plane, or a function that starts one per
    ControlPlane (given the ControlPlane's name), called once per ControlPlane;
    then ``release``, if given, is called with that API server once the
    ControlPlane's deletion is over: the Space manages "the underlying lifecycle
    of infrastructure (compute, memory, and storage)" of a control plane "from
    creation to deletion" (docs.upbound.io ``operate/control-planes``), so its
    API server stops serving with it.
    It writes it where ``writeConnectionSecretToRef`` says (its namespace
    defaults to the ControlPlane's: "If omitted, it is defaulted to the
    namespace of the ControlPlane", ``controlplane_types.go``), and nowhere when
    the ControlPlane names no secret: the name ``kubeconfig-<name>`` is the
    default of the ``up`` CLI (``kubeconfigFmt`` in upbound/up
    ``internal/controlplane/space/space.go``) and of our provider, not of the
    Space. With a ``front`` (``sandbox.spacefront``) the secret is as a Space
    writes it: keys ``kubeconfig`` and ``kubeconfig-incluster``, a bearer token,
    the front's CA and the control plane's path prefix on the front's host;
    ``rotate_token`` and ``rotate_ca`` rewrite it. Without one it is the hosted
    API server's own client-certificate kubeconfig under both keys.

    Each ControlPlane carries the simulator's finalizer. Deleting one takes
    ``deletion_delay`` seconds (0 by default); then its connection secret is
    deleted, its route leaves the front and the finalizer goes (a Space's
    "control plane provisioner" holds ControlPlanes with a finalizer of its own:
    Spaces release notes v1.10.0, upbound/docs
    ``docs/reference/release-notes/spaces.md``; it "manages your control plane
    lifecycle from creation to deletion": ``concepts/control-planes.md``).

    ``CrossplaneRunning`` (``ConditionTypeRunning`` in ``conditions.go``) is
    ``True`` (``Started``) when ``crossplane_running(name)`` says Crossplane
    core runs in that hosted control plane, else ``False`` (``Starting``, with
    ``StartInProgress``'s message); without that callable the simulator cannot
    know and sets no such condition. It is asked when a ControlPlane is
    answered and on ``refresh``.

    It lists ControlPlanes once and then watches them, as a controller would,
    so it answers at once however many there are and sends nothing while
    nothing changes (a steady-state count of API requests sees only the
    provider's). A broken watch (the Space's API server restarting) lists
    again. While ``ready`` is clear it holds what it saw and answers once set.
    """

    def __init__(
        self,
        space: Kube,
        hosted: APIServer | Callable[[str], APIServer],
        *,
        provisioning_delay: float = 0.0,
        deletion_delay: float = 0.0,
        releases: Releases | None = None,
        front: SpaceFront | None = None,
        crossplane_running: Callable[[str], bool] | None = None,
        release: Callable[[APIServer], None] | None = None,
    ) -> None:
        self.space = space
        self.hosted = hosted
        self.release = release
        self.provisioning_delay = provisioning_delay
        self.deletion_delay = deletion_delay
        self.front = front
        self._crossplane_running = crossplane_running
        self.releases = releases or Releases()
        self._hosted_by_uid: dict[str, APIServer] = {}
        self.ready = threading.Event()
        self.ready.set()
        self._stop = threading.Event()
        # (namespace, name) -> the ControlPlane last seen needing an answer.
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}
        self._pending_changed = threading.Condition()
        self._faults: dict[tuple[str, str], Fault] = {}
        # uid -> when provisioning began (monotonic), and the timers that come back then.
        self._first_seen: dict[str, float] = {}
        # uid -> the connection secret its kubeconfig was written to.
        self._published: dict[str, _Publication] = {}
        # Writing, rotating and deleting connection secrets, one at a time.
        self._secrets = threading.Lock()
        # uid -> when its deletion was first seen (monotonic).
        self._deleting_since: dict[str, float] = {}
        # uid -> whether Crossplane ran there when last asked.
        self._running: dict[str, bool] = {}
        self._timers: dict[str, threading.Timer] = {}
        # Per-ControlPlane API servers start one after the other; a shared one is answered
        # by a few threads, as a controller with several workers would.
        self._workers = 1 if callable(hosted) and not isinstance(hosted, APIServer) else 4
        self._threads = [
            threading.Thread(target=self._watch, name="spaces-simulator-watch", daemon=True),
            *(
                threading.Thread(target=self._work, name=f"spaces-simulator-{i}", daemon=True)
                for i in range(self._workers)
            ),
        ]

    def __enter__(self) -> SpacesSimulator:
        self._apply_policy(probe_refused=UNOFFERED_PROBE)
        self.publish_ingress()
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        with self._pending_changed:
            self._pending_changed.notify_all()
        for timer in list(self._timers.values()):
            timer.cancel()
        for thread in self._threads:
            thread.join(timeout=10)

    # Operations a test (or a person at the sandbox) performs on the Space.

    @property
    def cloud(self) -> bool:
        """Whether this Space is an Upbound Cloud one: it writes no connection secrets."""
        return self.front is not None and self.front.cloud is not None

    def publish_ingress(self) -> None:
        """Write ``upbound-system/ingress-public`` with the front's host and CA, as a Space does.

        The ConfigMap ``up ctx`` reads a Space's ingress from (upbound/up
        ``internal/profile/kubeconfig.go``, ``internal/spaces/ingress.go``).
        """
        if self.front is None:
            return
        self.space.namespace(INGRESS_NAMESPACE)
        body = {
            "metadata": {"name": INGRESS_CONFIGMAP, "namespace": INGRESS_NAMESPACE},
            "data": self.front.ingress_public(),
        }
        try:
            self.space.core.create_namespaced_config_map(INGRESS_NAMESPACE, body)
        except ApiException as error:
            if error.status != 409:
                raise
            self.space.core.replace_namespaced_config_map(
                INGRESS_CONFIGMAP, INGRESS_NAMESPACE, body
            )

    def publish_release(self, version: str) -> list[tuple[str, str, str]]:
        """Offer ``version``, then upgrade every ControlPlane its channel takes there.

        Returns ``(namespace, name, version)`` of each ControlPlane upgraded: the
        new version is written into its ``spec.crossplane.version``.
        """
        self.releases.publish(version)
        self._apply_policy(probe_accepted=version)
        upgraded = []
        for cp in self._control_planes():
            if cp["metadata"].get("deletionTimestamp"):
                continue
            crossplane = cp["spec"].get("crossplane") or {}
            channel = (crossplane.get("autoUpgrade") or {}).get("channel", "Stable")
            target = self.releases.target(channel, crossplane.get("version"))
            if target is None:
                continue
            metadata = cp["metadata"]
            self.space.patch(
                "controlplanes",
                metadata["namespace"],
                metadata["name"],
                {"spec": {"crossplane": {"version": target}}},
                SPACES_GROUP,
                SPACES_VERSION,
            )
            upgraded.append((metadata["namespace"], metadata["name"], target))
        return upgraded

    def retire_release(self, version: str) -> None:
        """Refuse ``version`` from now on; ControlPlanes on it become Supported=False."""
        self.releases.retire(version)
        self._apply_policy(probe_refused=version)
        for cp in self._control_planes():
            self._saw(cp)

    def inject(self, namespace: str, name: str, fault: Fault) -> None:
        """Report ``fault`` on the ControlPlane ``namespace/name`` until it is cleared."""
        self._faults[(namespace, name)] = fault
        self._look_again(namespace, name)

    def clear(self, namespace: str, name: str) -> None:
        """Clear the ControlPlane's fault: it provisions, or turns healthy, again."""
        self._faults.pop((namespace, name), None)
        self._look_again(namespace, name)

    def rotate_token(self, namespace: str, name: str) -> tuple[str, str]:
        """Give the ControlPlane a new token (the old one is refused) and rewrite its secret.

        Returns the connection secret's ``(namespace, name)``.
        """
        front = self._front()
        cp = self.space.get("controlplanes", namespace, name, SPACES_GROUP, SPACES_VERSION)
        publication = self._published.get((cp or {}).get("metadata", {}).get("uid", ""))
        if publication is None or publication.secret is None:
            msg = f"ControlPlane {namespace}/{name} has no connection secret yet"
            raise KeyError(msg)
        with self._secrets:
            front.rotate_token(namespace, name)
            self.space.put_secret(*publication.secret, self._kubeconfigs(publication))
        return publication.secret

    def rotate_ca(self) -> list[tuple[str, str]]:
        """Give the front a new CA; rewrite every connection secret; their ``(namespace, name)``.

        The Space's own kubeconfig (``front.space_kubeconfig()``) changes too: the
        operator's copy is the caller's to rewrite.
        """
        front = self._front()
        with self._secrets:
            front.rotate_ca()
            self.publish_ingress()
            written = []
            for publication in self._published.values():
                if publication.secret is not None:
                    self.space.put_secret(*publication.secret, self._kubeconfigs(publication))
                    written.append(publication.secret)
            return written

    def refresh(self) -> None:
        """Ask again whether Crossplane runs in each control plane, and report it."""
        for cp in self._control_planes():
            uid = cp["metadata"]["uid"]
            if uid in self._running:
                self._running[uid] = self._crossplane_runs(cp)
            self._saw(cp)

    def hosted_for(self, control_plane: dict[str, Any]) -> APIServer:
        """The API server behind one ControlPlane (started on first sight if per ControlPlane)."""
        if isinstance(self.hosted, APIServer):
            return self.hosted
        metadata = control_plane["metadata"]
        uid = metadata["uid"]
        if uid not in self._hosted_by_uid:
            self._hosted_by_uid[uid] = self.hosted(metadata["name"])
        return self._hosted_by_uid[uid]

    # The admission policy.

    def _apply_policy(
        self, *, probe_refused: str | None = None, probe_accepted: str | None = None
    ) -> None:
        """Create or replace the version policy, and wait until the API server enforces it."""
        policies: Any = client.AdmissionregistrationV1Api(self.space.api)
        body = admission_policy(self.releases)
        try:
            current = policies.read_validating_admission_policy(POLICY_NAME)
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            policies.replace_validating_admission_policy(
                POLICY_NAME, client.V1ValidatingAdmissionPolicy.from_dict(body)
            )
        except ApiException as error:
            if error.status != 404:
                raise
            policies.create_validating_admission_policy(
                client.V1ValidatingAdmissionPolicy.from_dict(body)
            )
        try:
            policies.create_validating_admission_policy_binding(
                client.V1ValidatingAdmissionPolicyBinding.from_dict(admission_binding())
            )
        except ApiException as error:
            if error.status != 409:  # bound already
                raise
        if probe_refused is not None:
            wait_for(
                f"the Space refusing version {probe_refused}",
                lambda: self._admits(probe_refused) is False,
            )
        if probe_accepted is not None:
            wait_for(
                f"the Space accepting version {probe_accepted}",
                lambda: self._admits(probe_accepted) is True,
            )

    def _admits(self, version: str) -> bool | None:
        """Whether a new ControlPlane on ``version`` would be admitted (a dry run)."""
        probe = {
            "apiVersion": f"{SPACES_GROUP}/{SPACES_VERSION}",
            "kind": "ControlPlane",
            "metadata": {"name": "spaces-simulator-probe", "namespace": "default"},
            "spec": {"crossplane": {"version": version}},
        }
        try:
            self.space.custom.create_namespaced_custom_object(
                SPACES_GROUP, SPACES_VERSION, "default", "controlplanes", probe, dry_run="All"
            )
        except ApiException as error:
            return False if error.status in {403, 422} else None
        return True

    # The controller.

    def _control_planes(self) -> list[dict[str, Any]]:
        found = self.space.custom.list_cluster_custom_object(
            SPACES_GROUP, SPACES_VERSION, "controlplanes"
        )
        return list(found["items"])

    def _look_again(self, namespace: str, name: str) -> None:
        found = self.space.get("controlplanes", namespace, name, SPACES_GROUP, SPACES_VERSION)
        if found is not None:
            self._saw(found)

    def _watch(self) -> None:
        """List, then watch from the list's version; list again after any failure."""
        while not self._stop.is_set():
            try:
                found = self.space.custom.list_cluster_custom_object(
                    SPACES_GROUP, SPACES_VERSION, "controlplanes"
                )
                for cp in found["items"]:
                    self._saw(cp)
                version = found["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                        self.space.custom.list_cluster_custom_object,
                        SPACES_GROUP,
                        SPACES_VERSION,
                        "controlplanes",
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=5,
                    )
                    # The client raises ApiException for an ERROR event (410 Gone among them).
                    for event in stream:
                        obj = event["object"]
                        version = obj["metadata"]["resourceVersion"]
                        if event["type"] in {"ADDED", "MODIFIED"}:
                            self._saw(obj)
            except (ApiException, OSError, ValueError, urllib3.exceptions.HTTPError):
                self._stop.wait(POLL_SECONDS)

    def _saw(self, cp: dict[str, Any]) -> None:
        """Queue ``cp`` unless the Space has nothing to write about it."""
        if not self._needs_answer(cp):
            return
        metadata = cp["metadata"]
        with self._pending_changed:
            self._pending[(metadata["namespace"], metadata["name"])] = cp
            self._pending_changed.notify()

    def _needs_answer(self, cp: dict[str, Any]) -> bool:
        metadata = cp["metadata"]
        held = FINALIZER in (metadata.get("finalizers") or [])
        if metadata.get("deletionTimestamp"):
            due = self._deletion_due_in(cp) if held else 0.0
            if due > 0:
                self._come_back(cp, due)
            # Once to say it is Deleting, once more when the deletion is done.
            return held and (due <= 0 or condition(cp, "Ready").get("reason") != DELETING)
        if not held or not (cp["spec"].get("crossplane") or {}).get("version"):
            return True
        secret = None if self.cloud else _connection_secret(cp)
        publication = self._published.get(metadata["uid"])
        if _provisioned(cp) and self.cloud and publication is None:
            return True  # routed on the ingress, with no secret
        if _provisioned(cp) and secret and (publication is None or publication.secret != secret):
            # A Space publishes the kubeconfig wherever the ControlPlane names (an adopted
            # ControlPlane given a connection secret later, among them).
            return True
        if not _provisioned(cp) and self._due_in(cp) > 0:
            # Creating: come back when provisioning is due, if nothing else wakes it.
            self._come_back(cp, self._due_in(cp))
            return not _same_status(cp.get("status") or {}, self._creating(cp))
        return not _same_status(cp.get("status") or {}, self._status(cp))

    def _due_in(self, cp: dict[str, Any]) -> float:
        """Seconds until ``cp`` is provisioned (never while a provisioning fault holds)."""
        metadata = cp["metadata"]
        fault = self._faults.get((metadata["namespace"], metadata["name"]))
        if fault is not None and fault.kind == "provisioning":
            return float("inf")
        first = self._first_seen.setdefault(metadata["uid"], time.monotonic())
        return first + self.provisioning_delay - time.monotonic()

    def _deletion_due_in(self, cp: dict[str, Any]) -> float:
        """Seconds until the Space has finished deleting ``cp``."""
        first = self._deleting_since.setdefault(cp["metadata"]["uid"], time.monotonic())
        return first + self.deletion_delay - time.monotonic()

    def _come_back(self, cp: dict[str, Any], due: float) -> None:
        """Look at ``cp`` again in ``due`` seconds (once; never if ``due`` is infinite)."""
        uid = cp["metadata"]["uid"]
        if uid in self._timers or due == float("inf"):
            return
        namespace, name = cp["metadata"]["namespace"], cp["metadata"]["name"]

        def again() -> None:
            self._timers.pop(uid, None)
            with contextlib.suppress(ApiException, OSError, urllib3.exceptions.HTTPError):
                self._look_again(namespace, name)

        timer = threading.Timer(due, again)
        timer.daemon = True
        self._timers[uid] = timer
        timer.start()

    def _work(self) -> None:
        while not self._stop.is_set():
            with self._pending_changed:
                while not self._stop.is_set() and not (self._pending and self.ready.is_set()):
                    # ``ready`` is an Event nobody notifies this condition of: look again soon.
                    self._pending_changed.wait(POLL_SECONDS)
                if self._stop.is_set():
                    return
                _, cp = self._pending.popitem()
            try:
                self._answer(cp)
            except (ApiException, OSError, urllib3.exceptions.HTTPError):
                # Try again with what the Space holds now (a conflict, or the Space's API
                # server away: then as it was, until the watch lists anew).
                self._stop.wait(POLL_SECONDS)
                try:
                    self._look_again(cp["metadata"]["namespace"], cp["metadata"]["name"])
                except (ApiException, OSError, urllib3.exceptions.HTTPError):
                    self._saw(cp)

    def _answer(self, cp: dict[str, Any]) -> None:
        """Hold it; default the version; report Creating; provision when due; report what holds."""
        metadata = cp["metadata"]
        finalizers = list(metadata.get("finalizers") or [])
        if metadata.get("deletionTimestamp"):
            self._delete(cp)
            return
        if FINALIZER not in finalizers:
            self._json_patch(cp, _add_finalizer(finalizers))
            return  # the watch brings it back with its finalizer
        crossplane = cp["spec"].get("crossplane") or {}
        if not crossplane.get("version"):
            channel = (crossplane.get("autoUpgrade") or {}).get("channel", "Stable")
            chosen = self.releases.target(channel, None)
            if chosen is not None:
                self._patch(cp, {"spec": {"crossplane": {"version": chosen}}})
            return  # the watch brings it back with its version
        if not _provisioned(cp):
            creating = self._creating(cp)
            if not _same_status(cp.get("status") or {}, creating):
                self._write_status(cp, creating)
            if self._due_in(cp) > 0:
                return
        secret = None if self.cloud else _connection_secret(cp)
        publication = self._published.get(metadata["uid"])
        if (secret or self.cloud) and (publication is None or publication.secret != secret):
            self._publish(cp, secret)
        if self._crossplane_running is not None:
            self._running[metadata["uid"]] = self._crossplane_runs(cp)
        self._write_status(cp, self._status(cp))

    def _publish(self, cp: dict[str, Any], secret: tuple[str, str] | None) -> None:
        """Route the ControlPlane on the front (if any); write its kubeconfig into ``secret``.

        A Cloud Space writes no secret (``secret`` None): clients reach the control
        plane on the ingress with an organisation token.
        """
        metadata = cp["metadata"]
        publication = _Publication(
            (metadata["namespace"], metadata["name"]), secret, self.hosted_for(cp)
        )
        with self._secrets:
            done = self._published.get(metadata["uid"])
            if done is not None and done.secret == secret:
                # Another worker published it while this one held an older copy: a second
                # register would give the front a new token the written secret lacks.
                return
            if self.front is not None:
                self.front.register(*publication.control_plane, publication.server)
            if secret is not None:
                self.space.put_secret(*secret, self._kubeconfigs(publication))
            self._published[metadata["uid"]] = publication

    def _kubeconfigs(self, publication: _Publication) -> dict[str, bytes]:
        """The connection secret's data: as the front writes it, else the API server's own."""
        if self.front is not None:
            data = self.front.connection_secret(*publication.control_plane)
            return {key: text.encode() for key, text in data.items()}
        text = publication.server.kubeconfig.encode()
        return {KUBECONFIG_KEY: text, INCLUSTER_KEY: text}

    def _delete(self, cp: dict[str, Any]) -> None:
        """Once the deletion delay is over: the secret, the route, then the finalizer."""
        metadata = cp["metadata"]
        uid = metadata["uid"]
        if FINALIZER not in (metadata.get("finalizers") or []):
            return
        due = self._deletion_due_in(cp)
        if due > 0:
            self._deleting(cp)
            self._come_back(cp, due)
            return
        with self._secrets:
            publication = self._published.get(uid)
            secret = publication.secret if publication else _connection_secret(cp)
            if self.cloud:
                secret = None
            if secret is not None:
                try:
                    self.space.core.delete_namespaced_secret(secret[1], secret[0])
                except ApiException as error:
                    if error.status != 404:
                        raise
            if self.front is not None:
                self.front.unregister(metadata["namespace"], metadata["name"])
            self._published.pop(uid, None)
        self._json_patch(cp, _remove_finalizer(list(metadata["finalizers"])))
        for state in (self._first_seen, self._deleting_since, self._running):
            state.pop(uid, None)
        server = self._hosted_by_uid.pop(uid, None)
        if server is not None and self.release is not None:
            self.release(server)

    def _deleting(self, cp: dict[str, Any]) -> None:
        """Ready=False, Deleting (crossplane-runtime's); the API answers 503 from now on."""
        if self.front is not None:
            self.front.drain(cp["metadata"]["namespace"], cp["metadata"]["name"])
        if condition(cp, "Ready").get("reason") == DELETING:
            return
        held = [c for c in (cp.get("status") or {}).get("conditions") or [] if c["type"] != "Ready"]
        kept = [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in held]
        self._write_status(
            cp,
            {
                "conditions": [_condition("Ready", "False", DELETING), *kept],
                "message": (cp.get("status") or {}).get("message"),
            },
        )

    def _crossplane_runs(self, cp: dict[str, Any]) -> bool:
        """Whether Crossplane core runs in the ControlPlane's hosted control plane."""
        if self._crossplane_running is None:
            return False
        return self._crossplane_running(cp["metadata"]["name"])

    def _front(self) -> SpaceFront:
        if self.front is None:
            msg = "the Spaces simulator has no front: tokens and CAs rotate on a front"
            raise RuntimeError(msg)
        return self.front

    def _creating(self, cp: dict[str, Any]) -> dict[str, Any]:
        """The status of a ControlPlane being provisioned (or failing to be)."""
        fault = self._fault(cp)
        provisioned = _condition("ControlPlaneProvisioned", "False", "Provisioned")
        message = None
        if fault is not None and fault.kind == "provisioning":
            provisioned = _condition(
                "ControlPlaneProvisioned", "False", "ProvisioningError", fault.message
            )
            message = fault.message
        return {
            "conditions": [
                _condition("Ready", "False", "Creating"),
                provisioned,
                self._synced(fault),
            ],
            "message": message,
            "observedGeneration": cp["metadata"].get("generation"),
        }

    def _status(self, cp: dict[str, Any]) -> dict[str, Any]:
        """The status of a provisioned ControlPlane."""
        metadata = cp["metadata"]
        fault = self._fault(cp)
        version = str((cp["spec"].get("crossplane") or {}).get("version") or "")
        message = None
        provisioned = _condition("ControlPlaneProvisioned", "True", "Provisioned")
        healthy = _condition("Healthy", "True", "HealthyControlPlane")
        if fault is not None and fault.kind == "provisioning":
            provisioned = _condition(
                "ControlPlaneProvisioned", "False", "ProvisioningError", fault.message
            )
            message = fault.message
        if fault is not None and fault.kind == "unhealthy":
            healthy = _condition("Healthy", "False", "UnhealthyControlPlane", fault.message)
            message = fault.message
        supported = _condition("Supported", "True", "SupportedCrossplaneVersion")
        if not self.releases.is_supported(version):
            supported = _condition(
                "Supported",
                "False",
                "UnsupportedCrossplaneVersion",
                f"Crossplane version {version} is outside of the support window. "
                f"Oldest supported minor version is {self.releases.oldest_minor()}.",
            )
        conditions = [
            _condition("Ready", "True", "Available"),
            provisioned,
            healthy,
            supported,
            self._synced(fault),
        ]
        if self._crossplane_running is not None:
            conditions.append(_crossplane_running(self._running.get(metadata["uid"], False)))
        first = (cp.get("status") or {}).get("firstAvailableAt") or _now()
        return {
            "controlPlaneID": f"ctp-{metadata['uid'][:8]}",
            "firstAvailableAt": first,
            "conditions": conditions,
            "message": message,
            # The spec it answers: a version written since is not yet answered.
            "observedGeneration": metadata.get("generation"),
        }

    def _fault(self, cp: dict[str, Any]) -> Fault | None:
        return self._faults.get((cp["metadata"]["namespace"], cp["metadata"]["name"]))

    @staticmethod
    def _synced(fault: Fault | None) -> dict[str, Any]:
        if fault is not None and fault.kind == "reconcile":
            return _condition("Synced", "False", "ReconcileError", fault.message)
        return _condition("Synced", "True", "ReconcileSuccess")

    def _write_status(self, cp: dict[str, Any], status: dict[str, Any]) -> None:
        """Write ``status``, keeping the transition time of every condition that held."""
        before = {c.get("type"): c for c in (cp.get("status") or {}).get("conditions") or []}
        stamped = []
        for item in status["conditions"]:
            held = before.get(item["type"])
            kept = held is not None and _same_condition(held, item)
            stamped.append(
                {
                    **item,
                    "lastTransitionTime": held["lastTransitionTime"] if kept and held else _now(),
                }
            )
        metadata = cp["metadata"]
        try:
            self.space.custom.patch_namespaced_custom_object_status(
                SPACES_GROUP,
                SPACES_VERSION,
                metadata["namespace"],
                "controlplanes",
                metadata["name"],
                {"status": {**status, "conditions": stamped}},
            )
        except ApiException as error:
            if error.status != 404:  # deleted meanwhile: nothing to answer
                raise

    def _json_patch(self, cp: dict[str, Any], operations: list[dict[str, Any]]) -> None:
        """Apply a JSON patch (its ``test`` operations guard against a concurrent change)."""
        metadata = cp["metadata"]
        try:
            self.space.custom.patch_namespaced_custom_object(
                SPACES_GROUP,
                SPACES_VERSION,
                metadata["namespace"],
                "controlplanes",
                metadata["name"],
                operations,
                _content_type="application/json-patch+json",
            )
        except ApiException as error:
            if error.status != 404:
                raise

    def _patch(self, cp: dict[str, Any], patch: dict[str, Any]) -> None:
        metadata = cp["metadata"]
        try:
            self.space.patch(
                "controlplanes",
                metadata["namespace"],
                metadata["name"],
                patch,
                SPACES_GROUP,
                SPACES_VERSION,
            )
        except ApiException as error:
            if error.status != 404:
                raise


SPACES_GROUP, SPACES_VERSION = "spaces.upbound.io", "v1beta1"
# The simulator's own finalizer on every ControlPlane (a Space's name for its own is not
# documented; this one says whose it is).
FINALIZER = "spaces-simulator.sandbox.local/controlplane"
# crossplane-runtime's Ready reason while a managed resource is deleted (``Deleting()``).
DELETING = "Deleting"
# Where a Space publishes its ingress (upbound/up internal/profile/kubeconfig.go).
INGRESS_NAMESPACE, INGRESS_CONFIGMAP = "upbound-system", "ingress-public"
# The connection secret's keys (``ResourceCredentialsSecretInClusterKubeconfigKey``).
KUBECONFIG_KEY, INCLUSTER_KEY = "kubeconfig", "kubeconfig-incluster"


@dataclass(frozen=True)
class _Publication:
    """Where a ControlPlane's kubeconfig was written, and the API server it leads to."""

    control_plane: tuple[str, str]
    # None in a Cloud Space, which writes no connection secrets.
    secret: tuple[str, str] | None
    server: APIServer


def _add_finalizer(finalizers: list[str]) -> list[dict[str, Any]]:
    """A JSON patch adding ``FINALIZER`` to ``finalizers`` (those the object has now)."""
    if not finalizers:
        return [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]
    return [
        {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
        {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
    ]


def _remove_finalizer(finalizers: list[str]) -> list[dict[str, Any]]:
    """A JSON patch removing ``FINALIZER`` from ``finalizers`` (those the object has now)."""
    return [
        {"op": "test", "path": "/metadata/finalizers", "value": finalizers},
        {"op": "remove", "path": f"/metadata/finalizers/{finalizers.index(FINALIZER)}"},
    ]


# A version no Space offers: refused once the policy is enforced.
UNOFFERED_PROBE = "0.0.1-up.1"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _condition(type_: str, status: str, reason: str, message: str = "") -> dict[str, Any]:
    found = {"type": type_, "status": status, "reason": reason}
    if message:
        found["message"] = message
    return found


def _crossplane_running(running: bool) -> dict[str, Any]:
    """CrossplaneRunning as ``StartCompleted`` or ``StartInProgress`` (``conditions.go``) say it."""
    if running:
        return _condition("CrossplaneRunning", "True", "Started")
    return _condition(
        "CrossplaneRunning",
        "False",
        "Starting",
        "The crossplane and provider workloads are being started",
    )


def _same_condition(held: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(held.get(key, "") == wanted.get(key, "") for key in ("status", "reason", "message"))


def _same_status(current: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether ``current`` already says all ``wanted`` says (transition times aside)."""
    held = {c.get("type"): c for c in current.get("conditions") or []}
    for item in wanted["conditions"]:
        if item["type"] not in held or not _same_condition(held[item["type"]], item):
            return False
    if (current.get("message") or None) != wanted.get("message"):
        return False
    return all(
        current.get(key) == value
        for key, value in wanted.items()
        if key not in {"conditions", "message", "firstAvailableAt"}
    )


def _connection_secret(cp: dict[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the Secret the ControlPlane's kubeconfig goes to, if it names one."""
    ref = cp["spec"].get("writeConnectionSecretToRef") or {}
    if not ref.get("name"):
        return None
    return (str(ref.get("namespace") or cp["metadata"]["namespace"]), str(ref["name"]))


def _provisioned(cp: dict[str, Any]) -> bool:
    """Provisioned once: a Ready=True is never taken back (a fault says what is wrong)."""
    return condition(cp, "Ready").get("status") == "True"


class ProviderProcess:
    """``controlplane-provider`` as a process of its own, against one API server."""

    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        *args: str,
        command: str = "controlplane-provider",
        env: Mapping[str, str] | None = None,
    ) -> None:
        """The command's flags are ``args``; ``env`` adds to the test's environment."""
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.args = args
        self.command = command
        self.env = {**os.environ, **(env or {})}
        self.metrics_port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> ProviderProcess:
        """Start the process (it is not waited on)."""
        script = Path(sys.executable).with_name(self.command)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [
                str(script),
                "--kubeconfig",
                str(self.kubeconfig),
                "--metrics-bind-address",
                f"127.0.0.1:{self.metrics_port}",
                *self.args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
        )
        return self

    def kill(self) -> None:
        """SIGKILL: no chance to finish anything."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> int:
        """SIGTERM, and its exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def alive(self) -> bool:
        """Whether it runs."""
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        """Its whole output so far."""
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        """Its Prometheus metrics page."""
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as response:
            return str(response.read().decode())


@contextlib.contextmanager
def provider(kubeconfig: Path, log_path: Path, *args: str) -> Iterator[ProviderProcess]:
    """A running provider, stopped after."""
    process = ProviderProcess(kubeconfig, log_path, *args).start()
    try:
        yield process
    finally:
        process.stop()
