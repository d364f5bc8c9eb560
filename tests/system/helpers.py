"""What the system tests do as a team would: apply composites, read what came of them."""

from __future__ import annotations

import calendar
import itertools
import re
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import watch

from sandbox.git import Repository
from sandbox.platform import Platform
from sandbox.spaces import Kube, condition, wait_for

XR = ("platform.acme.io", "v1alpha1", "controlplanes")
CLAIM = ("legacy.platform.acme.io", "v1alpha1", "controlplanes")
INSTANCE = ("controlplane.spaces.upbound.io", "v1alpha1", "instances")
KUSTOMIZATION = ("kustomize.toolkit.fluxcd.io", "v1", "kustomizations")
GIT_REPOSITORY = ("source.toolkit.fluxcd.io", "v1", "gitrepositories")
SPACE_CONTROLPLANE = ("spaces.upbound.io", "v1beta1", "controlplanes")
# Deadlines for a platform on 2 shared cores: composing, a hosted API server, a Flux sync.
UP_DEADLINE = 240.0
SYNC_DEADLINE = 120.0

_names = itertools.count(1)


BACKUP = ("controlplane.spaces.upbound.io", "v1alpha1", "backups")


def unique(prefix: str) -> str:
    """A name no other test of the session uses."""
    return f"{prefix}-{next(_names)}"


def get(kube: Kube, kind: tuple[str, str, str], namespace: str | None, name: str) -> Any:
    """An object of `kind` (group, version, plural), or None."""
    group, version, plural = kind
    return kube.get(plural, namespace, name, group, version)


def hosted_name(platform: Platform, namespace: str, name: str) -> str:
    """The Space ControlPlane of an Instance: its external name, as the provider set it."""
    instance = get(platform.kube, INSTANCE, namespace, name)
    assert instance is not None, f"no Instance {namespace}/{name}"
    external_name: str = instance["metadata"]["annotations"]["crossplane.io/external-name"]
    return external_name


def create(kube: Kube, kind: tuple[str, str, str], obj: dict[str, Any]) -> None:
    """Create an object of `kind`."""
    group, version, plural = kind
    kube.create(plural, obj, group, version)


def is_true(obj: dict[str, Any] | None, type_: str) -> bool:
    """Whether the object's condition `type_` is True."""
    return condition(obj, type_).get("status") == "True"


def configmap(name: str, value: str, namespace: str = "default") -> str:
    """A ConfigMap as YAML text, for a git repository."""
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
        f"data:\n  value: {value}\n"
    )


def configmap_value(
    platform: Platform, hosted: str, name: str, namespace: str = "default"
) -> str | None:
    """data.value of a ConfigMap of a hosted control plane, or None."""
    server = platform.hosted.get(hosted)
    if server is None:
        return None
    kube = Kube(server)
    try:
        found = kube.core.read_namespaced_config_map(name, namespace)
    except Exception:  # noqa: BLE001 (absent, or the server not serving yet: not there yet)
        return None
    return str((found.data or {}).get("value"))


def completed_backup_after(
    platform: Platform, namespace: str, after: float, what: str, timeout: float
) -> dict[str, Any]:
    """The first Completed Backup in ``namespace`` created after ``after`` (epoch seconds)."""
    group, version, plural = BACKUP

    def found() -> dict[str, Any] | None:
        for backup in platform.kube.list_of(plural, namespace, group, version):
            created = calendar.timegm(
                time.strptime(backup["metadata"]["creationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
            )
            if created > after and is_true(backup, "Completed"):
                return dict(backup)
        return None

    backup: dict[str, Any] = wait_for(what, found, timeout=timeout)
    return backup


def wait_ready(
    platform: Platform,
    kind: tuple[str, str, str],
    namespace: str,
    name: str,
    timeout: float = UP_DEADLINE,
) -> Any:
    """The object once it is Ready, or a failure showing its last status."""
    last: list[Any] = [None]

    def ready() -> Any:
        last[0] = get(platform.kube, kind, namespace, name)
        return last[0] if is_true(last[0], "Ready") else None

    try:
        return wait_for(f"{kind[2]} {namespace}/{name} Ready", ready, timeout=timeout)
    except AssertionError as error:
        status = (last[0] or {}).get("status")
        raise AssertionError(f"{error}; its last status: {status}") from None


@dataclass
class Team:
    """A team's namespace, git repository and ControlPlane, applied and Ready."""

    namespace: str
    name: str
    repository: Repository
    first_commit: str
    composite: dict[str, Any]
    hosted: str
    """The Space ControlPlane's name, and the key of its hosted API server."""


def bare(namespace: str, name: str, **spec: Any) -> dict[str, Any]:
    """A ControlPlane with only what `spec` says."""
    return {
        "apiVersion": "platform.acme.io/v1alpha1",
        "kind": "ControlPlane",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


# Every minute: the first Backup completes within a minute or so of Ready.
BACKUP_SCHEDULE = "* * * * *"


def controlplane(namespace: str, name: str, url: str, **spec: Any) -> dict[str, Any]:
    """A v2 ControlPlane with a git source syncing every 10 s (the contract's minimum)."""
    return {
        "apiVersion": "platform.acme.io/v1alpha1",
        "kind": "ControlPlane",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {
                "url": url,
                "ref": {"branch": "main"},
                "path": "./app",
                "interval": "10s",
                "timeout": "1m",
            },
            **spec,
        },
    }


# What the team's git repository holds first: a namespace of its own and a ConfigMap
# in it (what a backup carries and a restore brings back), and one in `default`.
APP_NAMESPACE = "team-app"


def app_files(value: str) -> dict[str, str]:
    """The git repository's files, with `value` in the ConfigMaps."""
    return {
        "app/namespace.yaml": (
            f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {APP_NAMESPACE}\n"
        ),
        "app/settings.yaml": configmap("settings", value, APP_NAMESPACE),
        "app/greeting.yaml": configmap("greeting", value),
    }


class GoneTimes:
    """Records, from a thread, the wall-clock time each watched object stopped existing.

    Times are per polling round (every 50 ms or so): two objects gone within one
    round get the same time, and ``<=`` is the order a test can assert.

    ``watched`` are objects of the management cluster in ``namespace``; ``in_space``
    are the Space's, by ``(kind, namespace, name)``. ``read_when_gone`` asks a
    question in the round its key's object is found gone, before what follows
    from that (the Space deleting the control plane it could be asked of);
    ``read`` holds the answers.
    """

    def __init__(
        self,
        platform: Platform,
        namespace: str,
        watched: dict[str, tuple[tuple[str, str, str], str]],
        in_space: Mapping[str, tuple[tuple[str, str, str], str, str]] | None = None,
        read_when_gone: Mapping[str, Callable[[], object]] | None = None,
    ) -> None:
        self.platform = platform
        self.namespace = namespace
        self.watched: dict[str, tuple[Kube, tuple[str, str, str], str, str]] = {
            key: (platform.kube, kind, namespace, name) for key, (kind, name) in watched.items()
        }
        for key, (kind, space_namespace, name) in (in_space or {}).items():
            self.watched[key] = (platform.space, kind, space_namespace, name)
        self.gone: dict[str, float] = {}
        self._read_when_gone = dict(read_when_gone or {})
        self.read: dict[str, object] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> GoneTimes:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(0.05) and len(self.gone) < len(self.watched):
            # One time per round, taken after every object was last seen: objects found
            # gone in the same round are not ordered by the order they were looked at in.
            now = time.time()
            for key, (kube, kind, namespace, name) in self.watched.items():
                if key not in self.gone and get(kube, kind, namespace, name) is None:
                    self.gone[key] = now
                    if key in self._read_when_gone:
                        self.read[key] = self._read_when_gone[key]()


_SAMPLE = re.compile(r"^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})? ([0-9.eE+-]+)$", re.MULTILINE)


def metric_total(port: int, metric: str, **labels: str) -> float:
    """The sum of a Prometheus metric's samples (served on loopback ``port``) with ``labels``."""
    no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with no_proxy.open(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    found = 0.0
    for sample, label_text, value in _SAMPLE.findall(text):
        present = dict(re.findall(r'(\w+)="([^"]*)"', label_text))
        if sample == metric and all(present.get(k) == v for k, v in labels.items()):
            found += float(value)
    return found


def unresponsive(seen: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Responsive conditions among ``seen`` that were not True (none at all is fine)."""
    return [c for c in seen if c.get("status") != "True"]


class ResponsiveThroughout:
    """Records, from a watch, every Responsive condition a composite shows while it lives.

    Crossplane core's circuit breaker sets ``Responsive=False`` (``WatchCircuitOpen``)
    on a composite whose watch events emptied its bucket; a check read once, when
    Ready, misses a breaker that opened and closed in between. This reads every
    version of the composite the API server sends, up to its deletion (an object
    being deleted is let through core's breaker uncharged, so deletion is not held
    to it), and ``assert_responsive`` fails naming each False condition seen.
    """

    def __init__(self, platform: Platform, kind: tuple[str, str, str], namespace: str, name: str):
        self.kube, self.kind, self.namespace, self.name = platform.kube, kind, namespace, name
        self.seen: list[dict[str, Any]] = []
        self.versions = 0
        # The client's watch is untyped; it is read as the dicts it yields.
        self._watch: Any = watch.Watch()  # type: ignore[no-untyped-call]
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._stopping = threading.Event()

    def __enter__(self) -> ResponsiveThroughout:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        self._watch.stop()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        # A watch the server ends (its timeout, a restart: "Response ended
        # prematurely") is watched again from the last version seen, so no
        # version between goes unread.
        while not self._stopping.is_set():
            try:
                self._read()
            except urllib3.exceptions.ProtocolError:
                continue

    def _read(self) -> None:
        group, version, plural = self.kind
        since = self._watch.resource_version
        for event in self._watch.stream(
            self.kube.custom.list_namespaced_custom_object,
            group,
            version,
            self.namespace,
            plural,
            field_selector=f"metadata.name={self.name}",
            **({"resource_version": since} if since else {}),
        ):
            found = event["object"]
            if found.get("metadata", {}).get("deletionTimestamp"):
                continue
            self.versions += 1
            self.seen += [
                c
                for c in found.get("status", {}).get("conditions", [])
                if c["type"] == "Responsive"
            ]

    def assert_responsive(self) -> None:
        assert self.versions, f"no version of {self.namespace}/{self.name} was watched"
        assert not unresponsive(self.seen), unresponsive(self.seen)
