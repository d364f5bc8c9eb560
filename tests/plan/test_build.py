"""controlplane-plan-build builds a stage as kustomize-controller does, with Flux's own rules.

The substitution cases are those kustomize-controller's documentation gives
(docs/spec/v1/kustomizations.md, "Post build variable substitution"), run
through the real program on Flux's libraries.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from plan import build
from plan.changes import Built

from .conftest import configmap, write

NAMESPACE = "team-a"


def kustomization(path: str = "./app", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.toolkit.fluxcd.io/v1",
        "kind": "Kustomization",
        "metadata": {"name": "myctp-app", "namespace": NAMESPACE},
        "spec": {"path": path, "prune": True, **spec},
    }


def variables(
    substitute: dict[str, str] | None = None,
    substitute_from: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    post_build: dict[str, Any] = {"substitute": substitute or {}, **extra}
    if substitute_from:
        post_build["substituteFrom"] = substitute_from
    return {"postBuild": post_build}


def source_object(kind: str, name: str, data: dict[str, str]) -> dict[str, Any]:
    body = (
        data
        if kind == "ConfigMap"
        else {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    )
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE},
        "data": body,
    }


@dataclass
class SubstitutionCase:
    reason: str
    value: str
    spec: dict[str, Any]
    expected: str
    objects: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)


SUBSTITUTIONS = [
    SubstitutionCase(
        "a variable is replaced by its value", "${ENV}", variables({"ENV": "prod"}), "prod"
    ),
    SubstitutionCase(
        "a default is used for a variable that is not set",
        "${REGION:=eu-west-1}",
        variables({"ENV": "prod"}),
        "eu-west-1",
    ),
    SubstitutionCase(
        "a default is ignored for a variable that is set",
        "${ENV:=dev}",
        variables({"ENV": "prod"}),
        "prod",
    ),
    SubstitutionCase(
        "a substring from a position", "${ENV:1}", variables({"ENV": "production"}), "roduction"
    ),
    SubstitutionCase(
        "a substring from a position of a length",
        "${ENV:0:4}",
        variables({"ENV": "production"}),
        "prod",
    ),
    SubstitutionCase(
        "a substring replaced", "${ENV/prod/test}", variables({"ENV": "prod-eu"}), "test-eu"
    ),
    SubstitutionCase("$${var} prints ${var}", "$${ENV}", variables({"ENV": "prod"}), "${ENV}"),
    SubstitutionCase(
        "$var without braces is left alone", "$ENV", variables({"ENV": "prod"}), "$ENV"
    ),
    SubstitutionCase(
        "an inline variable takes precedence over one from substituteFrom",
        "${ENV}",
        variables({"ENV": "inline"}, [{"kind": "ConfigMap", "name": "vars"}]),
        "inline",
        [source_object("ConfigMap", "vars", {"ENV": "from-configmap"})],
    ),
    SubstitutionCase(
        "a later substituteFrom overwrites an earlier one",
        "${ENV}",
        variables(
            {"OTHER": "x"},
            [{"kind": "ConfigMap", "name": "first"}, {"kind": "Secret", "name": "second"}],
        ),
        "from-secret",
        [
            source_object("ConfigMap", "first", {"ENV": "from-configmap"}),
            source_object("Secret", "second", {"ENV": "from-secret"}),
        ],
    ),
    SubstitutionCase(
        "an optional substituteFrom that is missing defines nothing",
        "${ENV:=fallback}",
        variables({"OTHER": "x"}, [{"kind": "ConfigMap", "name": "gone", "optional": True}]),
        "fallback",
    ),
    SubstitutionCase(
        "the substitute annotation disabled leaves the object alone",
        "${ENV}",
        variables({"ENV": "prod"}),
        "${ENV}",
        metadata={"annotations": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}},
    ),
    SubstitutionCase(
        "the substitute label disabled leaves the object alone",
        "${ENV}",
        variables({"ENV": "prod"}),
        "${ENV}",
        metadata={"labels": {"kustomize.toolkit.fluxcd.io/substitute": "disabled"}},
    ),
    SubstitutionCase(
        "with no variable at all nothing is substituted",
        "${ENV:=dev}",
        {"postBuild": {"substitute": {}}},
        "${ENV:=dev}",
    ),
    SubstitutionCase(
        "substituteStrategy Always substitutes defaults with no variable",
        "${ENV:=dev}",
        {"postBuild": {"substituteStrategy": "Always"}},
        "dev",
    ),
]


@pytest.mark.parametrize("case", SUBSTITUTIONS, ids=lambda case: case.reason)
def test_postbuild_substitution_follows_fluxs_documented_rules(
    case: SubstitutionCase, tmp_path: Path, build_tool: Path
) -> None:
    write(tmp_path, {"app/value.yaml": configmap("value", {"value": case.value}, **case.metadata)})

    objects = build.build(build_tool, tmp_path, kustomization(**case.spec), case.objects)

    assert [item.object["data"]["value"] for item in objects] == [case.expected]


@dataclass
class FailureCase:
    reason: str
    files: dict[str, Any]
    spec: dict[str, Any]
    expected: str
    path: str = "./app"


FAILURES = [
    FailureCase(
        "a variable without a default and without a value fails, as with strict substitution",
        {"app/value.yaml": configmap("value", {"value": "${UNSET}"})},
        variables({"ENV": "prod"}),
        "variable not set (strict mode)",
    ),
    FailureCase(
        "a required substituteFrom that is missing fails, naming it",
        {"app/value.yaml": configmap("value", {"value": "x"})},
        variables({"ENV": "prod"}, [{"kind": "ConfigMap", "name": "team-vars"}]),
        "substitute from 'ConfigMap/team-vars' error",
    ),
    FailureCase(
        "a stage path that does not exist fails, naming the path",
        {"app/value.yaml": configmap("value", {"value": "x"})},
        {},
        "kustomization path not found: ./missing",
        path="./missing",
    ),
    FailureCase(
        "a kustomization naming a missing file fails the build",
        {"app/kustomization.yaml": {"resources": ["missing.yaml"]}},
        {},
        "kustomize build failed",
    ),
    FailureCase(
        "a remote base is refused, as the platform's --no-remote-bases refuses it",
        {
            "app/kustomization.yaml": {
                "resources": ["https://github.com/acmeorg/bases//app?ref=main"]
            }
        },
        {},
        "kustomize build failed",
    ),
    FailureCase(
        "an object without a name fails, as the controller refuses it",
        {"app/value.yaml": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}},
        {},
        "",
    ),
]


@pytest.mark.parametrize("case", FAILURES, ids=lambda case: case.reason)
def test_a_stage_that_flux_would_refuse_fails_with_fluxs_words(
    case: FailureCase, tmp_path: Path, build_tool: Path
) -> None:
    write(tmp_path, case.files)

    with pytest.raises(build.BuildError) as raised:
        build.build(build_tool, tmp_path, kustomization(case.path, **case.spec))

    assert case.expected in str(raised.value)
    assert str(tmp_path) not in str(raised.value), "files are named as the repository names them"


def test_a_remote_base_never_reaches_the_build_and_the_error_names_it(
    tmp_path: Path, build_tool: Path
) -> None:
    # Flux's secure file system refuses anything kustomize fetched outside the
    # checkout; here, with no route to the host, the fetch itself fails first.
    remote = "https://github.com/acmeorg/bases//app"
    write(tmp_path, {"app/kustomization.yaml": {"resources": [remote]}})

    with pytest.raises(build.BuildError) as raised:
        build.build(build_tool, tmp_path, kustomization())

    assert f"accumulating resources from '{remote}'" in str(raised.value)


def test_a_folder_without_kustomization_yaml_is_built_as_flux_generates_it_and_left_untouched(
    tmp_path: Path, build_tool: Path
) -> None:
    write(
        tmp_path,
        {
            "app/one.yaml": configmap("one", {"a": "1"}),
            "app/nested/two.yaml": configmap("two", {"b": "2"}),
            "app/notes.txt": "not a manifest",
        },
    )
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))

    objects = build.build(build_tool, tmp_path, kustomization(targetNamespace="apps"))

    assert sorted(item.id.name for item in objects) == ["one", "two"]
    assert {item.id.namespace for item in objects} == {"apps"}, "targetNamespace applies"
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


def test_every_object_carries_fluxs_owner_labels_and_the_common_metadata(
    tmp_path: Path, build_tool: Path
) -> None:
    write(tmp_path, {"app/one.yaml": configmap("one", {"a": "1"})})

    [item] = build.build(
        build_tool,
        tmp_path,
        kustomization(commonMetadata={"labels": {"team": "a"}, "annotations": {"owner": "a"}}),
    )

    assert item.object["metadata"]["labels"] == {
        "team": "a",
        "kustomize.toolkit.fluxcd.io/name": "myctp-app",
        "kustomize.toolkit.fluxcd.io/namespace": NAMESPACE,
    }
    assert item.object["metadata"]["annotations"] == {"owner": "a"}


def test_a_sops_secret_is_marked_encrypted_and_passed_on_undecrypted(
    tmp_path: Path, build_tool: Path
) -> None:
    ciphertext = "ENC[AES256_GCM,data:c2VjcmV0,iv:aXY=,tag:dGFn,type:str]"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "creds", "namespace": "default"},
        "stringData": {"password": ciphertext},
        "sops": {"mac": "ENC[AES256_GCM,data:bWFj,type:str]", "version": "3.9.0"},
    }
    write(tmp_path, {"app/secret.yaml": secret, "app/plain.yaml": configmap("plain", {"a": "1"})})

    objects = build.build(
        build_tool,
        tmp_path,
        kustomization(decryption={"provider": "sops", "secretRef": {"name": "k"}}),
    )

    by_name = {item.id.name: item for item in objects}
    assert by_name["creds"].encrypted
    # Flux's normalisation moves stringData into data, as the API server would.
    assert base64.b64decode(by_name["creds"].object["data"]["password"]).decode() == ciphertext
    assert not by_name["plain"].encrypted


def test_flux_applies_definitions_first_then_classes_then_the_rest(
    tmp_path: Path, build_tool: Path
) -> None:
    write(
        tmp_path,
        {
            "app/all.yaml": [
                configmap("config", {"a": "1"}),
                {
                    "apiVersion": "storage.k8s.io/v1",
                    "kind": "StorageClass",
                    "metadata": {"name": "fast"},
                    "provisioner": "x",
                },
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}},
            ]
        },
    )

    objects = build.build(build_tool, tmp_path, kustomization())

    assert {item.id.kind: item.apply_stage for item in objects} == {
        "Namespace": 0,
        "StorageClass": 1,
        "ConfigMap": 2,
    }


def test_a_missing_program_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(build.BINARY_VARIABLE, raising=False)
    monkeypatch.setattr("sys.executable", str(tmp_path / "python"))

    with pytest.raises(build.BuildError, match="controlplane-plan-build is not found"):
        build.find_binary()


def test_built_objects_are_plain_built_values(tmp_path: Path, build_tool: Path) -> None:
    write(tmp_path, {"app/one.yaml": configmap("one", {"a": "1"})})

    [item] = build.build(build_tool, tmp_path, kustomization())

    assert isinstance(item, Built)
    assert item.api_version == "v1"
    assert str(item.id) == "ConfigMap default/one"


def pins(go_mod: Path) -> dict[str, str]:
    """Every module a go.mod requires or replaces, with its version (a replacement's wins)."""
    found: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for line in go_mod.read_text().splitlines():
        words = line.split("//")[0].split()
        if "=>" in words:
            arrow = words.index("=>")
            replaced[words[arrow - 1]] = words[-1]
        elif len(words) == 2 and words[1].startswith("v") and "." in words[0]:
            found[words[0]] = words[1]
        elif len(words) == 3 and words[0] == "require":
            found[words[1]] = words[2]
    return found | replaced


def test_the_build_program_pins_every_module_it_shares_with_kustomize_controller_alike() -> None:
    tools = Path(__file__).resolve().parents[2] / "tools"
    ours = pins(tools / "plan-build" / "go.mod")
    controller = pins(tools / "flux" / "kustomize-controller" / "go.mod")

    shared = ours.keys() & controller.keys()
    assert {"github.com/fluxcd/pkg/kustomize", "github.com/fluxcd/pkg/ssa"} <= shared
    assert "sigs.k8s.io/kustomize/api" in shared
    assert {m: ours[m] for m in shared if ours[m] != controller[m]} == {}
