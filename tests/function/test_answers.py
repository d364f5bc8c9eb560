"""The function's answers, byte for byte, stay those recorded in answers.sha256.

Work on the function's speed must not change one byte of what it answers. Each
case is a request built from an example (every observed state of it, and none),
in a few shapes; its answer is serialized deterministically and compared with
the digest recorded when the answers were last meant to change. When a change
of answers is intended, record the new ones with
``UPDATE_ANSWERS=1 .venv/bin/pytest tests/function/test_answers.py`` and
review the diff of answers.sha256 with the change.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from function import fn
from function.cli import _input
from function.render import fetched, request

ROOT = Path(__file__).resolve().parents[2]
RECORDED = Path(__file__).with_name("answers.sha256")
KUBECONFIG = b"apiVersion: v1\nkind: Config\n"


def _composition_input(path: str) -> dict[str, Any]:
    return _input(list(yaml.safe_load_all((ROOT / path).read_text())))


def _as_requested(req: fnv1.RunFunctionRequest) -> None:
    """The request as it is built: no earlier step, no connection details."""


def _after_an_earlier_step(req: fnv1.RunFunctionRequest) -> None:
    """An earlier step left a desired composite with a status of its own and ours."""
    req.desired.composite.resource.update(
        {"apiVersion": "x/v1", "status": {"keep": 1, "instance": {"old": True}}, "spec": {"n": 3}}
    )


def _with_connection_details(req: fnv1.RunFunctionRequest) -> None:
    """Every observed resource carries a kubeconfig connection detail."""
    for seen in req.observed.resources.values():
        seen.connection_details["kubeconfig"] = KUBECONFIG


SHAPES: dict[str, Callable[[fnv1.RunFunctionRequest], None]] = {
    "as requested": _as_requested,
    "after an earlier step": _after_an_earlier_step,
    "with connection details": _with_connection_details,
}
INPUTS = {
    "v2 input": "compositions/controlplane.yaml",
    "legacy input": "compositions/legacy/xcontrolplane.yaml",
    "no input": None,
}


@dataclass(frozen=True)
class Case:
    name: str
    request: fnv1.RunFunctionRequest


def _cases() -> Iterator[Case]:
    for example in sorted(p for p in (ROOT / "examples").iterdir() if (p / "xr.yaml").exists()):
        xr = yaml.safe_load((example / "xr.yaml").read_text())
        states: dict[str, list[dict[str, Any]]] = {"nothing observed": []}
        for folder in sorted((example / "observed").iterdir()):
            files = sorted(folder.glob("*.yaml"))
            states[f"{folder.name} observed"] = [yaml.safe_load(f.read_text()) for f in files]
        # The resources the function may ask for, passed as Crossplane passes them
        # once asked (spec.restore.fromControlPlane's Backups).
        available = [
            doc
            for path in sorted((example / "required").glob("*.yaml"))
            for doc in yaml.safe_load_all(path.read_text())
            if doc
        ]
        for state, seen in states.items():
            for input_name, path in INPUTS.items():
                function_input = _composition_input(path) if path else None
                asked = fn.run(request(xr, function_input, seen)).requirements
                required = fetched(asked, available) if available else None
                for shape_name, shape in SHAPES.items():
                    name = f"{example.name}, {state}, {input_name}, {shape_name}"
                    req = request(xr, function_input, seen, required)
                    req.meta.tag = name
                    shape(req)
                    yield Case(name, req)


CASES = list(_cases())


def _digest(req: fnv1.RunFunctionRequest) -> str:
    answer = fn.run(req).SerializeToString(deterministic=True)
    return hashlib.sha256(answer).hexdigest()


def _recorded() -> dict[str, str]:
    pairs = (line.split("  ", 1) for line in RECORDED.read_text().splitlines())
    return {name: digest for digest, name in pairs}


def test_every_case_has_a_recorded_answer_and_every_recorded_answer_a_case() -> None:
    if os.environ.get("UPDATE_ANSWERS"):
        lines = [f"{_digest(case.request)}  {case.name}" for case in CASES]
        RECORDED.write_text("".join(f"{line}\n" for line in lines))
    assert sorted(_recorded()) == sorted(case.name for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_answer_is_byte_for_byte_the_recorded_one(case: Case) -> None:
    assert _digest(case.request) == _recorded()[case.name]
