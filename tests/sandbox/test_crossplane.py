"""sandbox.crossplane's pure parts: which of core's CRDs are not Established yet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from sandbox.crossplane import core_crd_names, unestablished


def crd(name: str, *conditions: tuple[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": t, "status": s} for t, s in conditions]},
    }


@dataclass
class UnestablishedCase:
    reason: str
    crds: list[dict[str, Any]]
    expected: set[str]


EXPECTED = ("a.pkg.crossplane.io", "b.pkg.crossplane.io")
UNESTABLISHED = [
    UnestablishedCase(
        "both Established: nothing missing",
        [crd(EXPECTED[0], ("Established", "True")), crd(EXPECTED[1], ("Established", "True"))],
        set(),
    ),
    UnestablishedCase(
        "one not created yet",
        [crd(EXPECTED[0], ("Established", "True"))],
        {EXPECTED[1]},
    ),
    UnestablishedCase(
        "one created but its names not accepted yet",
        [
            crd(EXPECTED[0], ("Established", "True")),
            crd(EXPECTED[1], ("NamesAccepted", "True"), ("Established", "False")),
        ],
        {EXPECTED[1]},
    ),
    UnestablishedCase(
        "one with no status yet",
        [crd(EXPECTED[0], ("Established", "True")), {"metadata": {"name": EXPECTED[1]}}],
        {EXPECTED[1]},
    ),
    UnestablishedCase(
        "other CRDs do not count",
        [crd("other.example.org", ("Established", "True"))],
        set(EXPECTED),
    ),
]


@pytest.mark.parametrize("case", UNESTABLISHED, ids=lambda case: case.reason)
def test_unestablished_names_the_expected_crds_not_established(case: UnestablishedCase) -> None:
    assert unestablished(EXPECTED, case.crds) == case.expected, case.reason


def test_core_crd_names_are_the_crds_core_installs(tmp_path: Any) -> None:
    (tmp_path / "locks.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata:\n  name: locks.pkg.crossplane.io\n"
    )
    (tmp_path / "usages.yaml").write_text(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n"
        "metadata:\n  name: usages.protection.crossplane.io\n"
    )
    assert core_crd_names(tmp_path) == {
        "locks.pkg.crossplane.io",
        "usages.protection.crossplane.io",
    }
