"""RunFunction latency and throughput of our function beside a no-op function (the floor).

Both are served over real gRPC by the SDK's runtime, each in its own process,
and called by the same client with the same requests: the fullest example
(``examples/restore``: source, backup, restore, every composed resource
observed ready). Six rows:

- the floor: a no-op SDK function, given distinct requests;
- ours as it serves by default, with no cache, given distinct requests: each
  call carries a resourceVersion never sent before;
- ours with its response cache (``--cache-entries 4096``), given the same kind
  of distinct requests: every call misses, and pays for looking;
- the same server given one request again and again, only its tag differing,
  as Crossplane repeats a request while nothing changes: every call hits;
- each half of our work alone (``bench.partial_function``): reading and
  composing without writing the answer, and writing a stored answer without
  reading or composing. A goal one half misses alone is out of reach of any
  change to the other.

Each round measures every row at one stream (p50/p90/p99 latency) and at
``--streams`` concurrent streams on one channel (calls/s), in a rotating order
so that the rows share the machine's noise; the table gives the median of the
rounds.

    .venv/bin/python -m bench.function_latency [--rounds 5] [--calls 1000] [--streams 16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function.cli import _input
from function.render import request
from sandbox.apiserver import free_port

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "restore"
METHOD = "/apiextensions.fn.proto.v1.FunctionRunnerService/RunFunction"
WARMUP_CALLS = 300
# Fixed-width markers in the serialized request: replacing them with other
# values of the same width gives a new valid request without re-encoding it.
RESOURCE_VERSION_MARK = b"rv-0000000000"
TAG_MARK = b"tag-0000000000"


def function_input() -> dict[str, Any]:
    text = (ROOT / "compositions" / "controlplane.yaml").read_text()
    return _input(list(yaml.safe_load_all(text)))


def fullest_request(example: Path = EXAMPLE) -> fnv1.RunFunctionRequest:
    """The example's composite with every composed resource observed ready."""
    xr = yaml.safe_load((example / "xr.yaml").read_text())
    observed_dir = example / "observed" / "ready"
    seen = [yaml.safe_load(p.read_text()) for p in sorted(observed_dir.glob("*.yaml"))]
    return request(xr, function_input(), seen)


class Requests:
    """Serialized requests: distinct ones (a new resourceVersion each) or one repeated."""

    def __init__(self, example: Path) -> None:
        req = fullest_request(example)
        req.meta.tag = TAG_MARK.decode()
        metadata = req.observed.resources["instance"].resource["metadata"]
        metadata["resourceVersion"] = RESOURCE_VERSION_MARK.decode()
        self.template = req.SerializeToString()
        for mark in (RESOURCE_VERSION_MARK, TAG_MARK):
            assert self.template.count(mark) == 1, mark
        self.observed = len(req.observed.resources)
        self._serial = itertools.count(1)

    def batch(self, count: int, *, distinct: bool) -> list[bytes]:
        """``count`` requests, each with its own tag; distinct ones never sent before."""
        same = self._mark(RESOURCE_VERSION_MARK, 0)
        out = []
        for _ in range(count):
            serial = next(self._serial)
            version = self._mark(RESOURCE_VERSION_MARK, serial) if distinct else same
            body = self.template.replace(RESOURCE_VERSION_MARK, version)
            out.append(body.replace(TAG_MARK, self._mark(TAG_MARK, serial)))
        return out

    @staticmethod
    def _mark(mark: bytes, serial: int) -> bytes:
        prefix = mark.rstrip(b"0")
        return prefix + str(serial).zfill(len(mark) - len(prefix)).encode()


@dataclass(frozen=True)
class Server:
    """A function server in its own process."""

    address: str
    pid: int

    def cpu_seconds(self) -> float:
        """CPU time the process has used so far, user and system (Linux)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def served(*command: str) -> Iterator[Server]:
    """Run ``command`` with a free loopback address as its last argument."""
    address = f"127.0.0.1:{free_port()}"
    # Run from the root: bench/platform.py would shadow the standard library's
    # platform module if bench/ were a script's folder.
    process = subprocess.Popen([*command, address], cwd=ROOT)
    try:
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=30)
        yield Server(address, process.pid)
    finally:
        process.terminate()
        process.wait(timeout=10)


def one_stream(address: str, requests: list[bytes]) -> list[float]:
    """Seconds per call, one call at a time."""
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            METHOD, response_deserializer=fnv1.RunFunctionResponse.FromString
        )
        times = []
        for body in requests:
            start = time.perf_counter()
            call(body, timeout=10)
            times.append(time.perf_counter() - start)
    return times


def many_streams(address: str, requests: list[bytes], streams: int) -> float:
    """Calls per second with ``streams`` calls in flight on one channel."""

    async def run() -> float:
        async with grpc.aio.insecure_channel(address) as channel:
            call = channel.unary_unary(
                METHOD, response_deserializer=fnv1.RunFunctionResponse.FromString
            )
            pending = iter(requests)

            async def worker() -> None:
                for body in pending:
                    await call(body, timeout=10)

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(streams)))
            return len(requests) / (time.perf_counter() - start)

    return asyncio.run(run())


@dataclass
class Row:
    """One server and kind of request, with its figures from every round."""

    name: str
    server: Server
    distinct: bool
    p50: list[float] = field(default_factory=list)
    p90: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    per_s: list[float] = field(default_factory=list)
    cpu_ms: list[float] = field(default_factory=list)

    def measure(self, requests: Requests, calls: int, stream_calls: int, streams: int) -> None:
        """One round: latency at one stream, then calls/s and server CPU at ``streams``."""
        batch = requests.batch(calls, distinct=self.distinct)
        times = sorted(one_stream(self.server.address, batch))
        self.p50.append(_quantile(times, 0.50) * 1000)
        self.p90.append(_quantile(times, 0.90) * 1000)
        self.p99.append(_quantile(times, 0.99) * 1000)
        burst = requests.batch(stream_calls, distinct=self.distinct)
        cpu = self.server.cpu_seconds()
        self.per_s.append(many_streams(self.server.address, burst, streams))
        self.cpu_ms.append((self.server.cpu_seconds() - cpu) / stream_calls * 1000)


def _quantile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=1000, help="calls per round at one stream")
    parser.add_argument(
        "--stream-calls", type=int, default=3000, help="calls per round at --streams"
    )
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--example", default=EXAMPLE.name)
    args = parser.parse_args()
    requests = Requests(ROOT / "examples" / args.example)
    ours = [str(Path(sys.executable).with_name("function-controlplane")), "serve", "--insecure"]
    halves = [sys.executable, "-m", "bench.partial_function"]
    with (
        served(sys.executable, "-m", "bench.noop_function") as floor,
        served(*ours, "--address") as uncached,
        served(*ours, "--cache-entries", "4096", "--address") as cached,
        served(*halves, "read-compose") as read_compose,
        served(*halves, "write") as write,
    ):
        rows = [
            Row("no-op function (floor)", floor, distinct=True),
            Row("ours, no cache", uncached, distinct=True),
            Row("ours, cache: misses", cached, distinct=True),
            Row("ours, cache: hits", cached, distinct=False),
            Row("half: read, compose", read_compose, distinct=True),
            Row("half: write the answer", write, distinct=True),
        ]
        for row in rows:
            one_stream(row.server.address, requests.batch(WARMUP_CALLS, distinct=row.distinct))
        for round_ in range(args.rounds):
            for row in rows[round_ % len(rows) :] + rows[: round_ % len(rows)]:
                row.measure(requests, args.calls, args.stream_calls, args.streams)
    _print(rows, requests, args)


def _print(rows: list[Row], requests: Requests, args: argparse.Namespace) -> None:
    median = statistics.median
    print(
        f"RunFunction, examples/{args.example} ({requests.observed} observed resources, "
        f"{len(requests.template)} B request); median of {args.rounds} rounds of "
        f"{args.calls} calls at 1 stream and {args.stream_calls} calls at {args.streams} streams"
    )
    print(
        f"{'server':<26}{'p50 ms':>8}{'p90 ms':>8}{'p99 ms':>8}"
        f"{f'calls/s @{args.streams}':>15}{'CPU ms/call':>13}{'p50 range':>12}"
    )
    for row in rows:
        spread = f"{min(row.p50):.2f}-{max(row.p50):.2f}"
        print(
            f"{row.name:<26}{median(row.p50):>8.2f}{median(row.p90):>8.2f}"
            f"{median(row.p99):>8.2f}{median(row.per_s):>15.0f}{median(row.cpu_ms):>13.3f}"
            f"{spread:>12}"
        )
    floor = rows[0]
    for row in rows[1:]:
        # Per round, so that both sides of each comparison saw the same noise.
        added = median(o - f for o, f in zip(row.p50, floor.p50, strict=True))
        share = median(o / f for o, f in zip(row.per_s, floor.per_s, strict=True))
        print(
            f"{row.name}: p50 {added:+.2f} ms over the floor (goal: at most +0.50), "
            f"{share:.0%} of its calls/s (goal: at least 60%)"
        )


if __name__ == "__main__":
    main()
