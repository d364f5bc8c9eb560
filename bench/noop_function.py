"""A function that composes nothing, served as ours is: the floor set by gRPC and the SDK."""

from __future__ import annotations

import sys

import grpc
from crossplane.function import response, runtime
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1


class NoopRunner(grpcv1.FunctionRunnerServiceServicer):
    """Answers every request with its own desired state."""

    async def RunFunction(  # noqa: N802 (gRPC's method name)
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        rsp: fnv1.RunFunctionResponse = response.to(req)
        return rsp


if __name__ == "__main__":
    runtime.serve(NoopRunner(), sys.argv[1], creds=None, insecure=True)
