"""A team's control plane that answers like no API server would: the Backup fails, bounded.

A hostile HTTPS server on loopback plays the team's control plane: a list whose
continue token never ends, a body far larger than any page, a body that drips
a byte at a time. Each must fail the Backup with a reason naming the limit,
within its deadline, and memory must stay flat whatever the server sends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import http.server
import json
import ssl
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from provider.backup.controllers.backups import BackupReconciler
from provider.backup.source.export import ReadLimits, write_archive
from provider.kube import Cluster, LimitExceededError, ListBounds
from sandbox.apiserver import _PKI
from sandbox.s3 import SeaweedFS
from sandbox.spaces import Kube, condition
from tests.backup.test_roundtrip import (
    BUCKET,
    NAMESPACE,
    Planes,
    backup_object,
    ensure_bucket,
    ensure_default_space,
    fresh_name,
    operator_allows,
    write_connection_secret,
)

MIB: Final = 1024 * 1024
LOOPBACK: Final = "127.0.0.1"
CRDS_PATH: Final = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NAMESPACES_PATH: Final = "/api/v1/namespaces"
# What a client is sent at most before the server gives up on it: far beyond any bound.
SERVER_GIVES_UP_AFTER: Final = 512 * MIB
DRIP_INTERVAL_SECONDS: Final = 0.05

# A CRD no backup holds (not Crossplane's, not owned by it): the client parses and drops it.
FILLER_CRD: Final = {
    "metadata": {"name": "widgets.example.org", "annotations": {"note": "x" * 1024}},
    "spec": {
        "group": "example.org",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget"},
        "versions": [{"name": "v1", "served": True, "storage": True}],
    },
}


def page(items: list[dict[str, Any]], token: str) -> bytes:
    """A list answer with ``items``; ``token`` continues it (empty: the list ends)."""
    metadata = {"resourceVersion": "1", **({"continue": token} if token else {})}
    return json.dumps({"kind": "List", "metadata": metadata, "items": items}).encode()


# How the server answers a GET: (path, query) -> a writer of the body to the socket.
Behaviour = Callable[[str, dict[str, list[str]]], Callable[[Any], None]]


def whole(body: bytes) -> Callable[[Any], None]:
    def write(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return write


def endless_crds(items_per_page: int) -> Behaviour:
    """CRDs with a continue token for ever: the reviewer's server."""
    filler = [FILLER_CRD] * items_per_page

    def answer(path: str, query: dict[str, list[str]]) -> Callable[[Any], None]:
        if path == CRDS_PATH:
            token = str(int((query.get("continue") or ["0"])[0]) + 1)
            return whole(page(filler, token))
        return whole(page([], ""))

    return answer


def endless_namespaces(items_per_page: int) -> Behaviour:
    """No CRDs, and namespaces for ever, each page full."""

    def answer(path: str, query: dict[str, list[str]]) -> Callable[[Any], None]:
        if path == NAMESPACES_PATH:
            start = int((query.get("continue") or ["0"])[0])
            items = [
                {"metadata": {"name": f"ns-{n}"}} for n in range(start, start + items_per_page)
            ]
            return whole(page(items, str(start + items_per_page)))
        return whole(page([], ""))

    return answer


def huge(path: str, query: dict[str, list[str]]) -> Callable[[Any], None]:
    """One list answer that never ends, without a length: read until the client stops."""

    def write(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.end_headers()
        handler.wfile.write(b'{"kind":"List","metadata":{},"items":[')
        chunk = b'{"metadata":{"name":"x"}},' * 4096
        for _ in range(SERVER_GIVES_UP_AFTER // len(chunk)):
            handler.wfile.write(chunk)

    return write


def drip(path: str, query: dict[str, list[str]]) -> Callable[[Any], None]:
    """An answer of a page's size, sent a byte at a time: each byte in time, the whole never."""

    def write(handler: Any) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(MIB))
        handler.end_headers()
        for _ in range(MIB):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(DRIP_INTERVAL_SECONDS)

    return write


@dataclass
class HostileServer:
    """An HTTPS server on loopback answering every GET as ``behaviour`` says."""

    url: str
    kubeconfig: str
    # Bytes written to clients, the sockets' buffers included.
    sent: list[int] = field(default_factory=lambda: [0])


class _Counting:
    """A handler's output stream that adds what it writes to ``sent``."""

    def __init__(self, stream: Any, sent: list[int], lock: threading.Lock) -> None:
        self.stream = stream
        self.sent = sent
        self.lock = lock

    def write(self, data: bytes) -> int:
        written = int(self.stream.write(data))
        with self.lock:
            self.sent[0] += written
        return written

    def __getattr__(self, name: str) -> Any:
        return getattr(self.stream, name)


@contextlib.contextmanager
def hostile_server(behaviour: Behaviour, folder: Path) -> Iterator[HostileServer]:
    pki = _PKI.generate("hostile")
    cert, key = folder / "tls.crt", folder / "tls.key"
    cert.write_bytes(pki.serving_cert)
    key.write_bytes(pki.serving_key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    sent = [0]
    lock = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            self.wfile = _Counting(self.wfile, sent, lock)  # type: ignore[assignment]
            with contextlib.suppress(OSError):
                behaviour(parts.path, parse_qs(parts.query))(self)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet."""

    server = http.server.ThreadingHTTPServer((LOOPBACK, 0), Handler)
    server.daemon_threads = True
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="hostile", daemon=True)
    thread.start()
    url = f"https://{LOOPBACK}:{server.server_address[1]}"
    try:
        yield HostileServer(url, kubeconfig_for(url, pki.ca_cert), sent)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def kubeconfig_for(url: str, ca: bytes) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "team",
                    "cluster": {
                        "server": url,
                        "certificate-authority-data": base64.b64encode(ca).decode(),
                    },
                }
            ],
            "users": [{"name": "team", "user": {"token": "team-token"}}],
            "contexts": [{"name": "team", "context": {"cluster": "team", "user": "team"}}],
            "current-context": "team",
        }
    )


class Discard:
    """A sink that counts and keeps nothing."""

    def __init__(self) -> None:
        self.size = 0

    def write(self, data: bytes) -> int:
        self.size += len(data)
        return len(data)


@dataclass(frozen=True)
class HostileCase:
    reason: str
    behaviour: Behaviour
    limits: ReadLimits
    failure: str
    deadline_seconds: float = 20.0
    # Below what the server streams to the client: memory does not follow it.
    peak_mib: float = 24.0


HOSTILE_CASES = [
    HostileCase(
        "A CRD list whose continue token never ends stops at the pages limit.",
        endless_crds(items_per_page=400),
        ReadLimits(lists=ListBounds(max_pages=100)),
        "TooManyPages",
    ),
    HostileCase(
        "An endless list of objects stops at the objects limit.",
        endless_namespaces(items_per_page=500),
        ReadLimits(lists=ListBounds(max_pages=10_000), max_objects=10_000),
        "TooManyObjects",
    ),
    HostileCase(
        "An answer larger than any page stops at the bytes limit, even at one object a page.",
        huge,
        ReadLimits(lists=ListBounds(max_response_bytes=4 * MIB)),
        "ResponseTooLarge",
    ),
    HostileCase(
        "An answer that drips a byte at a time stops at the Backup's deadline.",
        drip,
        ReadLimits(),
        "DeadlineExceeded",
        deadline_seconds=2.0,
    ),
]


async def backup_with(
    planes: Planes, name: str, endpoint: str, limits: ReadLimits, deadline: float
) -> None:
    cluster = await Cluster.from_kubeconfig(yaml.safe_load(planes.local.server.kubeconfig))
    try:
        reconciler = BackupReconciler(
            cluster, endpoints=operator_allows(endpoint), limits=limits, deadline=deadline
        )
        await reconciler.reconcile(NAMESPACE, name)
    finally:
        await cluster.close()


def team_instance(local: Kube, planes: Planes, name: str, kubeconfig: str) -> None:
    """An Instance whose provider-written connection secret points at ``kubeconfig``'s server."""
    local.namespace(NAMESPACE)
    ensure_default_space(local, planes.source.server)
    instance = local.create(
        "instances",
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Instance",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "forProvider": {"crossplane": {"autoUpgrade": {"channel": "Stable"}}},
                "writeConnectionSecretToRef": {"name": f"{name}-kubeconfig"},
            },
        },
    )
    write_connection_secret(local, instance, kubeconfig)


@pytest.mark.parametrize("case", HOSTILE_CASES, ids=lambda case: case.reason)
def test_a_hostile_control_plane_fails_the_backup_naming_the_limit_in_time(
    case: HostileCase,
    planes: Planes,
    seaweed: SeaweedFS,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    seaweed.configure(monkeypatch)
    ensure_bucket(seaweed, BUCKET)
    instance = fresh_name("hostile")
    name = fresh_name("hostile-backup")
    with hostile_server(case.behaviour, tmp_path) as server:
        team_instance(planes.local, planes, instance, server.kubeconfig)
        planes.local.create(
            "backups", backup_object(name, instance, seaweed.endpoint, f"{NAMESPACE}/{instance}/")
        )
        started = time.monotonic()
        asyncio.run(backup_with(planes, name, seaweed.endpoint, case.limits, case.deadline_seconds))
        took = time.monotonic() - started
    backup = planes.local.get("backups", NAMESPACE, name) or {}
    failed = condition(backup, "Failed")
    assert backup["status"]["phase"] == "Failed", backup["status"]
    assert (failed["status"], failed["reason"]) == ("True", case.failure), failed
    assert "limit" in failed["message"] or "deadline" in failed["message"], failed
    # The reason is final: a hostile server is not asked three times.
    assert int(backup["status"].get("retries") or 0) == 0
    assert took < case.deadline_seconds + 5.0, f"took {took:.1f}s"
    assert seaweed.pending_uploads(BUCKET) == []


@pytest.mark.parametrize(
    "case",
    [c for c in HOSTILE_CASES if c.failure in {"TooManyPages", "ResponseTooLarge"}],
    ids=lambda c: c.reason,
)
def test_memory_stays_flat_whatever_a_hostile_control_plane_sends(
    case: HostileCase, tmp_path: Path
) -> None:
    async def export(url_kubeconfig: str) -> None:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(url_kubeconfig))
        try:
            await write_archive(
                cluster,
                Discard(),
                instance="team-a/hostile",
                exported_at=datetime.now(UTC),
                limits=case.limits,
            )
        finally:
            await cluster.close()

    with hostile_server(case.behaviour, tmp_path) as server:
        tracemalloc.start()
        try:
            with pytest.raises(LimitExceededError) as stopped:
                asyncio.run(export(server.kubeconfig))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        sent = server.sent[0]
    assert stopped.value.reason == case.failure
    assert peak < case.peak_mib * MIB, f"peak {peak / MIB:.1f} MiB"
    # The server sent far more than memory ever held: memory did not follow it.
    assert sent > 2 * case.peak_mib * MIB, f"sent {sent / MIB:.1f} MiB"
