"""The plan is honest: what Flux applies and prunes after a push is what the plan said.

One ControlPlane, Crossplane core running in its hosted control plane, one
stage (packages) synced first. Then two pushes, each planned live from a
clone of the team's repository before it is pushed, as a pull request's CI
would (``controlplane-plan`` through the management cluster and the
ControlPlane's connection secret), then pushed and waited for:

1. a new stage (config) with the ControlPlane's change, planned from the
   proposed ControlPlane's file: a package that installs a kind the new stage
   uses, an object of a kind already served, variables from the platform and
   from ``substituteFrom``, and a SOPS Secret;
2. a changed object, a removed object (pruned) and a re-encrypted Secret,
   planned from the ControlPlane the management cluster holds (by name).

Flux's own account of each revision is kustomize-controller's log: per
Kustomization and revision, "server-side apply completed" with every object
(created, configured or unchanged) and "garbage collection completed" with
what it deleted. The plan's create / change / unchanged / delete must be that,
object for object, in every stage.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from plan import cli
from sandbox.hosted import HostedControlPlane
from sandbox.paths import TOOLS_BIN
from sandbox.platform import Platform
from sandbox.spaces import condition, wait_for
from tests.fixtures.packages import CONFIGURATION

from .helpers import UP_DEADLINE, XR, bare, create, get, hosted_name, unique, wait_ready
from .sops import AGE_KEY_NAME, AgeKey, age_key, encrypt
from .test_staged_sync import (
    CORE_DEADLINE,
    HOSTED_NAMESPACE,
    MEMO_API_VERSION,
    NOTE_API_VERSION,
    composite_of,
    configuration,
    memo_package,
)

BUILD_TOOL = TOOLS_BIN / "controlplane-plan-build"
TEAM_VARIABLES = "team-vars"
DECRYPTION_SECRET = "sops-age"
# Flux's actions in its change sets, and the plan's word for each.
FLUX_ACTIONS = {"created": "create", "configured": "change", "unchanged": "unchanged"}


@dataclass
class Clone:
    """A team's clone of its repository: commits are planned here before they are pushed."""

    path: Path

    def git(self, *args: str) -> str:
        done = subprocess.run(
            [
                "git",
                "-C",
                str(self.path),
                "-c",
                "user.email=team@example.org",
                "-c",
                "user.name=team",
                *args,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    def commit(self, files: dict[str, str], message: str) -> str:
        """Replace the tree with ``files`` and commit it locally; the sha (not pushed yet)."""
        self.git("rm", "-r", "--quiet", "--ignore-unmatch", ".")
        for name, text in files.items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.git("add", "--all")
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def push(self) -> None:
        self.git("push", "--quiet", "origin", "HEAD:refs/heads/main")


@dataclass
class Team:
    platform: Platform
    namespace: str
    name: str
    clone: Clone
    plane: HostedControlPlane
    key: AgeKey
    notes: str
    memos: str
    workdir: Path

    @property
    def composite(self) -> dict[str, Any]:
        found = get(self.platform.kube, XR, self.namespace, self.name)
        assert found is not None
        return dict(found)

    def plan(self, proposed: dict[str, Any] | None, base: str, head: str) -> dict[str, Any]:
        """``controlplane-plan`` live, from base to head; its JSON.

        Of the proposed ControlPlane (a file), or with None of the one in the
        management cluster (by ``NAMESPACE/NAME``).
        """
        controlplane = f"{self.namespace}/{self.name}"
        if proposed is not None:
            path = self.workdir / f"controlplane-{head[:8]}.yaml"
            path.write_text(yaml.safe_dump(proposed))
            controlplane = str(path)
        result = CliRunner().invoke(
            cli.main,
            [
                "--controlplane",
                controlplane,
                "--management-kubeconfig",
                str(self.platform.kubeconfig),
                "--repo",
                str(self.clone.path),
                "--base",
                base,
                "--head",
                head,
                "--build-tool",
                str(BUILD_TOOL),
                "-o",
                "json",
            ],
        )
        assert result.exit_code in {0, 2}, result.output
        document: dict[str, Any] = json.loads(result.stdout)
        return document

    def synced_at(self, sha: str) -> dict[str, Any] | None:
        composite = self.composite
        source = (composite.get("status") or {}).get("source") or {}
        synced = condition(composite, "SourceSynced")
        done = synced.get("status") == "True" and source.get("revision") == f"main@sha1:{sha}"
        return synced if done else None


def planned(document: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The plan's action for each object, by stage's Kustomization, as Flux names objects."""
    found: dict[str, dict[str, str]] = {}
    for stage in document["stages"]:
        assert not stage["error"], stage["error"]
        found[stage["kustomization"]] = {
            subject(change["kind"], change["namespace"], change["name"]): change["action"]
            for change in stage["changes"]
        }
    return found


def subject(kind: str, namespace: str, name: str) -> str:
    """An object as Flux's change sets name it (ssa's FmtObjMetadata)."""
    return f"{kind}/{namespace}/{name}" if namespace else f"{kind}/{name}"


def applied(
    log: Path, namespace: str, kustomizations: list[str], sha: str
) -> dict[str, dict[str, str]]:
    """What kustomize-controller did at revision ``sha``, by Kustomization, from its log.

    Every "server-side apply completed" at that revision, the first action that
    was not "unchanged" winning (a retried reconcile lists as unchanged what an
    earlier one created); and every "garbage collection completed" of the same
    reconciles.
    """
    revision = f"main@sha1:{sha}"
    found: dict[str, dict[str, str]] = {name: {} for name in kustomizations}
    reconciles: dict[str, str] = {}
    for line in log.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        owner = entry.get("Kustomization") or {}
        name = owner.get("name")
        if owner.get("namespace") != namespace or name not in found:
            continue
        message = str(entry.get("msg", ""))
        if message == "server-side apply completed" and entry.get("revision") == revision:
            reconciles[str(entry.get("reconcileID"))] = name
            for key, action in (entry.get("output") or {}).items():
                if found[name].get(key, "unchanged") == "unchanged":
                    found[name][key] = FLUX_ACTIONS[action]
        elif (
            message.startswith("garbage collection completed: ")
            and reconciles.get(str(entry.get("reconcileID"))) == name
        ):
            for item in message.removeprefix("garbage collection completed: ").splitlines():
                key, _, action = item.rpartition(" ")
                if action == "deleted":
                    found[name][key] = "delete"
    return found


def repository(
    team: Team, *, memos: bool, note: bool, greeting: str, password: str
) -> dict[str, str]:
    files = {"packages/notes.yaml": configuration("notes", team.notes)}
    if not memos:
        return files
    files["packages/memos.yaml"] = configuration("memos", team.memos)
    files["config/memo.yaml"] = composite_of(MEMO_API_VERSION, "Memo", "first")
    if note:
        files["config/note.yaml"] = composite_of(NOTE_API_VERSION, "Note", "first")
    files["config/variables.yaml"] = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "variables", "namespace": HOSTED_NAMESPACE},
            "data": {
                "controlplane": "${CONTROLPLANE_NAME}",
                "greeting": greeting,
                "team": "${TEAM}",
            },
        }
    )
    files["config/credentials.sops.yaml"] = encrypt(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "credentials", "namespace": HOSTED_NAMESPACE},
                "stringData": {"password": password},
            }
        ),
        team.key.recipient,
        team.workdir,
    )
    return files


def source(url: str, *, staged: bool) -> dict[str, Any]:
    stages: list[dict[str, Any]] = [{"name": "packages", "path": "./packages", "timeout": "1m"}]
    extra: dict[str, Any] = {}
    if staged:
        stages.append({"name": "config", "path": "./config", "dependsOn": ["packages"]})
        extra = {
            "substituteFrom": [{"kind": "ConfigMap", "name": TEAM_VARIABLES}],
            "decryption": {"secretRef": {"name": DECRYPTION_SECRET}},
        }
    return {
        "url": url,
        "ref": {"branch": "main"},
        "interval": "10s",
        "timeout": "2m",
        "stages": stages,
        **extra,
    }


@pytest.fixture(scope="module")
def team(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Team]:
    """A ControlPlane with core in its control plane and one stage synced: the packages."""
    if not BUILD_TOOL.is_file():
        pytest.skip(f"{BUILD_TOOL} is not built: run tools/build.sh plan_build")
    namespace, name = unique("plan"), "ctp"
    workdir = tmp_path_factory.mktemp("plan")
    repository_ = platform.git.repository(namespace)
    platform.kube.namespace(namespace)
    platform.kube.core.create_namespaced_config_map(
        namespace, {"metadata": {"name": TEAM_VARIABLES}, "data": {"TEAM": "team-a"}}
    )
    key = age_key(workdir)
    platform.kube.put_secret(namespace, DECRYPTION_SECRET, {AGE_KEY_NAME: key.identity.encode()})
    create(platform.kube, XR, bare(namespace, name))
    wait_ready(platform, XR, namespace, name, timeout=UP_DEADLINE)
    plane = platform.crossplane_in(hosted_name(platform, namespace, name))
    wait_for("Crossplane core in the hosted control plane", plane.crossplane_running, CORE_DEADLINE)
    clone = Clone(workdir / "clone")
    subprocess.run(["git", "clone", "--quiet", str(repository_.bare), str(clone.path)], check=True)
    team = Team(
        platform,
        namespace,
        name,
        clone,
        plane,
        key,
        platform.registry.push(CONFIGURATION),
        platform.registry.push(memo_package(workdir / "memo")),
        workdir,
    )
    sha = clone.commit(
        repository(team, memos=False, note=False, greeting="", password=""), "packages"
    )
    clone.push()
    platform.kube.patch(
        XR[2],
        namespace,
        name,
        {"spec": {"source": source(repository_.url, staged=False)}},
        XR[0],
        XR[1],
    )
    wait_for("the packages stage synced", lambda: team.synced_at(sha), UP_DEADLINE)
    yield team


def push_and_compare(
    team: Team, proposed: dict[str, Any] | None, base: str, head: str
) -> dict[str, dict[str, str]]:
    """Plan, push (and apply the ControlPlane's change, if any), wait for Flux; the plan."""
    said = planned(team.plan(proposed, base, head))
    team.clone.push()
    if proposed is not None:
        team.platform.kube.patch(
            XR[2], team.namespace, team.name, {"spec": proposed["spec"]}, XR[0], XR[1]
        )
    wait_for(f"SourceSynced True at {head[:8]}", lambda: team.synced_at(head), UP_DEADLINE)
    log = team.platform.workdir / "flux" / "kustomize-controller.log"
    done = applied(log, team.namespace, list(said), head)
    assert done == said, f"Flux did {done}\nthe plan said {said}"
    return said


def proposal(team: Team, *, staged: bool) -> dict[str, Any]:
    composite = team.composite
    spec = dict(composite["spec"])
    spec["source"] = source(spec["source"]["url"], staged=staged)
    return {**composite, "spec": spec}


def test_a_new_stage_a_package_its_kind_and_a_sops_secret_are_applied_as_planned(
    team: Team,
) -> None:
    base = team.clone.git("rev-parse", "HEAD")
    head = team.clone.commit(
        repository(
            team, memos=True, note=True, greeting="hello", password=secrets.token_urlsafe(12)
        ),
        "a new stage",
    )

    said = push_and_compare(team, proposal(team, staged=True), base, head)

    stages = list(said)
    assert said[stages[0]] == {
        "Configuration/notes": "unchanged",
        "Configuration/memos": "create",
    }
    assert said[stages[1]] == {
        f"Memo/{HOSTED_NAMESPACE}/first": "create",
        f"Note/{HOSTED_NAMESPACE}/first": "create",
        f"ConfigMap/{HOSTED_NAMESPACE}/variables": "create",
        f"Secret/{HOSTED_NAMESPACE}/credentials": "create",
    }


def test_a_changed_object_a_removed_one_and_a_new_ciphertext_are_applied_and_pruned_as_planned(
    team: Team,
) -> None:
    base = team.clone.git("rev-parse", "HEAD")
    password = secrets.token_urlsafe(12)
    head = team.clone.commit(
        repository(team, memos=True, note=False, greeting="changed", password=password),
        "change, remove",
    )

    # The ControlPlane does not change: planned as the management cluster holds it.
    said = push_and_compare(team, None, base, head)

    config = said[list(said)[1]]
    assert config == {
        f"Memo/{HOSTED_NAMESPACE}/first": "unchanged",
        f"ConfigMap/{HOSTED_NAMESPACE}/variables": "change",
        f"Secret/{HOSTED_NAMESPACE}/credentials": "change",
        f"Note/{HOSTED_NAMESPACE}/first": "delete",
    }
    assert password not in json.dumps(team.plan(None, base, head))
