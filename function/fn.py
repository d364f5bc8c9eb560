"""The gRPC edge: adapts RunFunction requests to ``compose`` and back.

The function never raises to gRPC: bad input is a Fatal result naming the
field and the rule, and an unexpected error is a Fatal result too (logged
without the request, which may carry secrets).
"""

from __future__ import annotations

import traceback
from typing import Any

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1

from function import structs
from function.compose import Outcome, compose
from function.model import InvalidError
from function.observed import Observed, Resource

_STATUS = {
    "True": fnv1.STATUS_CONDITION_TRUE,
    "False": fnv1.STATUS_CONDITION_FALSE,
    "Unknown": fnv1.STATUS_CONDITION_UNKNOWN,
}


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """The FunctionRunnerService Crossplane calls."""

    async def RunFunction(  # noqa: N802 (gRPC's method name)
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        """Compose the request's composite."""
        return run(req)


def run(req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
    """Answer one request; never raises."""
    rsp: fnv1.RunFunctionResponse = response.to(req)
    try:
        outcome = compose(observed(req), _input(req))
    except InvalidError as error:
        response.fatal(rsp, str(error))
        return rsp
    except Exception as error:  # noqa: BLE001 (the function must answer, whatever happens)
        # The exception's text may quote the request (and so a secret): log
        # only its type and where it was raised.
        frame = traceback.extract_tb(error.__traceback__)[-1]
        logging.get_logger().error(
            "cannot compose",
            tag=req.meta.tag,
            error=type(error).__name__,
            at=f"{frame.filename}:{frame.lineno}",
        )
        response.fatal(rsp, f"internal error while composing: {type(error).__name__}")
        return rsp
    apply(outcome, rsp)
    return rsp


def observed(req: fnv1.RunFunctionRequest) -> Observed:
    """The request's observed composite and composed resources."""
    return Observed(
        composite=structs.to_dict(req.observed.composite.resource),
        resources={
            name: Resource(
                body=structs.StructView(seen.resource),
                connection_details=dict(seen.connection_details),
            )
            for name, seen in req.observed.resources.items()
        },
    )


def _input(req: fnv1.RunFunctionRequest) -> dict[str, Any] | None:
    if not req.HasField("input"):
        return None
    return structs.to_dict(req.input)


def apply(outcome: Outcome, rsp: fnv1.RunFunctionResponse) -> None:
    """Write an outcome into a response that already carries the pipeline's desired state."""
    for name, desired in outcome.resources.items():
        target = rsp.desired.resources[name]
        structs.fill(target.resource, desired.body)
        target.ready = fnv1.READY_TRUE if desired.ready else fnv1.READY_FALSE
    composite = structs.to_dict(rsp.desired.composite.resource)
    composite["status"] = {**(composite.get("status") or {}), **outcome.status}
    structs.fill(rsp.desired.composite.resource, composite)
    for key, value in outcome.connection_details.items():
        rsp.desired.composite.connection_details[key] = value
    for condition in outcome.conditions:
        rsp.conditions.append(
            fnv1.Condition(
                type=condition.type,
                status=_STATUS[condition.status],
                reason=condition.reason,
                message=condition.message,
                target=fnv1.TARGET_COMPOSITE_AND_CLAIM,
            )
        )
    for message in outcome.warnings:
        rsp.results.append(
            fnv1.Result(
                severity=fnv1.SEVERITY_WARNING,
                message=message,
                target=fnv1.TARGET_COMPOSITE_AND_CLAIM,
            )
        )
    rsp.meta.ttl.FromTimedelta(outcome.ttl)
