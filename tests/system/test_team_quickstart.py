"""examples/team-quickstart in the whole platform, as its README tells a team to apply it.

The sandbox's own files (``sandbox.quickstart``: the example repository served
by the platform's git server, the ControlPlane pointed at it) are applied; the
composite becomes Ready with the status the README shows (but for what the
sandbox's repository and Space make their own: the revision, the Instance's
id), and the hosted control plane holds both stages' ConfigMaps with the
variables filled in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sandbox import quickstart
from sandbox.platform import Platform
from sandbox.space_releases import Releases
from sandbox.spaces import Kube, wait_for
from tests.quickstart import differences, expected_status

from .helpers import SYNC_DEADLINE, XR, create, hosted_name, wait_ready

# Values the README shows that the sandbox makes its own.
SANDBOX_OWN = ("revision", "lastAttemptedRevision", "id", "message", "lastBackup")


def _without(node: Any, keys: tuple[str, ...]) -> Any:
    if isinstance(node, dict):
        return {k: _without(v, keys) for k, v in node.items() if k not in keys}
    if isinstance(node, list):
        return [_without(v, keys) for v in node]
    return node


def _hosted_configmap(platform: Platform, hosted: str, name: str) -> dict[str, str] | None:
    server = platform.hosted.get(hosted)
    if server is None:
        return None
    try:
        found = Kube(server).core.read_namespaced_config_map(name, "apps")
    except Exception:  # noqa: BLE001 (not there yet, or the server not serving yet)
        return None
    return dict(found.data or {})


def test_the_team_quickstart_becomes_ready_as_its_readme_says(
    platform: Platform, tmp_path: Path
) -> None:
    manifests = quickstart.prepare(platform.git, tmp_path)
    namespace, composite = yaml.safe_load_all(manifests.read_text())
    name, team = composite["metadata"]["name"], namespace["metadata"]["name"]
    platform.kube.namespace(team)
    create(platform.kube, XR, composite)

    ready = wait_ready(platform, XR, team, name)
    # The first Backup comes at the next multiple of ten minutes: not awaited here.
    shown = _without(expected_status(), (*SANDBOX_OWN, "lastSuccessfulBackup"))
    # Without a version a control plane gets the Space's Stable release: the
    # README shows a new Space's; another scenario may have published a patch since.
    assert shown["instance"]["crossplaneVersion"] == Releases().target("Stable", None)
    shown["instance"]["crossplaneVersion"] = platform.simulator.releases.target("Stable", None)
    assert differences(shown, ready["status"]) == []
    revision = ready["status"]["source"]["revision"]
    assert [stage["revision"] for stage in ready["status"]["source"]["stages"]] == [revision] * 2

    hosted = hosted_name(platform, team, name)
    settings = wait_for(
        "the platform stage's ConfigMap in the hosted control plane",
        lambda: _hosted_configmap(platform, hosted, "platform-settings"),
        timeout=SYNC_DEADLINE,
    )
    backup = ready["status"]["backup"]
    assert settings == {
        "controlplane": f"{team}/{name}",
        "environment": "quickstart",
        "backups": f"s3://{backup['bucket']}/{backup['prefix']}",
    }
    greeting = _hosted_configmap(platform, hosted, "greeting")
    assert greeting == {"hello": f"from {name}'s git repository"}
