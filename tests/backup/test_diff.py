"""The diff a dry-run restore prints: server-managed metadata ignored, Secrets masked."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

import pytest

from provider.backup.restore.diff import changed, unified

PATH = "configmaps/namespaces/app-0/settings.yaml"
SECRET_PATH = "secrets/namespaces/app-0/db.yaml"


def configmap(data: dict[str, str], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "app-0", **metadata},
        "data": data,
    }


def secret(data: dict[str, str], **metadata: Any) -> dict[str, Any]:
    encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": "db", "namespace": "app-0", **metadata},
        "data": encoded,
    }


SERVER_MANAGED = {
    "uid": "0d5c",
    "resourceVersion": "812",
    "creationTimestamp": "2026-12-03T06:00:00Z",
    "managedFields": [{"manager": "controlplane-restore", "operation": "Apply"}],
}


@dataclass
class SameCase:
    reason: str
    live: dict[str, Any]
    proposed: dict[str, Any]
    same: bool


SAME_CASES = [
    SameCase(
        "server-managed metadata alone is no change",
        configmap({"k": "v"}, **SERVER_MANAGED),
        configmap({"k": "v"}, **{**SERVER_MANAGED, "resourceVersion": "813", "managedFields": []}),
        True,
    ),
    SameCase("a changed value is a change", configmap({"k": "v"}), configmap({"k": "w"}), False),
    SameCase("a new label is a change", configmap({}), configmap({}, labels={"a": "b"}), False),
]


@pytest.mark.parametrize("case", SAME_CASES, ids=lambda c: c.reason)
def test_only_what_the_restore_would_write_counts_as_a_change(case: SameCase) -> None:
    assert changed(case.live, case.proposed) is not case.same
    assert (unified(case.live, case.proposed, PATH) == "") is case.same


def test_the_diff_is_unified_and_names_both_sides_by_the_archive_path() -> None:
    text = unified(
        configmap({"k": "old", "same": "x"}, **SERVER_MANAGED),
        configmap({"k": "new", "same": "x"}),
        PATH,
    )

    lines = text.splitlines()
    assert lines[:2] == [f"--- live/{PATH}", f"+++ restored/{PATH}"]
    assert lines[2].startswith("@@ ")
    assert "-  k: old" in lines
    assert "+  k: new" in lines
    assert "   same: x" in lines
    assert not any("resourceVersion" in line or "uid" in line for line in lines)


def test_a_secrets_values_never_appear_yet_a_changed_key_shows() -> None:
    last_applied = json.dumps(secret({"password": "hunter2-old"}))
    live = secret(
        {"password": "hunter2-old", "user": "admin-name"},
        annotations={"kubectl.kubernetes.io/last-applied-configuration": last_applied},
    )
    proposed = secret({"password": "hunter2-new", "user": "admin-name", "extra": "more-secret"})

    text = unified(live, proposed, SECRET_PATH)

    encoded = [base64.b64encode(v.encode()).decode() for v in ("hunter2", "admin-name")]
    for value in ("hunter2", "admin-name", "more-secret", *encoded, last_applied):
        assert value not in text
    lines = text.splitlines()
    assert "-  password: '*** (before)'" in lines
    assert "+  password: '*** (after)'" in lines
    assert "   user: '***'" in lines
    assert "+  extra: '*** (after)'" in lines
    assert any("last-applied-configuration: '*** (before)'" in line for line in lines)


def test_a_secret_whose_values_are_unchanged_is_no_change() -> None:
    assert not changed(secret({"a": "b"}, **SERVER_MANAGED), secret({"a": "b"}))


def test_text_that_would_drive_a_terminal_is_escaped_in_the_diff() -> None:
    text = unified(configmap({"k": "v"}), configmap({"k": "\x1b]0;owned\x07"}), PATH)

    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\\e]0;owned\\a" in text
