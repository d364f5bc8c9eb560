"""``render``: the function's answer, printed in the shape ``crossplane render`` prints.

It runs the very code the gRPC server runs (``fn.run``) on a request built the
way ``crossplane render`` builds one, then adds the metadata Crossplane adds to
composed resources, so the two outputs can be compared object by object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn

COMPOSITION_RESOURCE_NAME = "crossplane.io/composition-resource-name"
COMPOSITE_LABEL = "crossplane.io/composite"
CLAIM_NAME_LABEL = "crossplane.io/claim-name"
CLAIM_NAMESPACE_LABEL = "crossplane.io/claim-namespace"
RESULT_API_VERSION = "render.crossplane.io/v1beta1"
# crossplane render stamps every condition with this fixed time.
CONDITION_TIME = "2024-01-01T00:00:00Z"
_STATUS_NAMES = {
    fnv1.STATUS_CONDITION_TRUE: "True",
    fnv1.STATUS_CONDITION_FALSE: "False",
}


# As Crossplane: a function is called again while it asks for other resources, at most so often.
MAX_REQUIREMENTS_ITERATIONS = 5


class FatalError(Exception):
    """The function returned a Fatal result."""


def request(
    composite: Mapping[str, Any],
    function_input: Mapping[str, Any] | None,
    observed: Iterable[Mapping[str, Any]] = (),
    required: Mapping[str, Iterable[Mapping[str, Any]]] | None = None,
) -> fnv1.RunFunctionRequest:
    """A RunFunctionRequest as crossplane render sends it (no observed connection details).

    ``required``: the resources fetched for each requirement of an earlier answer.
    """
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(dict(composite))
    for item in observed:
        name = item.get("metadata", {}).get("annotations", {}).get(COMPOSITION_RESOURCE_NAME)
        if name:
            req.observed.resources[name].resource.update(dict(item))
    if function_input is not None:
        req.input.update(dict(function_input))
    for requirement, items in (required or {}).items():
        fetched = req.required_resources[requirement]
        fetched.SetInParent()
        for item in items:
            fetched.items.add().resource.update(dict(item))
    return req


def fetched(
    requirements: fnv1.Requirements, available: Iterable[Mapping[str, Any]]
) -> dict[str, list[Mapping[str, Any]]]:
    """The ``available`` resources each requirement selects, as ``crossplane render`` selects them.

    By apiVersion and kind, then by name or by every label asked for, sorted by
    name; like ``crossplane render`` (its FilteringFetcher), the namespace is not
    looked at.
    """
    pool = sorted(available, key=lambda item: str(item.get("metadata", {}).get("name", "")))
    found: dict[str, list[Mapping[str, Any]]] = {}
    for name, selector in requirements.resources.items():
        matching = [
            item
            for item in pool
            if item.get("apiVersion") == selector.api_version
            and item.get("kind") == selector.kind
            and _selects(selector, item.get("metadata") or {})
        ]
        found[name] = matching[:1] if selector.HasField("match_name") else matching
    return found


def _selects(selector: fnv1.ResourceSelector, metadata: Mapping[str, Any]) -> bool:
    if selector.HasField("match_name"):
        return bool(metadata.get("name") == selector.match_name)
    labels = metadata.get("labels") or {}
    return all(labels.get(key) == value for key, value in selector.match_labels.labels.items())


def answer(
    composite: Mapping[str, Any],
    function_input: Mapping[str, Any] | None,
    observed: Iterable[Mapping[str, Any]] = (),
    required: Iterable[Mapping[str, Any]] = (),
) -> fnv1.RunFunctionResponse:
    """The function's answer, calling it again with what it asks for until it asks for no more.

    Crossplane does the same: the answer kept is the first whose requirements
    are those of the call before it.

    Raises:
        FatalError: the function returned a Fatal result, or kept asking for more.
    """
    observed, available = list(observed), list(required)
    asked = fnv1.Requirements()
    rsp = fn.run(request(composite, function_input, observed))
    for _ in range(MAX_REQUIREMENTS_ITERATIONS):
        fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
        if fatal:
            raise FatalError("; ".join(fatal))
        if rsp.requirements == asked:
            return rsp
        asked = rsp.requirements
        rsp = fn.run(request(composite, function_input, observed, fetched(asked, available)))
    msg = f"the requirements did not settle after {MAX_REQUIREMENTS_ITERATIONS} calls"
    raise FatalError(msg)


def render(
    composite: Mapping[str, Any],
    function_input: Mapping[str, Any] | None,
    observed: Iterable[Mapping[str, Any]] = (),
    *,
    include_full_xr: bool = False,
    results_of_step: str | None = None,
    required: Iterable[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """The composite with its new status, then every composed resource, sorted by name.

    As ``crossplane render`` does, ``include_full_xr`` (its ``-x``) copies the
    composite's own spec and metadata into the first object,
    ``results_of_step`` (its ``-r``) appends the function's non-fatal results as
    ``kind: Result`` objects of that pipeline step, and ``required`` (its
    ``--required-resources``) are the resources the function may ask for.

    Raises:
        FatalError: the function returned a Fatal result.
    """
    observed = list(observed)
    rsp = answer(composite, function_input, observed, required)
    by_name = {
        item["metadata"]["annotations"][COMPOSITION_RESOURCE_NAME]: item
        for item in observed
        if COMPOSITION_RESOURCE_NAME in item.get("metadata", {}).get("annotations", {})
    }
    composed = [
        _composed(name, _struct(desired.resource), composite, by_name.get(name))
        for name, desired in sorted(rsp.desired.resources.items())
    ]
    unready = sorted(
        name for name, desired in rsp.desired.resources.items() if desired.ready != fnv1.READY_TRUE
    )
    xr = _composite(composite, rsp, unready)
    if include_full_xr:
        xr["spec"] = dict(composite.get("spec") or {})
        xr["metadata"] = dict(composite["metadata"])
    results = [_result(results_of_step, r) for r in rsp.results] if results_of_step else []
    return [xr, *composed, *results]


def _result(step: str, result: fnv1.Result) -> dict[str, Any]:
    """A non-fatal result the way ``crossplane render -r`` prints it."""
    return {
        "apiVersion": RESULT_API_VERSION,
        "kind": "Result",
        "step": step,
        "severity": fnv1.Severity.Name(result.severity),
        "message": result.message,
    }


def _struct(struct: Any) -> dict[str, Any]:
    """A protobuf Struct as a dict, whole numbers as ints, the way protojson prints them."""

    def whole(value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, dict):
            return {key: whole(item) for key, item in value.items()}
        if isinstance(value, list):
            return [whole(item) for item in value]
        return value

    result: dict[str, Any] = whole(resource.struct_to_dict(struct))
    return result


def _composite(
    composite: Mapping[str, Any], rsp: fnv1.RunFunctionResponse, unready: list[str]
) -> dict[str, Any]:
    metadata = composite["metadata"]
    out = _struct(rsp.desired.composite.resource)
    out["apiVersion"] = composite["apiVersion"]
    out["kind"] = composite["kind"]
    out["metadata"] = {"name": metadata["name"]}
    if metadata.get("namespace"):
        out["metadata"]["namespace"] = metadata["namespace"]
    ready: dict[str, Any] = {"type": "Ready", "status": "True", "reason": "Available"}
    if rsp.desired.composite.ready == fnv1.READY_FALSE:
        ready = {"type": "Ready", "status": "False", "reason": "Creating"}
    elif unready:
        ready = {
            "type": "Ready",
            "status": "False",
            "reason": "Creating",
            "message": f"Unready resources: {_some_names(unready)}",
        }
    conditions = [ready] + [
        {
            "type": c.type,
            "status": _STATUS_NAMES.get(c.status, "Unknown"),
            "reason": c.reason,
            **({"message": c.message} if c.message else {}),
        }
        for c in rsp.conditions
    ]
    out.setdefault("status", {})["conditions"] = [
        {**c, "lastTransitionTime": CONDITION_TIME} for c in conditions
    ]
    return out


def _some_names(names: list[str], first: int = 3) -> str:
    """crossplane-runtime's StableNAndSomeMore."""
    if len(names) > first:
        return f"{', '.join(names[:first])}, and {len(names) - first} more"
    if len(names) == first:
        return f"{', '.join(names[: first - 1])}, and {names[-1]}"
    return ", ".join(names)


def _composed(
    name: str,
    body: dict[str, Any],
    composite: Mapping[str, Any],
    seen: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """Add the metadata Crossplane derives from the composite."""
    xr_meta = composite["metadata"]
    metadata = body.setdefault("metadata", {})
    if seen is not None:
        for key in ("name", "namespace", "generateName"):
            if seen["metadata"].get(key):
                metadata[key] = seen["metadata"][key]
    if not metadata.get("name") and not metadata.get("generateName"):
        metadata["generateName"] = f"{xr_meta['name']}-"
    if xr_meta.get("namespace"):
        metadata["namespace"] = xr_meta["namespace"]
    metadata.setdefault("annotations", {})[COMPOSITION_RESOURCE_NAME] = name
    labels = metadata.setdefault("labels", {})
    xr_labels = xr_meta.get("labels") or {}
    labels[COMPOSITE_LABEL] = xr_labels.get(COMPOSITE_LABEL) or xr_meta["name"]
    claim = composite.get("spec", {}).get("claimRef") or {}
    if xr_labels.get(CLAIM_NAME_LABEL) and xr_labels.get(CLAIM_NAMESPACE_LABEL):
        labels[CLAIM_NAME_LABEL] = xr_labels[CLAIM_NAME_LABEL]
        labels[CLAIM_NAMESPACE_LABEL] = xr_labels[CLAIM_NAMESPACE_LABEL]
    elif claim:
        labels[CLAIM_NAME_LABEL] = claim.get("name", "")
        labels[CLAIM_NAMESPACE_LABEL] = claim.get("namespace", "")
    metadata["ownerReferences"] = [
        {
            "apiVersion": composite["apiVersion"],
            "kind": composite["kind"],
            "name": xr_meta["name"],
            "uid": xr_meta.get("uid", ""),
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return body
