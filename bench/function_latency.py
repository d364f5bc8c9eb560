"""RunFunction latency and throughput of our function beside a no-op function.

Both are served over real gRPC by the SDK's runtime, each in its own process,
and called with the same request: the fullest example (source, backup, restore,
every composed resource observed ready).

    .venv/bin/python -m bench.function_latency [--calls N] [--concurrency C]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function import structs
from function.cli import _input
from function.compose import compose
from function.observed import Observed, Resource
from function.render import request
from sandbox.apiserver import free_port
from tests.servers import function_server

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "restore"
WARMUP_CALLS = 200


def function_input() -> dict[str, Any]:
    text = (ROOT / "compositions" / "controlplane.yaml").read_text()
    return _input(list(yaml.safe_load_all(text)))


def fullest_request() -> fnv1.RunFunctionRequest:
    xr = yaml.safe_load((EXAMPLE / "xr.yaml").read_text())
    observed_dir = EXAMPLE / "observed" / "ready"
    seen = [yaml.safe_load(p.read_text()) for p in sorted(observed_dir.glob("*.yaml"))]
    return request(xr, function_input(), seen)


@contextlib.contextmanager
def noop_server() -> Iterator[str]:
    address = f"127.0.0.1:{free_port()}"
    script = Path(__file__).with_name("noop_function.py")
    process = subprocess.Popen([sys.executable, str(script), address])
    try:
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
        yield address
    finally:
        process.terminate()
        process.wait(timeout=10)


def measure(
    address: str, req: fnv1.RunFunctionRequest, calls: int, concurrency: int
) -> dict[str, float]:
    with grpc.insecure_channel(address) as channel:
        stub = grpcv1.FunctionRunnerServiceStub(channel)  # type: ignore[no-untyped-call]
        for _ in range(WARMUP_CALLS):
            stub.RunFunction(req, timeout=10)

        def one(_: int) -> float:
            start = time.perf_counter()
            stub.RunFunction(req, timeout=10)
            return time.perf_counter() - start

        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            latencies = sorted(pool.map(one, range(calls)))
        elapsed = time.perf_counter() - start
    return {
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[int(len(latencies) * 0.99) - 1] * 1000,
        "per_s": calls / elapsed,
    }


def compose_only(req: fnv1.RunFunctionRequest, calls: int) -> float:
    """Median time of the pure compose step alone, on plain dicts: no gRPC, no protobuf."""
    seen = Observed(
        composite=structs.to_dict(req.observed.composite.resource),
        resources={
            name: Resource(structs.to_dict(item.resource))
            for name, item in req.observed.resources.items()
        },
    )
    raw = function_input()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        compose(seen, raw)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=1)
    args = parser.parse_args()
    req = fullest_request()
    rows = []
    with noop_server() as address:
        rows.append(("no-op function (floor)", measure(address, req, args.calls, args.concurrency)))
    with function_server() as address:
        rows.append(("function-controlplane", measure(address, req, args.calls, args.concurrency)))
    print(
        f"RunFunction, fullest example ({len(req.observed.resources)} observed resources), "
        f"{args.calls} calls, concurrency {args.concurrency}"
    )
    print(f"{'server':<26}{'p50 ms':>9}{'p99 ms':>9}{'calls/s':>10}")
    for name, row in rows:
        print(f"{name:<26}{row['p50_ms']:>9.2f}{row['p99_ms']:>9.2f}{row['per_s']:>10.0f}")
    floor, ours = rows[0][1], rows[1][1]
    added_p50 = ours["p50_ms"] - floor["p50_ms"]
    added_p99 = ours["p99_ms"] - floor["p99_ms"]
    print(f"{'added by composing':<26}{added_p50:>9.2f}{added_p99:>9.2f}")
    print(f"pure compose() alone, p50: {compose_only(req, 500):.3f} ms")


if __name__ == "__main__":
    main()
