"""Our function doing only half of its work, served as ours is: where the floor's share goes.

Two halves, each answering as the no-op function does unless it writes:

- ``read-compose``: reads the observed state and composes, then answers with
  the request's own desired state: what composing costs before any Struct is
  written, whatever writes the answer afterwards;
- ``write``: writes an outcome composed once at start-up (the fullest
  example's) into every response, reading nothing: what writing the answer's
  Structs costs, whatever composes it beforehand.

If either half alone stays below a goal, no change to the other half can meet it.

    .venv/bin/python -m bench.partial_function {read-compose|write} ADDRESS
"""

from __future__ import annotations

import gc
import sys

import grpc
from crossplane.function import response, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from bench.function_latency import fullest_request
from function import fn
from function.compose import Outcome, compose


class ReadComposeRunner(grpcv1.FunctionRunnerServiceServicer):
    """Composes every request and answers with its own desired state."""

    async def RunFunction(  # noqa: N802 (gRPC's method name)
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        rsp: fnv1.RunFunctionResponse = response.to(req)
        compose(fn.observed(req), fn._input(req))
        return rsp


class WriteRunner(grpcv1.FunctionRunnerServiceServicer):
    """Writes one stored outcome into every response."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    async def RunFunction(  # noqa: N802 (gRPC's method name)
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        rsp: fnv1.RunFunctionResponse = response.to(req)
        fn.apply(self.outcome, rsp)
        return rsp


def _runner(part: str) -> grpcv1.FunctionRunnerServiceServicer:
    if part == "read-compose":
        return ReadComposeRunner()
    req = fullest_request()
    return WriteRunner(compose(fn.observed(req), fn._input(req)))


if __name__ == "__main__":
    runner = _runner(sys.argv[1])
    gc.freeze()  # as our server does
    runtime.serve(runner, sys.argv[2], creds=None, insecure=True)
