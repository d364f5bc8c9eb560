"""Real servers for tests: the function's gRPC server as its console script runs it."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc

from sandbox.apiserver import free_port

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
