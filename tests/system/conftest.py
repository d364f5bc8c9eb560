"""One whole platform per session for the system tests, and its logs in every failure."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator

import pytest

from sandbox.launcher import ImageLauncher, Launcher, VirtualenvLauncher
from sandbox.paths import TOOLS_BIN
from sandbox.platform import Platform
from tests.images.conftest import IMAGES_DIR, fail_if_stale

from .helpers import (
    BACKUP_SCHEDULE,
    CLAIM,
    XR,
    Team,
    app_files,
    controlplane,
    create,
    hosted_name,
    unique,
    wait_ready,
)

# Everything the platform runs that tools/build.sh builds.
REQUIRED_TOOLS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
    "crossplane",
    "crossplane-core",
    "crane",
    "source-controller",
    "kustomize-controller",
    "sops",
    "age-keygen",
    "helm",
    "prometheus",
)

# `venv` runs our programs from the development venv instead of the built images.
LAUNCHER_VARIABLE = "SYSTEM_TESTS_FROM"

_PLATFORM: list[Platform] = []
# Namespaces whose composites every module shares: the session's team.
_SESSION_NAMESPACES: set[str] = set()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test here `system`, so `pytest -m system` runs them alone."""
    for item in items:
        if "tests/system/" in str(item.fspath):
            item.add_marker(pytest.mark.system)


def skip_unless_built() -> None:
    """Skip the test when a tool the platform runs has not been built."""
    missing = [tool for tool in REQUIRED_TOOLS if not (TOOLS_BIN / tool).is_file()]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)}: run tools/build.sh")


def launcher() -> Launcher:
    """What ships: the images `make images` built, unless SYSTEM_TESTS_FROM=venv.

    Skips when the images are not built, fails when they are older than the tree.
    """
    if os.environ.get(LAUNCHER_VARIABLE) == "venv":
        return VirtualenvLauncher()
    images = ImageLauncher(IMAGES_DIR)
    try:
        images.check()
    except (FileNotFoundError, PermissionError) as error:
        pytest.skip(f"{error} (or {LAUNCHER_VARIABLE}=venv to run the development venv's)")
    fail_if_stale()
    return images


@pytest.fixture(scope="session")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    """The whole platform, started once for the session, running our images."""
    skip_unless_built()
    platform = Platform(tmp_path_factory.mktemp("platform"), launcher())
    # Registered before it starts, so a failed start reports every log too.
    _PLATFORM.append(platform)
    try:
        with platform:
            yield platform
    finally:
        _PLATFORM.remove(platform)


@pytest.fixture(scope="session")
def team(platform: Platform) -> Team:
    """One team's ControlPlane with a git source and backups, applied and Ready.

    Shared by the scenarios that follow it: a push, its backups, a restore of them.
    """
    namespace, name = unique("team"), "ctp"
    _SESSION_NAMESPACES.add(namespace)
    repository = platform.git.repository(namespace)
    sha = repository.commit(app_files("first"), "first")
    platform.kube.namespace(namespace)
    create(
        platform.kube,
        XR,
        controlplane(namespace, name, repository.url, backup={"schedule": BACKUP_SCHEDULE}),
    )
    composite = wait_ready(platform, XR, namespace, name)
    return Team(namespace, name, repository, sha, composite, hosted_name(platform, namespace, name))


def _composites(platform: Platform) -> set[tuple[tuple[str, str, str], str, str]]:
    """Every ControlPlane composite and legacy claim, by kind, namespace and name."""
    found = set()
    for kind in (XR, CLAIM):
        group, version, plural = kind
        listed = platform.kube.custom.list_cluster_custom_object(group, version, plural)
        found |= {
            (kind, item["metadata"]["namespace"], item["metadata"]["name"])
            for item in listed["items"]
        }
    return found


@pytest.fixture(scope="module", autouse=True)
def composites_deleted_after_the_module(platform: Platform) -> Iterator[None]:
    """Delete, without waiting, what a module made and left, as a team leaving would.

    The Space then stops each control plane; otherwise every control plane the
    suite made would serve, and its core reconcile, until the session ends.
    """
    before = _composites(platform)
    yield
    for kind, namespace, name in _composites(platform) - before:
        if namespace not in _SESSION_NAMESPACES:
            group, version, plural = kind
            platform.kube.delete(plural, namespace, name, group, version)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Add the tail of every platform process's log to a failed system test's report."""
    report = yield
    if report.failed and _PLATFORM:
        report.sections.append(("platform logs", _PLATFORM[0].logs()))
    return report
