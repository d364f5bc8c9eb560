"""The gRPC edge: adapts RunFunction requests to ``compose`` and back.

The function never raises to gRPC: bad input is a Fatal result naming the
field and the rule, and an unexpected error is a Fatal result too (logged
without the request, which may carry secrets).
"""

from __future__ import annotations

import functools
import traceback

import grpc
from crossplane.function import logging, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from crossplane.function.proto.v1 import run_function_pb2_grpc as grpcv1
from google.protobuf import struct_pb2

from function import structs
from function.cache import ResponseCache
from function.compose import Outcome, compose
from function.model import Input, InvalidError, parse_input
from function.observed import Observed, Resource

_STATUS = {
    "True": fnv1.STATUS_CONDITION_TRUE,
    "False": fnv1.STATUS_CONDITION_FALSE,
    "Unknown": fnv1.STATUS_CONDITION_UNKNOWN,
}


class FunctionRunner(grpcv1.FunctionRunnerServiceServicer):
    """The FunctionRunnerService Crossplane calls."""

    def __init__(self, cache: ResponseCache | None = None) -> None:
        """Answer every request afresh, or from ``cache`` when it was answered before."""
        self.cache = cache

    async def RunFunction(  # noqa: N802 (gRPC's method name)
        self, req: fnv1.RunFunctionRequest, _: grpc.aio.ServicerContext
    ) -> fnv1.RunFunctionResponse:
        """Compose the request's composite."""
        if self.cache is None:
            return run(req)
        return self.cache.answer(req, run)


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
    # The composed resources are read lazily, and their connection details
    # stay protobuf maps: compose reads a few fields of each, and copying a
    # map into a dict costs more than the view of the whole resource. The map
    # is walked by key: its items() is a Python generator (the Mapping mixin's).
    seen = req.observed.resources
    resources = {}
    for name in seen:
        one = seen[name]
        resources[name] = Resource(
            body=structs.StructView(one.resource), connection_details=one.connection_details
        )
    # The resources Crossplane fetched for an earlier answer's requirements; a
    # requirement that matched nothing is there, with no items.
    required = {
        name: tuple(structs.to_dict(item.resource) for item in req.required_resources[name].items)
        for name in req.required_resources
    }
    return Observed(
        composite=structs.to_dict(req.observed.composite.resource),
        resources=resources,
        required=required,
    )


def _input(req: fnv1.RunFunctionRequest) -> Input | None:
    """The parsed function input, or None when the request carries none.

    Raises:
        InvalidError: the input breaks a rule.
    """
    if not req.HasField("input"):
        return None
    return _parsed_input(req.input.SerializeToString(deterministic=True))


# Every composite of a Composition shares its input, so it is parsed once per
# distinct input (keyed on its deterministic encoding) rather than per request.
# An input that fails to parse raises, and lru_cache keeps no exceptions.
@functools.lru_cache(maxsize=16)
def _parsed_input(serialized: bytes) -> Input:
    return parse_input(structs.to_dict(struct_pb2.Struct.FromString(serialized)))


def apply(outcome: Outcome, rsp: fnv1.RunFunctionResponse) -> None:
    """Write an outcome into a response that already carries the pipeline's desired state."""
    resources = rsp.desired.resources
    for name, desired in outcome.resources.items():
        target = resources[name]
        structs.fill(target.resource, desired.body)
        target.ready = fnv1.READY_TRUE if desired.ready else fnv1.READY_FALSE
    # Only the composite's status changes: merge into it and leave the rest of
    # the pipeline's desired composite as it is, unconverted.
    composite = rsp.desired.composite.resource.fields
    previous = composite.get("status")
    status = structs.to_python(previous) if previous is not None else None
    structs.fill_value(composite["status"], {**(status or {}), **outcome.status})
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
    if outcome.held_back:
        rsp.desired.composite.ready = fnv1.READY_FALSE
    for requirement in outcome.requirements:
        response.require_resources(
            rsp,
            requirement.name,
            requirement.api_version,
            requirement.kind,
            match_labels=dict(requirement.match_labels),
            namespace=requirement.namespace,
        )
    rsp.meta.ttl.FromTimedelta(outcome.ttl)
