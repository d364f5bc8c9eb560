"""Where one RunFunction call's time goes, phase by phase, in-process and without gRPC.

Every call gets a distinct request (its own resourceVersion and tag), as in
``bench.function_latency``. Times are CPU time of this thread (less disturbed
than wall time by other work on a shared machine); the table gives the median
of each phase and of the whole ``fn.run`` with parsing and serializing.

    .venv/bin/python -m bench.function_phases [--calls 3000] [--example restore]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any, TypeVar

from crossplane.function import response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from bench.function_latency import EXAMPLE, ROOT, Requests
from function import fn, model
from function.compose import compose

T = TypeVar("T")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--example", default=EXAMPLE.name)
    args = parser.parse_args()
    blobs = Requests(ROOT / "examples" / args.example).batch(args.calls, distinct=True)
    phases: dict[str, list[float]] = {}

    def timed(name: str, step: Callable[..., T], *args: Any) -> T:
        start = time.thread_time()
        result = step(*args)
        phases.setdefault(name, []).append(time.thread_time() - start)
        return result

    def whole(blob: bytes) -> bytes:
        answer: bytes = fn.run(fnv1.RunFunctionRequest.FromString(blob)).SerializeToString()
        return answer

    for blob in blobs:
        req = timed("parse the request", fnv1.RunFunctionRequest.FromString, blob)
        rsp = timed("response.to (SDK)", response.to, req)
        seen = timed("observed(): views, Ready conditions", fn.observed, req)
        settings = timed("the input (parsed once)", fn._input, req)
        outcome = timed("compose()", compose, seen, settings)
        timed("  of which parse_spec()", model.parse_spec, seen.composite["spec"])
        timed("apply(): fill the response", fn.apply, outcome, rsp)
        timed("serialize the response", rsp.SerializeToString)
        timed("whole: parse, fn.run, serialize", whole, blob)
    print(f"fn.run phases, examples/{args.example}, {args.calls} distinct requests, median")
    for name, times in phases.items():
        print(f"{name:<36}{statistics.median(times) * 1e6:>8.1f} us")


if __name__ == "__main__":
    main()
