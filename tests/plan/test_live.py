"""A live plan against a real kube-apiserver: dry-run applies, kinds still to come, prunes.

The API server plays the control plane (and, for the command, the management
cluster too). Every object is dry-run applied as kustomize-controller would;
nothing is written, which the tests check.
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from plan import build, cli, planner, stages
from plan.changes import Built, ObjectId, StagePlan
from plan.live import FIELD_MANAGER, LIST_FROM, ControlPlanes
from provider.kube import Cluster, Resource, kubeconfig_file
from sandbox.apiserver import APIServer

from .conftest import configmap, function_input, staged_composite, write

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
CRDS = Resource(
    "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
)
PASSWORD = "Live-s3cret-99"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def memo_crd(group: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"memos.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": "Memo",
                "plural": "memos",
                "singular": "memo",
                "listKind": "MemoList",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def memo(group: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{group}/v1",
        "kind": "Memo",
        "metadata": {"name": "first", "namespace": namespace},
        "spec": {},
    }


async def applied(server: APIServer, *objects: dict[str, Any]) -> None:
    """Objects as Flux applied them before the push (same field manager, Flux's labels)."""
    cluster = await Cluster.from_kubeconfig(kubeconfig_file(server.kubeconfig_path))
    try:
        for obj in objects:
            resource = {"Namespace": NAMESPACES, "Secret": SECRETS}.get(obj["kind"], CONFIGMAPS)
            await cluster.apply(resource, obj, field_manager=FIELD_MANAGER)
    finally:
        await cluster.close()


async def live_objects(server: APIServer, namespace: str) -> list[dict[str, Any]]:
    cluster = await Cluster.from_kubeconfig(kubeconfig_file(server.kubeconfig_path))
    try:
        found, _ = await cluster.list(CONFIGMAPS, namespace)
        return sorted(
            (item["metadata"]["name"], item["metadata"]["resourceVersion"]) for item in found
        )  # type: ignore[return-value]
    finally:
        await cluster.close()


def owned(obj: dict[str, Any], stage: str = "myctp-config") -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {}).update(
        {
            "kustomize.toolkit.fluxcd.io/name": stage,
            "kustomize.toolkit.fluxcd.io/namespace": "team-a",
        }
    )
    return obj


def plan_live(
    server: APIServer,
    repo: Path,
    build_tool: Path,
    inventories: dict[str, Any] | None = None,
    *,
    service_account: str = "",
) -> tuple[StagePlan, ...]:
    found = stages.render(staged_composite(), function_input())
    if service_account:
        # As a platform whose function renders one would (the plan follows the rendering).
        found = tuple(
            stages.Stage(
                s.name,
                {
                    **s.kustomization,
                    "spec": {**s.kustomization["spec"], "serviceAccountName": service_account},
                },
            )
            for s in found
        )

    def builder(stage: stages.Stage, root: Path) -> list[Built]:
        return build.build(build_tool, root, stage.kustomization)

    async def run() -> tuple[StagePlan, ...]:
        targets = ControlPlanes(kubeconfig_file(server.kubeconfig_path))
        try:
            return await planner.plan_live(
                found, planner.Checkouts(repo), builder, targets, inventories or {}
            )
        finally:
            await targets.close()

    return asyncio.run(run())


def actions(stage: StagePlan) -> dict[str, str]:
    return {change.object.name: change.action for change in stage.changes}


@pytest.fixture
def namespace(apiserver: APIServer) -> Iterator[str]:
    name = unique("plan")
    asyncio.run(
        applied(apiserver, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    )
    yield name


@pytest.mark.parametrize(
    "extra",
    [0, LIST_FROM],
    ids=["each object read by a GET", "many objects of a kind read by one list"],
)
def test_each_object_is_created_changed_or_unchanged_as_the_server_would_apply_it(
    apiserver: APIServer, namespace: str, tmp_path: Path, build_tool: Path, extra: int
) -> None:
    others = [configmap(f"other-{index}", {"a": "1"}, namespace) for index in range(extra)]
    asyncio.run(
        applied(
            apiserver,
            owned(configmap("same", {"a": "1"}, namespace)),
            owned(configmap("changed", {"a": "1"}, namespace)),
            *(owned(dict(other)) for other in others),
            owned(
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "creds", "namespace": namespace},
                    "data": {"password": base64.b64encode(b"old-" + PASSWORD.encode()).decode()},
                }
            ),
        )
    )
    write(
        tmp_path,
        {
            "packages/.keep.yaml": configmap("keep", {"k": "v"}, namespace),
            "config/all.yaml": [
                configmap("same", {"a": "1"}, namespace),
                configmap("changed", {"a": "2"}, namespace),
                configmap("new", {"a": "${CONTROLPLANE_NAME}"}, namespace),
                *(configmap(f"other-{index}", {"a": "1"}, namespace) for index in range(extra)),
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "creds", "namespace": namespace},
                    "stringData": {"password": PASSWORD},
                },
            ],
        },
    )
    before = asyncio.run(live_objects(apiserver, namespace))

    _, config = plan_live(apiserver, tmp_path, build_tool)

    assert not config.error, config.error
    assert actions(config) == {
        "same": "unchanged",
        "changed": "change",
        "new": "create",
        "creds": "change",
        **{f"other-{index}": "unchanged" for index in range(extra)},
    }
    diffs = {change.object.name: change.diff for change in config.changes}
    assert "-  a: '1'" in diffs["changed"] and "+  a: '2'" in diffs["changed"]
    assert "managedFields" not in diffs["changed"] and "resourceVersion" not in diffs["changed"]
    assert "*** (before)" in diffs["creds"] and PASSWORD not in diffs["creds"]
    assert asyncio.run(live_objects(apiserver, namespace)) == before, "a plan writes nothing"


def test_a_kind_an_earlier_stage_defines_is_created_and_one_nothing_defines_is_an_error(
    apiserver: APIServer, namespace: str, tmp_path: Path, build_tool: Path
) -> None:
    group = f"{unique('memos')}.acme.io"
    write(
        tmp_path, {"packages/crd.yaml": memo_crd(group), "config/memo.yaml": memo(group, namespace)}
    )

    packages, config = plan_live(apiserver, tmp_path, build_tool)

    assert actions(packages) == {f"memos.{group}": "create"}
    [change] = config.changes
    assert (change.action, change.object.name) == ("create", "first")
    assert "CustomResourceDefinition of stage packages" in change.note

    write(tmp_path, {"packages/crd.yaml": configmap("keep", {"k": "v"}, namespace)})
    _, refused = plan_live(apiserver, tmp_path, build_tool)
    assert refused.error.startswith(
        f"Memo {namespace}/first: kind Memo of {group}/v1 is not served"
    )
    assert "no earlier stage installs it" in refused.error


def test_objects_in_a_namespace_the_push_creates_are_created(
    apiserver: APIServer, tmp_path: Path, build_tool: Path
) -> None:
    fresh = unique("fresh")
    write(
        tmp_path,
        {
            "packages/ns.yaml": {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": fresh},
            },
            "config/cm.yaml": configmap("inside", {"a": "1"}, fresh),
        },
    )

    packages, config = plan_live(apiserver, tmp_path, build_tool)

    assert actions(packages) == {fresh: "create"}
    assert [(c.action, c.note) for c in config.changes] == [
        ("create", f"namespace {fresh} is created by this push")
    ]


def test_what_the_inventory_holds_and_the_build_drops_is_pruned_unless_flux_would_keep_it(
    apiserver: APIServer, namespace: str, tmp_path: Path, build_tool: Path
) -> None:
    asyncio.run(
        applied(
            apiserver,
            owned(configmap("kept", {"a": "1"}, namespace)),
            owned(configmap("dropped", {"a": "1"}, namespace)),
            owned(
                configmap(
                    "protected",
                    {"a": "1"},
                    namespace,
                    annotations={"kustomize.toolkit.fluxcd.io/prune": "disabled"},
                )
            ),
        )
    )
    write(
        tmp_path,
        {
            "packages/k.yaml": configmap("keep", {"k": "v"}, namespace),
            "config/cm.yaml": configmap("kept", {"a": "1"}, namespace),
        },
    )
    inventory = [
        (ObjectId("", "ConfigMap", namespace, name), "v1")
        for name in ("kept", "dropped", "protected", "already-gone")
    ]

    _, config = plan_live(apiserver, tmp_path, build_tool, {"myctp-config": inventory})

    assert actions(config) == {"kept": "unchanged", "dropped": "delete"}


def test_the_command_plans_live_through_the_connection_secret_and_reads_substitute_from(
    apiserver: APIServer,
    namespace: str,
    tmp_path: Path,
    build_tool: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTROLPLANE_PLAN_BUILD", str(build_tool))
    team_ns = unique("team")
    xr = staged_composite(substituteFrom=[{"kind": "Secret", "name": "team-secrets"}])
    xr["metadata"]["namespace"] = team_ns
    kubeconfig = base64.b64encode(apiserver.kubeconfig.encode()).decode()
    secret_value = base64.b64encode(PASSWORD.encode()).decode()
    asyncio.run(
        applied(
            apiserver,
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team_ns}},
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "myctp-kubeconfig", "namespace": team_ns},
                "data": {"kubeconfig": kubeconfig},
            },
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "team-secrets", "namespace": team_ns},
                "data": {"DB_PASSWORD": secret_value},
            },
        )
    )
    repo = tmp_path / "repo"
    write(
        repo,
        {
            "packages/k.yaml": configmap("keep", {"k": "v"}, namespace),
            "config/cm.yaml": configmap("dsn", {"dsn": "db://u:${DB_PASSWORD}@h"}, namespace),
        },
    )
    (tmp_path / "xr.yaml").write_text(yaml.safe_dump(xr))
    (tmp_path / "input.yaml").write_text(yaml.safe_dump(function_input()))

    result = CliRunner().invoke(
        cli.main,
        [
            "--controlplane",
            str(tmp_path / "xr.yaml"),
            "--function-input",
            str(tmp_path / "input.yaml"),
            "--management-kubeconfig",
            str(apiserver.kubeconfig_path),
            "--repo",
            str(repo),
            "-o",
            "json",
        ],
    )

    assert result.exit_code == 2, result.output
    assert PASSWORD not in result.output
    import json

    document = json.loads(result.stdout)
    assert document["mode"] == "live"
    assert [(s["stage"], s["summary"]["create"], s["error"]) for s in document["stages"]] == [
        ("packages", 1, ""),
        ("config", 1, ""),
    ]


def test_a_stage_is_planned_as_the_service_account_its_kustomization_names(
    apiserver: APIServer, namespace: str, tmp_path: Path, build_tool: Path
) -> None:
    # Flux applies such a stage as system:serviceaccount:<namespace>:<name> in the
    # control plane; with no RBAC for it there, Flux is refused and so is the plan.
    write(
        tmp_path,
        {
            "packages/k.yaml": configmap("keep", {"k": "v"}, namespace),
            "config/cm.yaml": configmap("x", {"a": "1"}, namespace),
        },
    )

    packages, _ = plan_live(apiserver, tmp_path, build_tool, service_account="flux-applier")

    assert "system:serviceaccount:team-a:flux-applier" in packages.error
    assert "forbidden" in packages.error.lower()
