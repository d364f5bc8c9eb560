"""The docs checked: links and anchors resolve, runnable commands run, YAML validates.

Every Markdown file of the repository is read (``tests/docs/markdown_files.py``
says how, and the markers a fenced block may carry):

- every relative link resolves to a file of the repository, and its anchor to
  a heading (or an explicit anchor) of the page it names;
- every command block is marked: ``runnable`` ones are run here, each from
  the repository root (or its page's folder) with the venv's programs first
  on the PATH, and must exit 0; the others say why not (a cluster, root, a
  server...), on the block or once for the page;
- every YAML block validates against the schema of its kind (our XRDs and
  CRDs, the function Input, the pinned upstream CRDs of ``.tools/crds``), a
  ``fragment of`` block as part of an object of the kind it names; a block of
  a kind with no schema here says why it is not validated;
- the README leads to the install steps, a team's first ControlPlane and
  what a failing condition means within two clicks.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.docs.markdown_files import (
    COMMAND_LANGUAGES,
    ROOT,
    YAML_LANGUAGES,
    Block,
    Link,
    anchors,
    broken,
    markdown_files,
    page,
    relative_links,
    resolve,
    slug,
)
from tests.schemas import input_problems, kinds, problems

RUNNABLE = "runnable"
RUNNABLE_HERE = "runnable from this folder"
NOT_RUNNABLE = "not runnable:"
FRAGMENT = "fragment of "
NOT_VALIDATED = "not validated:"
# A documented command that takes longer than this is not one to run in the tests.
COMMAND_TIMEOUT = 300

PAGES = markdown_files()
BLOCKS = [block for path in PAGES for block in page(path).blocks]
COMMAND_BLOCKS = [block for block in BLOCKS if block.language in COMMAND_LANGUAGES]
RUNNABLE_BLOCKS = [block for block in COMMAND_BLOCKS if block.marker in {RUNNABLE, RUNNABLE_HERE}]
YAML_BLOCKS = [block for block in BLOCKS if block.language in YAML_LANGUAGES]


def test_every_relative_link_and_anchor_resolves() -> None:
    found = [
        problem for path in PAGES for link in relative_links(path) if (problem := broken(link))
    ]
    assert found == [], "\n".join(found)


def test_every_command_block_is_run_or_says_why_not() -> None:
    unmarked = [
        f"{block}: mark it <!-- {RUNNABLE} --> (or <!-- {RUNNABLE_HERE} -->) if the tests can "
        f"run it, else <!-- {NOT_RUNNABLE} REASON -->"
        for block in COMMAND_BLOCKS
        if not _marked(block)
    ]
    assert unmarked == [], "\n".join(unmarked)


def _marked(block: Block) -> bool:
    if block.marker in {RUNNABLE, RUNNABLE_HERE}:
        return True
    if block.marker.startswith(NOT_RUNNABLE):
        return bool(block.marker.removeprefix(NOT_RUNNABLE).strip())
    return page(block.page).reason_no_command_runs is not None


def test_the_docs_mark_some_commands_runnable() -> None:
    # The marker is read as written: a page that renders an example marks it so.
    assert any(block.page.name == "rendering.md" for block in RUNNABLE_BLOCKS)
    assert len(RUNNABLE_BLOCKS) >= 5


@pytest.mark.parametrize("block", RUNNABLE_BLOCKS, ids=str)
def test_a_runnable_command_block_exits_zero(block: Block) -> None:
    venv_bin = Path(sys.executable).parent
    environment = {
        **os.environ,
        "PATH": os.pathsep.join([str(venv_bin), str(ROOT / ".tools" / "bin"), os.environ["PATH"]]),
    }
    folder = block.page.parent if block.marker == RUNNABLE_HERE else ROOT
    ran = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", block.text],
        cwd=folder,
        env=environment,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    assert ran.returncode == 0, (
        f"{block} exited {ran.returncode} in {folder}:\n{block.text}\n"
        f"stdout:\n{ran.stdout[-3000:]}\nstderr:\n{ran.stderr[-3000:]}"
    )


def _objects(block: Block) -> list[dict[str, Any]]:
    documents = [doc for doc in yaml.safe_load_all(block.text) if doc is not None]
    if block.marker.startswith(FRAGMENT):
        api_version, _, kind = block.marker.removeprefix(FRAGMENT).strip().partition(" ")
        namespaced = (
            kinds()[(api_version, kind)].namespaced if (api_version, kind) in kinds() else False
        )
        metadata = {"name": "example", **({"namespace": "team-a"} if namespaced else {})}
        return [
            {"apiVersion": api_version, "kind": kind, "metadata": metadata, **document}
            for document in documents
        ]
    return documents


def _block_problems(block: Block) -> list[str]:
    if block.marker.startswith(NOT_VALIDATED):
        reason = block.marker.removeprefix(NOT_VALIDATED).strip()
        return [] if reason else [f"{block}: say why it is not validated"]
    try:
        objects = _objects(block)
    except yaml.YAMLError as error:
        return [f"{block}: not YAML: {error}"]
    found = []
    for obj in objects:
        if not isinstance(obj, dict) or not {"apiVersion", "kind"} <= obj.keys():
            found.append(
                f"{block}: a YAML block without apiVersion and kind: mark it "
                f"<!-- {FRAGMENT}APIVERSION KIND --> or <!-- {NOT_VALIDATED} REASON -->"
            )
        elif obj["kind"] == "Input" and obj["apiVersion"].startswith("controlplane.fn.acme.io/"):
            found.extend(f"{block}: Input: {problem}" for problem in input_problems(obj))
        elif (obj["apiVersion"], obj["kind"]) not in kinds():
            found.append(
                f"{block}: no schema here for {obj['apiVersion']} {obj['kind']}: mark it "
                f"<!-- {NOT_VALIDATED} REASON -->"
            )
        else:
            found.extend(
                f"{block}: {problem}"
                for problem in problems(obj)
                if not (block.marker.startswith(FRAGMENT) and _outside_fragment(problem))
            )
    return found


def _outside_fragment(problem: str) -> bool:
    """A root field the kind requires, which a fragment (a status, say) leaves out."""
    return ": <root>: " in problem and problem.endswith("is a required property")


def test_every_yaml_block_validates_against_its_kinds_schema_or_says_why_not() -> None:
    found = [problem for block in YAML_BLOCKS for problem in _block_problems(block)]
    assert found == [], "\n".join(found)


# The checks themselves, on pages made for the purpose: each can fail.


def _page(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    page.cache_clear()
    return path


@dataclass(frozen=True)
class LinkCase:
    reason: str
    target: str
    broken: bool


LINK_CASES = [
    LinkCase("A page of the repository.", "../docs/install.md", False),
    LinkCase("A heading of that page.", "../docs/install.md#prerequisites", False),
    LinkCase("A heading that is not there.", "../docs/install.md#nowhere", True),
    LinkCase("A file that is not there.", "../docs/nowhere.md", True),
    LinkCase("A heading of the page itself.", "#a-heading-with-code-and-punctuation", False),
    LinkCase("A repeated heading's second anchor.", "#again-1", False),
    LinkCase("A folder of the repository.", "../deploy/", False),
    LinkCase("A file outside the repository.", "../../elsewhere.md", True),
]


@pytest.mark.parametrize("case", LINK_CASES, ids=lambda case: case.reason)
def test_a_relative_link_is_broken_exactly_when_its_file_or_anchor_is_missing(
    case: LinkCase, tmp_path: Path
) -> None:
    repository = tmp_path / "repository"
    _page(repository, "docs/install.md", "# Install\n\n## Prerequisites\n")
    (repository / "deploy").mkdir()
    (tmp_path / "elsewhere.md").write_text("# Elsewhere\n")
    path = _page(
        repository,
        "notes/page.md",
        f"# Title\n\n## A heading, with `code` and punctuation!\n\n## Again\n\n## Again\n\n"
        f"[here]({case.target})\n",
    )
    (link,) = relative_links(path)
    assert link == Link(path, 9, case.target)
    assert (broken(link, repository) is not None) is case.broken


def test_links_inside_code_and_to_other_sites_are_not_checked(tmp_path: Path) -> None:
    path = _page(
        tmp_path,
        "page.md",
        "`[x](nowhere.md)` and [site](https://example.org/x.md)\n\n```\n[y](nowhere.md)\n```\n",
    )
    assert relative_links(path) == []


@dataclass(frozen=True)
class SlugCase:
    reason: str
    heading: str
    anchor: str


SLUG_CASES = [
    SlugCase(
        "Apostrophes and colons go.",
        "Crossplane core's circuit breaker",
        "crossplane-cores-circuit-breaker",
    ),
    SlugCase(
        "Code marks go, hyphens stay.", "`controlplane-backup verify`", "controlplane-backup-verify"
    ),
    SlugCase(
        "Digits and dots.", "4. Apply the XRDs, with your Input", "4-apply-the-xrds-with-your-input"
    ),
]


@pytest.mark.parametrize("case", SLUG_CASES, ids=lambda case: case.reason)
def test_a_headings_anchor_is_githubs(case: SlugCase) -> None:
    assert slug(case.heading) == case.anchor


@dataclass(frozen=True)
class MarkerCase:
    reason: str
    text: str
    marked: bool


MARKER_CASES = [
    MarkerCase("Unmarked.", "```shell\nls\n```\n", False),
    MarkerCase("Runnable.", "<!-- runnable -->\n```shell\nls\n```\n", True),
    MarkerCase(
        "Not runnable, with a reason.",
        "<!-- not runnable: a cluster -->\n```shell\nls\n```\n",
        True,
    ),
    MarkerCase(
        "Not runnable, without a reason.", "<!-- not runnable: -->\n```shell\nls\n```\n", False
    ),
    MarkerCase("A misspelt marker.", "<!-- runable -->\n```shell\nls\n```\n", False),
    MarkerCase(
        "The page says why none of its commands runs.",
        "<!-- no command on this page runs here: benchmarks -->\n\n```shell\nls\n```\n",
        True,
    ),
]


@pytest.mark.parametrize("case", MARKER_CASES, ids=lambda case: case.reason)
def test_a_command_block_counts_as_marked_only_with_a_known_marker(
    case: MarkerCase, tmp_path: Path
) -> None:
    (block,) = page(_page(tmp_path, "page.md", case.text)).blocks
    assert _marked(block) is case.marked


@dataclass(frozen=True)
class YamlCase:
    reason: str
    text: str
    problem: str


YAML_CASES = [
    YamlCase(
        "A ControlPlane that keeps to the XRD.",
        "```yaml\napiVersion: platform.acme.io/v1alpha1\nkind: ControlPlane\n"
        "metadata: {name: a, namespace: team-a}\nspec: {channel: Stable}\n```\n",
        "",
    ),
    YamlCase(
        "A ControlPlane with a field the XRD does not have.",
        "```yaml\napiVersion: platform.acme.io/v1alpha1\nkind: ControlPlane\n"
        "metadata: {name: a, namespace: team-a}\nspec: {backup: {sheduel: '@daily'}}\n```\n",
        "'sheduel' was unexpected",
    ),
    YamlCase(
        "A fragment of a ControlPlane, validated as one.",
        "<!-- fragment of platform.acme.io/v1alpha1 ControlPlane -->\n"
        "```yaml\nspec: {channel: Beta}\n```\n",
        "'Beta' is not one of",
    ),
    YamlCase(
        "A fragment without its marker.",
        "```yaml\nspec: {channel: Stable}\n```\n",
        "without apiVersion",
    ),
    YamlCase(
        "A kind with no schema here.",
        "```yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n```\n",
        "no schema here for v1 ConfigMap",
    ),
    YamlCase(
        "A kind with no schema here, marked.",
        "<!-- not validated: Kubernetes' own kind -->\n"
        "```yaml\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n```\n",
        "",
    ),
    YamlCase(
        "A function Input, against the Input CRD.",
        "```yaml\napiVersion: controlplane.fn.acme.io/v1beta1\nkind: Input\n"
        "source: {allowHTTP: 'yes'}\n```\n",
        "'yes' is not of type 'boolean'",
    ),
]


@pytest.mark.parametrize("case", YAML_CASES, ids=lambda case: case.reason)
def test_a_yaml_block_is_judged_by_its_kinds_schema(case: YamlCase, tmp_path: Path) -> None:
    (block,) = page(_page(tmp_path, "page.md", case.text)).blocks
    found = "\n".join(_block_problems(block))
    if case.problem:
        assert case.problem in found
    else:
        assert found == ""


# Within two clicks of the README: its links, and the links of the pages they name.
README_TARGETS = [
    ("The install steps.", "docs/install.md", ""),
    ("A team's first ControlPlane.", "docs/team-guide.md", "your-first-controlplane"),
    ("What a failing condition means.", "docs/troubleshooting.md", ""),
]


@pytest.mark.parametrize(
    ("reason", "target", "anchor"), README_TARGETS, ids=[t[0] for t in README_TARGETS]
)
def test_the_readme_leads_to_it_within_two_clicks(reason: str, target: str, anchor: str) -> None:
    readme = ROOT / "README.md"
    reached: set[tuple[Path, str]] = set()
    queue: deque[tuple[Path, int]] = deque([(readme, 0)])
    seen = {readme}
    while queue:
        path, clicks = queue.popleft()
        if clicks == 2 or path.suffix != ".md":
            continue
        for link in relative_links(path):
            found, link_anchor = resolve(link)
            reached.add((found, link_anchor))
            reached.add((found, ""))
            if found not in seen:
                seen.add(found)
                queue.append((found, clicks + 1))
    assert (ROOT / target, anchor) in reached, reason
    assert not anchor or anchor in anchors(ROOT / target)
