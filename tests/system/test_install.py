"""The sandbox installs the platform by docs/install.md's steps, and holds what they make.

tests/deploy/test_install_guide.py holds the guide to `sandbox.install.STEPS`;
here the sandbox's own install is held to them: it applied those steps, in
that order, and its management cluster holds every object each one makes.
"""

from __future__ import annotations

from typing import Any

from kubernetes import dynamic
from kubernetes.dynamic.exceptions import NotFoundError

from sandbox import install
from sandbox.platform import Platform


def test_the_sandbox_applies_the_guides_steps_in_order(platform: Platform) -> None:
    assert platform.installed == [step.name for step in install.STEPS]


def test_the_sandbox_holds_every_object_the_guides_steps_make(platform: Platform) -> None:
    api: Any = dynamic.DynamicClient(platform.kube.api)  # type: ignore[no-untyped-call]
    missing = []
    for step in install.STEPS:
        for ref in install.refs(install.manifests(step)):
            resource = api.resources.get(api_version=ref.api_version, kind=ref.kind)
            try:
                resource.get(name=ref.name, namespace=ref.namespace or None)
            except NotFoundError:
                missing.append(f"{step.name}: {ref}")
    assert missing == []
