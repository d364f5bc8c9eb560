"""CHANGELOG.md: an Unreleased section with its headings, dated releases, and one version.

The newest release in the changelog is the version ``pyproject.toml`` gives
the product and its images, and every place that names the packages by tag
names that version (docs/contributing.md, "Releases and versions").
"""

from __future__ import annotations

import re
import tomllib
from datetime import date

import pytest
import yaml

from sandbox.registry import PACKAGE_VERSION
from tests.docs.markdown_files import ROOT

CHANGELOG = ROOT / "CHANGELOG.md"
UNRELEASED_HEADINGS = ["Upgrade notes", "Added", "Changed", "Removed", "Fixed", "Security"]
RELEASE = re.compile(r"^## \[(?P<version>\d+\.\d+\.\d+)\] - (?P<date>\d{4}-\d{2}-\d{2})$")


def _sections() -> list[tuple[str, list[str]]]:
    """The changelog's level-2 sections, each with its lines."""
    sections: list[tuple[str, list[str]]] = []
    for line in CHANGELOG.read_text().splitlines():
        if line.startswith("## "):
            sections.append((line, []))
        elif sections:
            sections[-1][1].append(line)
    return sections


def _version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def _releases() -> list[tuple[str, str]]:
    return [
        (match["version"], match["date"])
        for heading, _ in _sections()
        if (match := RELEASE.match(heading))
    ]


def test_unreleased_comes_first_with_every_heading_a_change_goes_under() -> None:
    heading, lines = _sections()[0]
    assert heading == "## [Unreleased]"
    found = [line.removeprefix("### ") for line in lines if line.startswith("### ")]
    assert found == UNRELEASED_HEADINGS


def test_every_other_section_is_a_dated_release_newest_first() -> None:
    headings = [heading for heading, _ in _sections()[1:]]
    releases = _releases()
    assert len(releases) == len(headings), f"not `## [X.Y.Z] - YYYY-MM-DD`: {headings}"
    versions = [tuple(int(part) for part in v.split(".")) for v, _ in releases]
    assert versions == sorted(versions, reverse=True)
    dates = [date.fromisoformat(d) for _, d in releases]
    assert dates == sorted(dates, reverse=True)


def test_the_newest_release_is_the_products_version() -> None:
    assert _releases()[0][0] == _version(), "cut releases as docs/contributing.md says"


def _package_tags() -> list[tuple[str, str]]:
    tags = [("sandbox/registry.py PACKAGE_VERSION", PACKAGE_VERSION)]
    kustomization = yaml.safe_load(
        (ROOT / "deploy" / "backup-controller" / "kustomization.yaml").read_text()
    )
    tags += [
        (f"deploy/backup-controller/kustomization.yaml {image['name']}", image["newTag"])
        for image in kustomization["images"]
    ]
    for path in sorted((ROOT / "examples").glob("*/functions.yaml")):
        for function in yaml.safe_load_all(path.read_text()):
            tags.append(
                (str(path.relative_to(ROOT)), function["spec"]["package"].rpartition(":")[2])
            )
    return tags


@pytest.mark.parametrize(("where", "tag"), _package_tags(), ids=[w for w, _ in _package_tags()])
def test_every_package_tag_names_the_products_version(where: str, tag: str) -> None:
    assert tag == f"v{_version()}", f"{where} names {tag}: set it to v{_version()}"


def test_the_changelogs_links_to_versions_name_each_release() -> None:
    text = CHANGELOG.read_text()
    for version, _ in _releases():
        assert f"[{version}]: " in text, version
    assert "[Unreleased]: " in text
    assert text.count("## [Unreleased]") == 1
