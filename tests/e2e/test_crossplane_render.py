"""End to end: every example, at every observed step, through the real crossplane CLI."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from function import cli
from function import render as in_process
from function.cli import _input
from tests.e2e import crossplane
from tests.schemas import ROOT, problems

EXAMPLES = ROOT / "examples"
COMPOSITION = ROOT / "compositions" / "controlplane.yaml"
LEGACY_COMPOSITION = ROOT / "compositions" / "legacy" / "xcontrolplane.yaml"


@dataclass(frozen=True)
class Example:
    folder: str
    step: str
    composition: Path
    must_compose: frozenset[str]

    @property
    def path(self) -> Path:
        return EXAMPLES / self.folder

    def __str__(self) -> str:
        return f"{self.folder}/{self.step}"


def _examples() -> list[Example]:
    found = []
    for folder in sorted(p for p in EXAMPLES.iterdir() if (p / "xr.yaml").exists()):
        composition = LEGACY_COMPOSITION if folder.name.startswith("legacy") else COMPOSITION
        for step in sorted(p.name for p in (folder / "observed").iterdir()):
            observed = {p.stem for p in (folder / "observed" / step).glob("*.yaml")}
            found.append(Example(folder.name, step, composition, frozenset(observed)))
    return found


EXAMPLE_CASES = _examples()


def test_every_scenario_of_the_issue_has_an_example_with_both_observed_steps() -> None:
    folders = {case.folder for case in EXAMPLE_CASES}
    assert folders == {
        "minimal",
        "git-source",
        "staged-source",
        "backup-dedicated-bucket",
        "backup-existing-bucket",
        "restore",
        "restore-latest",
        "legacy-claim",
        "team-quickstart",
    }
    for folder in folders:
        steps = {case.step for case in EXAMPLE_CASES if case.folder == folder}
        assert {"created", "ready"} <= steps, folder
        assert (EXAMPLES / folder / "README.md").exists(), folder


def _documents(path: Path) -> list[dict[str, Any]]:
    files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
    return [doc for file in files for doc in yaml.safe_load_all(file.read_text()) if doc]


@pytest.fixture(scope="module")
def extensions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return crossplane.extensions(tmp_path_factory.mktemp("extensions"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return crossplane.seeded_cache(tmp_path_factory.mktemp("cache"))


@pytest.mark.e2e
@pytest.mark.parametrize("case", EXAMPLE_CASES, ids=str)
def test_crossplane_render_validate_and_the_in_process_render_agree(
    case: Example, function_address: str, extensions: Path, cache: Path, tmp_path: Path
) -> None:
    observed = case.path / "observed" / case.step
    rendered = crossplane.render(case.path, case.composition, function_address, observed)
    xr, composed = rendered[0], rendered[1:]

    # Everything observed is still composed: nothing is withdrawn between steps.
    names = {
        obj["metadata"]["annotations"][in_process.COMPOSITION_RESOURCE_NAME] for obj in composed
    }
    assert case.must_compose <= names

    output = tmp_path / "rendered.yaml"
    output.write_text(yaml.safe_dump_all(rendered))
    result = crossplane.validate(extensions, cache, output)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 missing schemas" in result.stdout and "0 failure cases" in result.stdout

    for obj in rendered:
        assert problems(obj) == []

    required = case.path / "required"
    ours = in_process.render(
        _documents(case.path / "xr.yaml")[0],
        _input(_documents(case.composition)),
        _documents(observed),
        required=_documents(required) if required.is_dir() else [],
    )
    assert ours[0]["status"] == xr["status"]
    assert ours[1:] == composed


@dataclass(frozen=True)
class XrdRuleCase:
    reason: str
    spec: dict[str, Any]
    message: str


XRD_RULE_CASES = [
    XrdRuleCase(
        "The XRD refuses channel None without a version, as the function does.",
        {"channel": "None"},
        "spec.crossplaneVersion is required when spec.channel is None",
    ),
    XrdRuleCase(
        "The XRD refuses two git refs.",
        {"source": {"url": "https://x.example/r", "ref": {"branch": "a", "tag": "b"}}},
        "exactly one of branch, tag, semver or commit",
    ),
    XrdRuleCase(
        "The XRD refuses a file:// URL.",
        {"source": {"url": "file:///etc"}},
        "spec.source.url",
    ),
    XrdRuleCase("The XRD refuses an unknown channel.", {"channel": "Beta"}, "spec.channel"),
    XrdRuleCase(
        "The XRD refuses two stages of one name, as the function does.",
        {
            "source": {
                "url": "https://x.example/r",
                "stages": [{"name": "a", "path": "./a"}, {"name": "a", "path": "./b"}],
            }
        },
        "spec.source.stages must have unique names",
    ),
    XrdRuleCase(
        "The XRD refuses a team variable of a platform variable's name, as the function does.",
        {"source": {"url": "https://x.example/r", "substitute": {"CONTROLPLANE_NAME": "x"}}},
        "spec.source.substitute must not set a platform variable",
    ),
    XrdRuleCase(
        "The XRD refuses a password in the URL, as the function does.",
        {"source": {"url": "https://alice:s3cr3t-pa55@github.com/acmeorg/x"}},
        "spec.source.url must not carry credentials",
    ),
    XrdRuleCase(
        "The XRD refuses a restore naming both a Backup and a control plane, as the function does.",
        {"restore": {"backupName": "myctp-backup-1", "fromControlPlane": "myctp"}},
        "spec.restore must set exactly one of backupName or fromControlPlane",
    ),
    XrdRuleCase(
        "The XRD refuses a restore naming neither, as the function does.",
        {"restore": {}},
        "spec.restore must set exactly one of backupName or fromControlPlane",
    ),
]


@pytest.mark.e2e
@pytest.mark.parametrize("case", XRD_RULE_CASES, ids=lambda case: case.reason)
@pytest.mark.parametrize("legacy", [False, True], ids=["v2", "legacy"])
def test_the_xrds_refuse_what_the_function_refuses(
    case: XrdRuleCase, legacy: bool, extensions: Path, cache: Path, tmp_path: Path
) -> None:
    from tests import builders

    xr = builders.composite(case.spec, namespace=None if legacy else "team-a")
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    result = crossplane.validate(extensions, cache, path)
    assert result.returncode == 1, case.reason
    assert case.message in result.stdout, result.stdout
    assert "s3cr3t-pa55" not in result.stdout, "validate quotes the password"
    with pytest.raises(in_process.FatalError):
        in_process.render(xr, _input(_documents(COMPOSITION)))


@pytest.mark.parametrize("case", EXAMPLE_CASES, ids=str)
def test_every_observed_state_of_the_examples_is_itself_valid(case: Example) -> None:
    for obj in _documents(case.path / "observed" / case.step):
        assert problems(obj) == []


def late_restore(into: Path) -> Path:
    """The restore example's composite against the minimal example's ready Instance.

    The function warns that a restore is honoured only at creation: a Result.
    """
    shutil.copy(EXAMPLES / "restore" / "xr.yaml", into / "xr.yaml")
    shutil.copy(EXAMPLES / "restore" / "functions.yaml", into / "functions.yaml")
    shutil.copytree(EXAMPLES / "minimal" / "observed" / "ready", into / "observed" / "created")
    return into


@pytest.mark.e2e
@pytest.mark.parametrize(
    "case",
    [*(case for case in EXAMPLE_CASES if case.step == "created"), None],
    ids=lambda case: str(case) if case else "late-restore/created",
)
def test_the_in_process_render_takes_crossplane_renders_arguments_and_prints_the_same(
    case: Example | None, function_address: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The same command line, but the program: the XR, the Composition and the
    # Functions in order, with the observed resources, the full XR and the
    # function's results.
    # and the resources the function may ask for, when the example has them.
    folder = case.path if case else late_restore(tmp_path)
    args = [
        "xr.yaml",
        str(case.composition if case else COMPOSITION),
        "functions.yaml",
        *(
            ["-o", "observed/created"]
            if any((folder / "observed" / "created").glob("*.yaml"))
            else []
        ),
        *(["-e", "required"] if (folder / "required").is_dir() else []),
        "--include-full-xr",
        "-r",
    ]
    theirs = crossplane.run(
        "render",
        *args,
        "--function-annotations",
        f"{crossplane.DEVELOPMENT_TARGET}={function_address}",
        cwd=folder,
    )
    assert theirs.returncode == 0, theirs.stderr
    monkeypatch.chdir(folder)
    ours = CliRunner().invoke(cli.main, ["render", *args])
    assert ours.exit_code == 0, ours.output
    printed = list(yaml.safe_load_all(ours.output))
    assert printed == [doc for doc in yaml.safe_load_all(theirs.stdout) if doc]
    results = [doc for doc in printed if doc["kind"] == "Result"]
    assert bool(results) is (case is None), "only the late restore warns"


@pytest.mark.e2e
def test_a_restore_from_a_control_plane_without_backups_renders_nothing_and_is_not_ready(
    function_address: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The restore-latest example with no Backup to choose from: crossplane render
    # and the in-process render compose nothing, keep the composite from being
    # Ready, and warn naming the control plane.
    for name in ("xr.yaml", "functions.yaml"):
        shutil.copy(EXAMPLES / "restore-latest" / name, tmp_path / name)
    args = ["xr.yaml", str(COMPOSITION), "functions.yaml", "-r"]
    theirs = crossplane.run(
        "render",
        *args,
        "--function-annotations",
        f"{crossplane.DEVELOPMENT_TARGET}={function_address}",
        cwd=tmp_path,
    )
    assert theirs.returncode == 0, theirs.stderr
    rendered = [doc for doc in yaml.safe_load_all(theirs.stdout) if doc]
    monkeypatch.chdir(tmp_path)
    ours = CliRunner().invoke(cli.main, ["render", *args])
    assert ours.exit_code == 0, ours.output
    assert list(yaml.safe_load_all(ours.output)) == rendered
    assert [doc["kind"] for doc in rendered] == ["ControlPlane", "Result"]
    ready = next(c for c in rendered[0]["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Creating")
    assert "no Completed Backup of control plane myctp" in rendered[1]["message"]
