"""A stage built as kustomize-controller builds it, by ``controlplane-plan-build``.

That program (``tools/plan-build``) is ours, on Flux's own ``fluxcd/pkg``
kustomize and ssa packages at the versions the platform's kustomize-controller
uses: kustomization.yaml generated as the controller generates it, remote
bases refused as ``--no-remote-bases`` refuses them, postBuild substitution
with the controller's strict rules, and SOPS never decrypted. This module only
runs it: one process per stage, the request on stdin, the objects on stdout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from plan.changes import Built

BINARY = "controlplane-plan-build"
BINARY_VARIABLE = "CONTROLPLANE_PLAN_BUILD"
# A stage of thousands of objects builds in about a second; a minute is a hang.
TIMEOUT_SECONDS = 120.0


class BuildError(Exception):
    """The stage does not build; the message is Flux's, as the controller would report it."""


@dataclass(frozen=True)
class Options:
    """How kustomize-controller runs on the platform (its flags and feature gates)."""

    # --no-remote-bases=true: the platform's Flux refuses remote bases.
    allow_remote_bases: bool = False
    # StrictPostBuildSubstitutions: on by default since kustomize-controller v1.9.
    strict_substitutions: bool = True


def find_binary(explicit: str | None = None) -> Path:
    """The build program: ``explicit``, ``$CONTROLPLANE_PLAN_BUILD``, on PATH, or beside Python.

    Raises:
        BuildError: it is nowhere to be found.
    """
    candidates = [explicit, os.environ.get(BINARY_VARIABLE), shutil.which(BINARY)]
    candidates.append(str(Path(sys.executable).parent / BINARY))
    for candidate in candidates:
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return Path(candidate)
    msg = (
        f"{BINARY} is not found: pass --build-tool, set ${BINARY_VARIABLE}, or put it on PATH "
        "(it ships beside the packages in each release; tools/build.sh plan_build builds it)"
    )
    raise BuildError(msg)


def build(
    binary: Path,
    root: Path,
    kustomization: Mapping[str, Any],
    substitute_from: Sequence[Mapping[str, Any]] = (),
    options: Options | None = None,
) -> list[Built]:
    """The objects Flux would apply for ``kustomization`` from the checkout at ``root``.

    ``substitute_from`` are the ConfigMaps and Secrets its ``substituteFrom``
    names, as read from the management cluster (those missing are missing).

    Raises:
        BuildError: the stage does not build, in Flux's words.
    """
    options = options or Options()
    request = {
        "root": str(root),
        "kustomization": kustomization,
        "objects": list(substitute_from),
        "allowRemoteBases": options.allow_remote_bases,
        "strictSubstitutions": options.strict_substitutions,
    }
    try:
        finished = subprocess.run(  # noqa: S603 (our own program, found as find_binary says)
            [str(binary)],
            input=json.dumps(request).encode(),
            capture_output=True,
            timeout=TIMEOUT_SECONDS,
            check=False,
        )
    except subprocess.TimeoutExpired:
        msg = f"the build took longer than {TIMEOUT_SECONDS:.0f} s"
        raise BuildError(msg) from None
    except OSError as error:
        msg = f"cannot run {binary}: {error.strerror}"
        raise BuildError(msg) from None
    try:
        answer = json.loads(finished.stdout)
    except ValueError:
        # Nothing of its stderr is quoted: a Go panic may print the objects it was
        # given, Secrets among them.
        msg = f"{BINARY} failed with exit code {finished.returncode} and no answer"
        raise BuildError(msg) from None
    if finished.returncode != 0 or answer.get("error"):
        raise BuildError(str(answer.get("error") or f"exit code {finished.returncode}"))
    return [
        Built(item["object"], bool(item.get("encrypted")), int(item.get("applyStage", 2)))
        for item in answer.get("objects") or ()
    ]
