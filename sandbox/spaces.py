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
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from sandbox.apiserver import APIServer, free_port
from sandbox.paths import REPO_ROOT, UPSTREAM_CRDS

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


class SpacesSimulator:
    """Plays the Spaces controller: marks ControlPlanes Ready and writes their kubeconfig.

    The kubeconfig it writes points at ``hosted``: a real API server standing
    in for every hosted control plane, or a function that starts one per
    ControlPlane (given the ControlPlane's name), called once per ControlPlane.

    It lists ControlPlanes once and then watches them, as a controller would,
    so it answers at once however many there are and sends nothing while
    nothing changes (a steady-state count of API requests sees only the
    provider's). A broken watch (the Space's API server restarting) lists
    again. While ``ready`` is clear it holds what it saw and answers once set.
    """

    def __init__(self, space: Kube, hosted: APIServer | Callable[[str], APIServer]) -> None:
        self.space = space
        self.hosted = hosted
        self._hosted_by_uid: dict[str, APIServer] = {}
        self.ready = threading.Event()
        self.ready.set()
        self._stop = threading.Event()
        # (namespace, name) -> the ControlPlane last seen not Ready.
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}
        self._pending_changed = threading.Condition()
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
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        with self._pending_changed:
            self._pending_changed.notify_all()
        for thread in self._threads:
            thread.join(timeout=10)

    def hosted_for(self, control_plane: dict[str, Any]) -> APIServer:
        """The API server behind one ControlPlane (started on first sight if per ControlPlane)."""
        if isinstance(self.hosted, APIServer):
            return self.hosted
        metadata = control_plane["metadata"]
        uid = metadata["uid"]
        if uid not in self._hosted_by_uid:
            self._hosted_by_uid[uid] = self.hosted(metadata["name"])
        return self._hosted_by_uid[uid]

    def _watch(self) -> None:
        """List, then watch from the list's version; list again after any failure."""
        while not self._stop.is_set():
            try:
                found = self.space.custom.list_cluster_custom_object(
                    "spaces.upbound.io", "v1beta1", "controlplanes"
                )
                for cp in found["items"]:
                    self._saw(cp)
                version = found["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                        self.space.custom.list_cluster_custom_object,
                        "spaces.upbound.io",
                        "v1beta1",
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
        if condition(cp, "Ready").get("status") == "True":
            return
        metadata = cp["metadata"]
        with self._pending_changed:
            self._pending[(metadata["namespace"], metadata["name"])] = cp
            self._pending_changed.notify()

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
                # Seen again after the watch lists anew; until then, try again.
                self._stop.wait(POLL_SECONDS)
                self._saw(cp)

    def _answer(self, cp: dict[str, Any]) -> None:
        """Write the ControlPlane's kubeconfig secret, then mark it Ready."""
        metadata = cp["metadata"]
        ref = cp["spec"].get("writeConnectionSecretToRef") or {}
        if ref.get("name"):
            self.space.put_secret(
                ref.get("namespace") or metadata["namespace"],
                ref["name"],
                {"kubeconfig": self.hosted_for(cp).kubeconfig.encode()},
            )
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {
            "controlPlaneID": f"ctp-{metadata['uid'][:8]}",
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Available",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Healthy",
                    "status": "True",
                    "reason": "HealthyPackageRevision",
                    "lastTransitionTime": now,
                },
            ],
        }
        try:
            self.space.custom.patch_namespaced_custom_object_status(
                "spaces.upbound.io",
                "v1beta1",
                metadata["namespace"],
                "controlplanes",
                metadata["name"],
                {"status": status},
            )
        except ApiException as error:
            if error.status != 404:  # deleted meanwhile: nothing to answer
                raise


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
