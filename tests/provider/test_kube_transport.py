"""How provider/kube.py reaches an API server: kept-alive connections, and the proxy it uses."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from provider.kube import NAMESPACES, UNREACHABLE, Cluster, UnreachableError, _proxy_options
from sandbox.apiserver import APIServer

PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy")


def established_connections(port: int) -> int:
    """This process's established TCP connections to ``port`` on loopback."""
    own = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target.startswith("socket:["):
            own.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            columns = line.split()
            remote_port = int(columns[2].rsplit(":", 1)[1], 16)
            if remote_port == port and columns[3] == "01" and columns[9] in own:
                count += 1
    return count


def test_requests_reuse_a_few_kept_alive_connections(apiserver: APIServer) -> None:
    # A restore sends thousands of requests: a TLS handshake each would cost
    # both sides more than the requests themselves.
    in_flight, requests = 4, 60
    port = urlsplit(apiserver.url).port
    assert port is not None

    async def burst() -> int:
        cluster = await Cluster.from_kubeconfig(yaml.safe_load(apiserver.kubeconfig))
        slots = asyncio.Semaphore(in_flight)

        async def one() -> None:
            async with slots:
                assert await cluster.get(NAMESPACES, None, "default") is not None

        try:
            await asyncio.gather(*(one() for _ in range(requests)))
            return established_connections(port)
        finally:
            await cluster.close()

    open_after = asyncio.run(burst())

    assert 1 <= open_after <= in_flight


def test_the_request_hook_hears_each_answer_s_status_and_an_unanswered_request(
    apiserver: APIServer,
) -> None:
    heard: list[tuple[str, str, str]] = []

    def hook(verb: str, resource: str, code: str) -> None:
        heard.append((verb, resource, code))

    async def requests() -> None:
        config = yaml.safe_load(apiserver.kubeconfig)
        cluster = await Cluster.from_kubeconfig(config, on_request=hook)
        try:
            assert await cluster.get(NAMESPACES, None, "default") is not None
            assert await cluster.get(NAMESPACES, None, "no-such-namespace") is None
        finally:
            await cluster.close()
        # The same credentials at a port where nothing listens.
        config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"
        nowhere = await Cluster.from_kubeconfig(config, on_request=hook)
        try:
            with pytest.raises(UnreachableError):
                await nowhere.get(NAMESPACES, None, "default")
        finally:
            await nowhere.close()

    asyncio.run(requests())

    assert heard == [
        ("GET", "namespaces", "200"),
        ("GET", "namespaces", "404"),
        ("GET", "namespaces", UNREACHABLE),
    ]


@dataclass(frozen=True)
class ProxyCase:
    reason: str
    server: str
    configured: str | None
    environment: dict[str, str] = field(default_factory=dict)
    expected: dict[str, object] = field(default_factory=dict)


PROXY_CASES = [
    ProxyCase(
        reason="the kubeconfig's proxy-url wins over the environment's",
        server="https://10.0.0.1:6443",
        configured="http://kubeconfig-proxy:3128",
        environment={"HTTPS_PROXY": "http://env-proxy:3128"},
        expected={"proxy": "http://kubeconfig-proxy:3128", "proxy_headers": None},
    ),
    ProxyCase(
        reason="HTTPS_PROXY is honoured for an https server, as client-go does",
        server="https://10.0.0.1:6443",
        configured=None,
        environment={"HTTPS_PROXY": "http://env-proxy:3128"},
        expected={"proxy": "http://env-proxy:3128"},
    ),
    ProxyCase(
        reason="NO_PROXY naming the server's host bypasses the environment's proxy",
        server="https://10.0.0.1:6443",
        configured=None,
        environment={"HTTPS_PROXY": "http://env-proxy:3128", "NO_PROXY": "10.0.0.1"},
    ),
    ProxyCase(
        reason="with no proxy anywhere the server is reached directly",
        server="https://10.0.0.1:6443",
        configured=None,
    ),
]


@pytest.mark.parametrize("case", PROXY_CASES, ids=lambda c: c.reason)
def test_the_proxy_is_the_kubeconfigs_else_the_environments(
    case: ProxyCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in PROXY_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    for variable, value in case.environment.items():
        monkeypatch.setenv(variable, value)

    assert _proxy_options(case.server, case.configured, None) == case.expected
