"""A team's Crossplane configuration synced by real Flux into a hosted control plane running core.

One ControlPlane, with backups (for the bucket's variable) and Crossplane core
started in its hosted control plane before any source is set, goes through
the issue's scenarios in order, each from the state the previous one left:

1. one path holding a Configuration and a Note (a kind its XRD defines) never
   syncs, and Flux's "no matches for kind" is the composite's message;
2. the same content in two stages syncs once the decryption key exists:
   variables filled in, a SOPS Secret decrypted, the Note applied only after
   the Configuration is Healthy;
3. a push adding a Configuration that cannot install keeps the sync False,
   naming the package, and the second stage does not apply that revision,
   where Flux's own health rules would call the first stage Ready;
4. the fix to the first stage is applied, installed and healthy before the
   second stage applies an object of the kind the fixed package defines.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox.git import Repository
from sandbox.hosted import HostedControlPlane
from sandbox.platform import Platform
from sandbox.registry import Package
from sandbox.spaces import condition, wait_for
from tests.fixtures.packages import CONFIGURATION

from .helpers import (
    KUSTOMIZATION,
    SYNC_DEADLINE,
    UP_DEADLINE,
    XR,
    bare,
    create,
    get,
    hosted_name,
    unique,
    wait_ready,
)
from .sops import AGE_KEY_NAME, AgeKey, age_key, encrypt

NOTE_API_VERSION = "fixture.acme.io/v1alpha1"
MEMO_GROUP = "memos.acme.io"
MEMO_API_VERSION = f"{MEMO_GROUP}/v1alpha1"
PKG_API_VERSION = "pkg.crossplane.io/v1"
HOSTED_NAMESPACE = "default"
# The team's own variable, from a ConfigMap in the composite's namespace.
TEAM_VARIABLES = "team-vars"
TEAM_GREETING = "hello from the team"
# The key Secret the sync decrypts with; absent until the scenario creates it.
DECRYPTION_SECRET = "sops-age"
# Long enough for a Configuration without dependencies to install on two busy
# cores (Flux retries every interval when it does not), short enough that a
# package that never installs fails the stage within the scenario.
PACKAGES_TIMEOUT = "30s"
# Never within the test: no Backup runs, the bucket's name is all it needs.
NEVER_SCHEDULE = "0 0 1 1 *"
# Core's first start in a hosted control plane on a loaded two-core machine.
CORE_DEADLINE = 240.0
# How long the composite's status may take to follow Flux (and Flux a health
# check's timeout). Composing a ControlPlane opens Crossplane's watch circuit
# breaker on it (Responsive False) for core's 5 minute cooldown, in which core
# drops the events between one every 30 s (crossplane/crossplane#7703): a change
# dropped so shows at core's next poll of the composite.
STATUS_DEADLINE = UP_DEADLINE


def configuration(name: str, reference: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": PKG_API_VERSION,
            "kind": "Configuration",
            "metadata": {"name": name},
            "spec": {"package": reference},
        }
    )


def composite_of(api_version: str, kind: str, name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {"name": name, "namespace": HOSTED_NAMESPACE},
            "spec": {},
        }
    )


def memo_package(root: Path) -> Package:
    """A second Configuration, defining the Memo kind: what the first stage's push adds."""
    root.mkdir(parents=True)
    (root / "crossplane.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "meta.pkg.crossplane.io/v1",
                "kind": "Configuration",
                "metadata": {"name": "configuration-memo"},
                "spec": {"crossplane": {"version": ">=v2.0.0"}},
            }
        )
    )
    (root / "xrd.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "apiextensions.crossplane.io/v2",
                "kind": "CompositeResourceDefinition",
                "metadata": {"name": f"memos.{MEMO_GROUP}"},
                "spec": {
                    "group": MEMO_GROUP,
                    "names": {"kind": "Memo", "plural": "memos"},
                    "scope": "Namespaced",
                    "versions": [
                        {
                            "name": "v1alpha1",
                            "served": True,
                            "referenceable": True,
                            "schema": {
                                "openAPIV3Schema": {
                                    "type": "object",
                                    "properties": {"spec": {"type": "object"}},
                                }
                            },
                        }
                    ],
                },
            }
        )
    )
    return Package(root, "configuration-memo")


@dataclass
class Staged:
    """The scenarios' shared state: the team, its hosted control plane, its keys and packages."""

    platform: Platform
    namespace: str
    name: str
    repository: Repository
    plane: HostedControlPlane
    key: AgeKey
    password: str
    notes_reference: str
    memo_reference: str
    registry_host: str
    commits: list[str]
    workdir: Path
    """Where the fixtures are made (sops reads the plain Secret from a file)."""

    @property
    def composite(self) -> dict[str, Any]:
        found = get(self.platform.kube, XR, self.namespace, self.name)
        assert found is not None, f"no ControlPlane {self.namespace}/{self.name}"
        return dict(found)

    def synced(self) -> dict[str, Any]:
        return condition(self.composite, "SourceSynced")

    def kustomization(self, stage: str) -> dict[str, Any]:
        found = get(self.platform.kube, KUSTOMIZATION, self.namespace, f"{self.name}-{stage}")
        assert found is not None, f"no Kustomization for stage {stage}"
        return dict(found)

    def hosted(self, plural: str, name: str, group_version: str) -> dict[str, Any] | None:
        group, _, version = group_version.rpartition("/")
        namespace = None if group == "pkg.crossplane.io" else HOSTED_NAMESPACE
        return self.plane.kube.get(plural, namespace, name, group, version)

    def credentials(self) -> list[str]:
        """Every credential the platform holds for this team: none may reach a status."""
        secret = self.platform.kube.secret(self.namespace, f"{self.name}-kubeconfig")
        assert secret is not None
        kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
        found = [self.password, self.key.identity.splitlines()[-1]]
        for user in kubeconfig.get("users") or []:
            found.extend(_strings(user.get("user") or {}))
        return [value for value in found if len(value) >= 8]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def repository_files(staged: Staged, memos: str | None) -> dict[str, str]:
    """The team's repository: the one-path layout under all/, the staged one beside it.

    ``memos`` is the reference of the Memo Configuration the first stage adds, if any.
    """
    notes = configuration("notes", staged.notes_reference)
    note = composite_of(NOTE_API_VERSION, "Note", "first")
    variables = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "platform-variables", "namespace": HOSTED_NAMESPACE},
            "data": {
                "controlplane": "${CONTROLPLANE_NAME}",
                "namespace": "${CONTROLPLANE_NAMESPACE}",
                "bucket": "${BACKUP_BUCKET}",
                "greeting": "${TEAM_GREETING}",
            },
        }
    )
    secret = encrypt(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "team-credentials", "namespace": HOSTED_NAMESPACE},
                "stringData": {"password": staged.password},
            }
        ),
        staged.key.recipient,
        staged.workdir,
    )
    files = {
        "all/configuration.yaml": notes,
        "all/note.yaml": note,
        "packages/notes.yaml": notes,
        "config/note.yaml": note,
        "config/variables.yaml": variables,
        "config/credentials.sops.yaml": secret,
    }
    if memos is not None:
        files["packages/memos.yaml"] = configuration("memos", memos)
        files["config/memo.yaml"] = composite_of(MEMO_API_VERSION, "Memo", "first")
    return files


def one_path_source(url: str) -> dict[str, Any]:
    return {
        "url": url,
        "ref": {"branch": "main"},
        "path": "./all",
        "interval": "10s",
        "timeout": PACKAGES_TIMEOUT,
    }


def staged_source(url: str) -> dict[str, Any]:
    return {
        "url": url,
        "ref": {"branch": "main"},
        "path": None,
        "interval": "10s",
        "timeout": "1m",
        "stages": [
            {"name": "packages", "path": "./packages", "timeout": PACKAGES_TIMEOUT},
            {"name": "config", "path": "./config", "dependsOn": ["packages"]},
        ],
        "substituteFrom": [{"kind": "ConfigMap", "name": TEAM_VARIABLES}],
        "decryption": {"secretRef": {"name": DECRYPTION_SECRET}},
    }


@pytest.fixture(scope="module")
def staged(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Staged:
    """A Ready ControlPlane with backups and no source yet, core running in its control plane."""
    namespace, name = unique("staged"), "ctp"
    workdir = tmp_path_factory.mktemp("staged")
    platform.kube.namespace(namespace)
    platform.kube.core.create_namespaced_config_map(
        namespace,
        {"metadata": {"name": TEAM_VARIABLES}, "data": {"TEAM_GREETING": TEAM_GREETING}},
    )
    create(
        platform.kube,
        XR,
        bare(namespace, name, backup={"schedule": NEVER_SCHEDULE, "finalBackup": False}),
    )
    wait_ready(platform, XR, namespace, name, timeout=UP_DEADLINE)
    hosted = hosted_name(platform, namespace, name)
    # Before any source: Flux must find Crossplane's kinds served in the control plane.
    plane = platform.crossplane_in(hosted)
    wait_for("Crossplane core in the hosted control plane", plane.crossplane_running, CORE_DEADLINE)
    return Staged(
        platform=platform,
        namespace=namespace,
        name=name,
        repository=platform.git.repository(namespace),
        plane=plane,
        key=age_key(workdir),
        password=secrets.token_urlsafe(16),
        notes_reference=platform.registry.push(CONFIGURATION),
        memo_reference=platform.registry.push(memo_package(workdir / "memo")),
        registry_host=platform.registry.host,
        commits=[],
        workdir=workdir,
    )


def set_source(staged: Staged, source: dict[str, Any]) -> None:
    staged.platform.kube.patch(
        XR[2], staged.namespace, staged.name, {"spec": {"source": source}}, XR[0], XR[1]
    )


def test_one_path_with_a_configuration_and_its_kind_never_syncs_and_says_why(
    staged: Staged,
) -> None:
    staged.commits.append(staged.repository.commit(repository_files(staged, None), "one path"))
    set_source(staged, one_path_source(staged.repository.url))

    def no_matches() -> str | None:
        message = str(staged.synced().get("message", ""))
        return message if "no matches for kind" in message else None

    message = wait_for("Flux's 'no matches for kind' in SourceSynced", no_matches, STATUS_DEADLINE)
    assert staged.synced()["status"] == "False"
    assert '"Note"' in message, message
    assert "Traceback" not in message
    assert not [value for value in staged.credentials() if value in message]
    # Nothing of the apply landed: the Configuration that would define Note is not there.
    assert staged.hosted("configurations", "notes", PKG_API_VERSION) is None


def test_two_stages_sync_with_variables_and_a_decrypted_secret_once_the_key_exists(
    staged: Staged,
) -> None:
    platform = staged.platform
    set_source(staged, staged_source(staged.repository.url))
    revision = f"main@sha1:{staged.commits[-1]}"

    def key_missing() -> str | None:
        message = str(staged.synced().get("message", ""))
        return message if DECRYPTION_SECRET in message else None

    message = wait_for(
        "the missing decryption Secret in SourceSynced", key_missing, STATUS_DEADLINE
    )
    assert staged.synced()["status"] == "False"
    # Every stage decrypts with the source's key: the first one stops before applying.
    assert "packages" in message, "the message names the first stage"
    assert staged.hosted("configurations", "notes", PKG_API_VERSION) is None

    platform.kube.put_secret(
        staged.namespace, DECRYPTION_SECRET, {AGE_KEY_NAME: staged.key.identity.encode()}
    )
    synced = wait_for(
        "SourceSynced True",
        lambda: staged.synced() if staged.synced().get("status") == "True" else None,
        STATUS_DEADLINE,
    )

    source = staged.composite["status"]["source"]
    assert source["revision"] == revision
    assert [(s["name"], s["ready"], s["revision"]) for s in source["stages"]] == [
        ("packages", True, revision),
        ("config", True, revision),
    ]
    # Ordered: the Note was applied after its Configuration turned Healthy, and
    # SourceSynced turned True after that (RFC 3339 UTC, one clock: strings compare).
    notes = staged.hosted("configurations", "notes", PKG_API_VERSION)
    note = staged.hosted("notes", "first", NOTE_API_VERSION)
    assert note is not None
    healthy_since = condition(notes, "Healthy")["lastTransitionTime"]
    assert note["metadata"]["creationTimestamp"] >= healthy_since
    assert synced["lastTransitionTime"] >= note["metadata"]["creationTimestamp"]

    hosted = staged.plane.kube.core
    variables = hosted.read_namespaced_config_map("platform-variables", HOSTED_NAMESPACE).data
    assert variables == {
        "controlplane": staged.name,
        "namespace": staged.namespace,
        "bucket": staged.composite["status"]["backup"]["bucket"],
        "greeting": TEAM_GREETING,
    }
    secret = hosted.read_namespaced_secret("team-credentials", HOSTED_NAMESPACE)
    assert base64.b64decode(secret.data["password"]).decode() == staged.password


def test_a_package_that_never_installs_keeps_the_sync_false_and_the_next_stage_waits(
    staged: Staged,
) -> None:
    applied = f"main@sha1:{staged.commits[-1]}"
    missing = f"{staged.registry_host}/acme/configuration-missing:v0.1.0"
    staged.commits.append(
        staged.repository.commit(repository_files(staged, missing), "a package that cannot install")
    )

    def health_failed() -> str | None:
        message = str(staged.synced().get("message", ""))
        return message if "Configuration/memos" in message else None

    message = wait_for("the unhealthy package in SourceSynced", health_failed, STATUS_DEADLINE)
    assert staged.synced()["status"] == "False"
    assert "packages" in message, "the message names the stage"
    # Failed by the function's check (Crossplane cannot fetch it), not timed out.
    assert "Configuration/memos status: 'Failed'" in message, message
    memos = staged.hosted("configurations", "memos", PKG_API_VERSION)
    assert memos is not None, "the first stage applied the package"
    assert condition(memos, "Healthy").get("status") != "True"
    # The second stage did not apply the new revision: the Memo, whose kind the
    # package would define, is not there.
    assert staged.kustomization("config")["status"]["lastAppliedRevision"] == applied
    assert staged.hosted("memos", "first", MEMO_API_VERSION) is None
    assert not [value for value in staged.credentials() if value in message]

    # Where the old layout, Flux's own health rules without the function's
    # expressions, calls the same stage at the same revision Ready.
    old_layout = without_health_checks(staged.kustomization("packages"), "old-layout")
    create(staged.platform.kube, KUSTOMIZATION, old_layout)
    try:
        wait_for(
            "the old layout's Kustomization Ready at the same revision",
            lambda: ready_at(staged, "old-layout", staged.commits[-1]),
            SYNC_DEADLINE,
        )
    finally:
        staged.platform.kube.delete(
            KUSTOMIZATION[2], staged.namespace, "old-layout", *KUSTOMIZATION[:2]
        )
    assert staged.synced()["status"] == "False"


def without_health_checks(kustomization: dict[str, Any], name: str) -> dict[str, Any]:
    """A copy of a stage's Kustomization under `name`, with Flux's default health checks.

    It applies only what the stage already applied, and leaves it there when deleted.
    """
    spec = dict(kustomization["spec"])
    spec.pop("healthCheckExprs")
    spec.pop("dependsOn", None)
    return {
        "apiVersion": kustomization["apiVersion"],
        "kind": kustomization["kind"],
        "metadata": {"name": name, "namespace": kustomization["metadata"]["namespace"]},
        "spec": {**spec, "prune": False, "deletionPolicy": "Orphan"},
    }


def ready_at(staged: Staged, name: str, sha: str) -> bool:
    found = get(staged.platform.kube, KUSTOMIZATION, staged.namespace, name)
    applied = ((found or {}).get("status") or {}).get("lastAppliedRevision")
    return condition(found, "Ready").get("status") == "True" and applied == f"main@sha1:{sha}"


def test_a_push_fixing_the_first_stage_is_installed_before_the_second_stage_applies(
    staged: Staged,
) -> None:
    sha = staged.repository.commit(repository_files(staged, staged.memo_reference), "fixed")
    staged.commits.append(sha)
    revision = f"main@sha1:{sha}"

    def synced_at_revision() -> dict[str, Any] | None:
        synced = staged.synced()
        source = staged.composite["status"]["source"]
        done = synced.get("status") == "True" and source.get("revision") == revision
        return synced if done else None

    synced = wait_for("SourceSynced True at the fix", synced_at_revision, STATUS_DEADLINE)
    memos = staged.hosted("configurations", "memos", PKG_API_VERSION)
    memo = staged.hosted("memos", "first", MEMO_API_VERSION)
    assert memo is not None
    assert (
        memo["metadata"]["creationTimestamp"] >= condition(memos, "Healthy")["lastTransitionTime"]
    )
    assert synced["lastTransitionTime"] >= memo["metadata"]["creationTimestamp"]
    stages = staged.composite["status"]["source"]["stages"]
    assert [(s["name"], s["ready"], s["revision"]) for s in stages] == [
        ("packages", True, revision),
        ("config", True, revision),
    ]
