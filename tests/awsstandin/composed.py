"""The S3 and IAM objects our function composes for a composite with backups.

Rendered in-process by the function itself (``function.render``) from the
examples' composites and the repository's compositions, with names made unique
per test and the role trusting a given principal, as the platform team's input
would say. What Crossplane adds (owner references to the composite) is left
out: no composite exists in these tests.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from function import render
from function.cli import FUNCTION_NAME

REPO = Path(__file__).resolve().parents[2]
_V2 = (REPO / "examples/backup-dedicated-bucket/xr.yaml", REPO / "compositions/controlplane.yaml")
_LEGACY = (
    REPO / "examples/legacy-claim/xr.yaml",
    REPO / "compositions/legacy/xcontrolplane.yaml",
)


def _input(composition: Path, trusted_arn: str) -> dict[str, Any]:
    document = yaml.safe_load(composition.read_text())
    for step in document["spec"]["pipeline"]:
        if step["functionRef"]["name"] == FUNCTION_NAME:
            function_input = copy.deepcopy(step["input"])
            function_input["backup"]["trust"] = {"roleArn": trusted_arn}
            return dict(function_input)
    raise AssertionError(f"{composition} has no step of {FUNCTION_NAME}")


def aws_objects(*, legacy: bool, team: str, trusted_arn: str) -> list[dict[str, Any]]:
    """The composed provider-aws objects of a composite of ``team`` (a namespace name)."""
    xr_path, composition = _LEGACY if legacy else _V2
    composite = yaml.safe_load(xr_path.read_text())
    if legacy:
        composite["metadata"]["name"] = f"{team}-x7k2p"
        composite["metadata"]["labels"]["crossplane.io/claim-namespace"] = team
        composite["spec"]["claimRef"]["namespace"] = team
    else:
        composite["metadata"]["namespace"] = team
    rendered = render.render(composite, _input(composition, trusted_arn))
    objects = []
    for item in rendered[1:]:
        if ".aws." not in item["apiVersion"]:
            continue
        item["metadata"].pop("ownerReferences", None)
        objects.append(item)
    return objects
