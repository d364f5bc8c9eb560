"""The response cache answers a repeated request as composing would, and stays bounded."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn, structs
from function.cache import ENTRY_OVERHEAD_BYTES, ResponseCache
from function.render import request
from tests import builders as b


def _named(name: str, body: dict[str, Any]) -> dict[str, Any]:
    body.setdefault("metadata", {})["annotations"] = {b.COMPOSITION_RESOURCE_NAME: name}
    return body


def _request(
    tag: str = "first", resource_version: str = "1", **spec: Any
) -> fnv1.RunFunctionRequest:
    """The fullest composite, its Instance and Role observed ready."""
    instance = _named("instance", b.ready())
    instance["metadata"]["resourceVersion"] = resource_version
    req = request(
        b.composite({"source": b.SOURCE, "backup": b.BACKUP, **spec}),
        b.example_input(),
        [instance, _named("backup-role", b.role_with_arn())],
    )
    req.meta.tag = tag
    return req


class Counting:
    """fn.run, counting the requests it composes."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        self.calls += 1
        return fn.run(req)


@dataclass(frozen=True)
class RepeatCase:
    reason: str
    second: Callable[[], fnv1.RunFunctionRequest]
    composed_again: bool


def _reversed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _reversed(value[key]) for key in reversed(list(value))}
    if isinstance(value, list):
        return [_reversed(item) for item in value]
    return value


def _reordered() -> fnv1.RunFunctionRequest:
    """The first request with every map, nested ones too, filled in the reverse order."""
    first = _request()
    req = fnv1.RunFunctionRequest()
    req.meta.tag = "first"
    req.observed.composite.resource.update(
        _reversed(structs.to_dict(first.observed.composite.resource))
    )
    for name in reversed(list(first.observed.resources)):
        body = structs.to_dict(first.observed.resources[name].resource)
        req.observed.resources[name].resource.update(_reversed(body))
    req.input.update(_reversed(structs.to_dict(first.input)))
    assert req == first
    return req


def _with_connection_detail() -> fnv1.RunFunctionRequest:
    req = _request()
    req.observed.resources["instance"].connection_details["kubeconfig"] = b"new"
    return req


REPEAT_CASES = [
    RepeatCase(
        "a request that differs only in its tag is answered from the cache",
        lambda: _request(tag="second"),
        composed_again=False,
    ),
    RepeatCase(
        "the same request with its maps in another order is answered from the cache",
        _reordered,
        composed_again=False,
    ),
    RepeatCase(
        "an observed object with a new resourceVersion is composed again",
        lambda: _request(resource_version="2"),
        composed_again=True,
    ),
    RepeatCase(
        "a changed spec is composed again",
        lambda: _request(**{"class": "large"}),
        composed_again=True,
    ),
    RepeatCase(
        "a new observed connection detail is composed again",
        _with_connection_detail,
        composed_again=True,
    ),
]


@pytest.mark.parametrize("case", REPEAT_CASES, ids=lambda case: case.reason)
def test_the_cache_keys_on_the_whole_request_but_its_tag(case: RepeatCase) -> None:
    cache, run = ResponseCache(max_entries=8, max_bytes=1 << 20), Counting()
    cache.answer(_request(), run)
    second = case.second()
    tag = second.meta.tag
    answer = cache.answer(second, run)
    assert run.calls == (2 if case.composed_again else 1), case.reason
    assert answer.meta.tag == tag, "an answer carries the tag of the request it answers"
    fresh = fn.run(second)
    assert answer == fresh, "an answer from the cache is the one composing gives, TTL and all"
    assert fresh.meta.ttl.seconds > 0


def test_a_request_keeps_its_tag_after_its_key_is_taken() -> None:
    cache, req = ResponseCache(max_entries=8, max_bytes=1 << 20), _request(tag="mine")
    cache.answer(req, fn.run)
    assert req.meta.tag == "mine"


def test_the_least_recently_used_answer_makes_room_once_the_entries_are_full() -> None:
    cache, run = ResponseCache(max_entries=2, max_bytes=1 << 20), Counting()
    one, two, three = (_request(resource_version=v) for v in ("1", "2", "3"))
    cache.answer(one, run)
    cache.answer(two, run)
    cache.answer(one, run)  # one is now the most recently used
    cache.answer(three, run)  # so two makes room
    assert (len(cache), run.calls) == (2, 3)
    cache.answer(one, run)
    assert run.calls == 3, "the recently used answer is still held"
    cache.answer(two, run)
    assert run.calls == 4, "the least recently used answer was dropped"


def test_the_answers_held_never_take_more_than_the_byte_bound() -> None:
    size = len(fn.run(_request()).SerializeToString()) + ENTRY_OVERHEAD_BYTES
    cache = ResponseCache(max_entries=100, max_bytes=int(size * 2.5))
    for version in range(10):
        cache.answer(_request(resource_version=str(version)), fn.run)
        assert cache.size_bytes <= cache.max_bytes
    assert len(cache) == 2


def test_an_answer_larger_than_the_whole_bound_is_not_kept() -> None:
    cache, run = ResponseCache(max_entries=100, max_bytes=100), Counting()
    cache.answer(_request(), run)
    cache.answer(_request(), run)
    assert (len(cache), cache.size_bytes, run.calls) == (0, 0, 2)


def test_a_fatal_answer_is_not_kept() -> None:
    cache, run = ResponseCache(max_entries=8, max_bytes=1 << 20), Counting()
    bad = _request(channel="None")
    for _ in range(2):
        answer = cache.answer(bad, run)
        assert [r.severity for r in answer.results] == [fnv1.SEVERITY_FATAL]
    assert (len(cache), run.calls) == (0, 2)
