"""Answers to requests the function has answered before.

Crossplane sends the same request again at every poll while nothing changes;
composing is a pure function of the request (no clock, no I/O), so the answer
to a request seen before is the answer composing would give now, its TTL
included, and entries never go stale: they only make room for newer ones.
The key is the whole request but its tag (Crossplane's own name for the
request, which the answer echoes), so a request that differs in anything else,
an observed resourceVersion say, is composed afresh.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable

from crossplane.function.proto.v1 import run_function_pb2 as fnv1

# What an entry costs beside its answer: the key, the dict slot, the objects.
ENTRY_OVERHEAD_BYTES = 200


class ResponseCache:
    """At most ``max_entries`` answers and ``max_bytes`` of them, least recently used out first.

    Not thread-safe: the SDK's asyncio server calls it from its one event loop.
    """

    def __init__(self, max_entries: int, max_bytes: int) -> None:
        """An empty cache with these bounds."""
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._answers: OrderedDict[bytes, bytes] = OrderedDict()
        self.size_bytes = 0

    def __len__(self) -> int:
        """The number of answers held."""
        return len(self._answers)

    def answer(
        self,
        req: fnv1.RunFunctionRequest,
        run: Callable[[fnv1.RunFunctionRequest], fnv1.RunFunctionResponse],
    ) -> fnv1.RunFunctionResponse:
        """The cached answer to ``req`` with its tag, or ``run(req)``, kept unless it is Fatal.

        A Fatal answer is not kept: it may come from an unexpected error rather
        than from the request, and bad input fails early and cheaply anyway.
        """
        key = _key(req)
        cached = self._answers.get(key)
        if cached is not None:
            self._answers.move_to_end(key)
            hit: fnv1.RunFunctionResponse = fnv1.RunFunctionResponse.FromString(cached)
            hit.meta.tag = req.meta.tag
            return hit
        rsp = run(req)
        if not any(result.severity == fnv1.SEVERITY_FATAL for result in rsp.results):
            self._keep(key, rsp.SerializeToString())
        return rsp

    def _keep(self, key: bytes, answer: bytes) -> None:
        cost = len(answer) + ENTRY_OVERHEAD_BYTES
        if self.max_entries < 1 or cost > self.max_bytes:
            return
        self._answers[key] = answer
        self.size_bytes += cost
        while len(self._answers) > self.max_entries or self.size_bytes > self.max_bytes:
            _, dropped = self._answers.popitem(last=False)
            self.size_bytes -= len(dropped) + ENTRY_OVERHEAD_BYTES


def _key(req: fnv1.RunFunctionRequest) -> bytes:
    """A digest of the whole request but its tag, independent of map order.

    The tag is blanked for the encoding and put back, rather than the request
    copied: a copy of a large request costs more than its encoding.
    """
    tag = req.meta.tag
    req.meta.tag = ""
    try:
        encoded = req.SerializeToString(deterministic=True)
    finally:
        req.meta.tag = tag
    return hashlib.blake2b(encoded, digest_size=32).digest()
