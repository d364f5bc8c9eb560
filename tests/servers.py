"""Real servers for tests: the function's gRPC server as its console script runs it, and a
loopback proxy that shows what a client sent (and may change what it gets back)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from sandbox.apiserver import free_port
from sandbox.awsstandin.loopback import LoopbackServer

STARTUP_DEADLINE_SECONDS = 30.0
STOP_DEADLINE_SECONDS = 10.0


@contextlib.contextmanager
def function_server(*args: str) -> Iterator[str]:
    """Run ``function-controlplane serve --insecure`` on a free port; yield its address."""
    address = f"127.0.0.1:{free_port()}"
    script = Path(sys.executable).with_name("function-controlplane")
    process = subprocess.Popen(
        [str(script), "serve", "--insecure", "--address", address, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        with grpc.insecure_channel(address) as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=STARTUP_DEADLINE_SECONDS)
            except grpc.FutureTimeoutError:
                process.kill()
                output = process.communicate()[0].decode(errors="replace")
                msg = f"function server did not listen on {address}: {output}"
                raise RuntimeError(msg) from None
        yield address
    finally:
        process.terminate()
        try:
            process.wait(timeout=STOP_DEADLINE_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Proxy:
    """A loopback proxy in front of one HTTP server; keeps every request's body."""

    address: str
    bodies: list[bytes] = field(default_factory=list)


# Loopback only: a proxy from the environment never sees these requests.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@contextlib.contextmanager
def proxy(upstream: str, rewrite: Callable[[bytes], bytes] = lambda body: body) -> Iterator[Proxy]:
    """Forward every request to ``upstream`` and its answer back, through ``rewrite``."""

    def answer(
        method: str, path: str, headers: Mapping[str, str], body: bytes
    ) -> tuple[int, str, bytes]:
        seen.bodies.append(body)
        request = urllib.request.Request(
            upstream + path, data=body or None, headers=dict(headers), method=method
        )
        try:
            with _OPENER.open(request, timeout=60) as response:
                status, payload = int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            status, payload = error.code, error.read()
        return status, "text/xml", rewrite(payload)

    server = LoopbackServer(answer, "test-proxy")
    seen = Proxy(server.url)
    server.start()
    try:
        yield seen
    finally:
        server.stop()
