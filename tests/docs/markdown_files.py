"""The repository's Markdown as the docs tests read it: headings, links and fenced blocks.

A fenced block may carry a marker, an HTML comment on the line before its fence:

- ``<!-- runnable -->``: a command block the tests run from the repository root;
  ``<!-- runnable from this folder -->`` runs it from the page's own folder;
- ``<!-- not runnable: REASON -->``: a command block the tests do not run, and why;
- ``<!-- fragment of APIVERSION KIND -->``: a YAML block that is part of an
  object of that kind (its spec or status), validated as one;
- ``<!-- not validated: REASON -->``: a YAML block with no schema here, and why.

A page may say once why none of its commands run here:
``<!-- no command on this page runs here: REASON -->``.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Folders of builds, never documentation (and every hidden folder: tools, caches, the venv).
SKIPPED = {"dist", "node_modules"}
COMMAND_LANGUAGES = {"shell", "sh", "bash", "console", "zsh"}
YAML_LANGUAGES = {"yaml", "yml"}

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
_HEADING = re.compile(r"^(#{1,6}) +(.+?) *#* *$")
_MARKER = re.compile(r"^ *<!-- *(?P<text>.*?) *-->$")
_PAGE_REASON = re.compile(r"<!-- *no command on this page runs here: *(?P<reason>.+?) *-->")
_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\((?P<target><[^>]*>|[^)\s]+)(?: +\"[^\"]*\")?\)")
_REFERENCE_LINK = re.compile(r"^ {0,3}\[[^\]]+\]: +(?P<target>\S+)", re.MULTILINE)
_HTML_ANCHOR = re.compile(r"<a +(?:id|name)=\"(?P<anchor>[^\"]+)\"")
_CODE_SPAN = re.compile(r"(`+).+?\1")


@dataclass(frozen=True)
class Block:
    """A fenced block of a page."""

    page: Path
    line: int
    language: str
    marker: str
    text: str

    def __str__(self) -> str:
        where = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{where}:{self.line}"


@dataclass(frozen=True)
class Link:
    """A relative link of a page."""

    page: Path
    line: int
    target: str

    def __str__(self) -> str:
        where = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{where}:{self.line} -> {self.target}"


@dataclass(frozen=True)
class Page:
    """A Markdown file, read once."""

    path: Path
    lines: tuple[str, ...]
    blocks: tuple[Block, ...]
    prose: tuple[tuple[int, str], ...]
    """The lines outside fenced blocks, with their numbers."""

    @property
    def reason_no_command_runs(self) -> str | None:
        """The page's reason why none of its commands run here, if it gives one."""
        found = _PAGE_REASON.search("\n".join(self.lines))
        return found.group("reason") if found else None


def markdown_files(root: Path = ROOT) -> list[Path]:
    """Every Markdown file of the repository, in a stable order."""
    return sorted(
        path
        for path in root.rglob("*.md")
        if not any(
            part in SKIPPED or part.startswith(".") for part in path.parent.relative_to(root).parts
        )
    )


@cache
def page(path: Path) -> Page:
    """A Markdown file's blocks and prose."""
    lines = tuple(path.read_text(encoding="utf-8").split("\n"))
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            prose.append((index + 1, lines[index]))
            index += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent"))
        closing = re.compile(rf"^ *{re.escape(fence)}{fence[0]}* *$")
        end = index + 1
        while end < len(lines) and not closing.match(lines[end]):
            end += 1
        body = "\n".join(_dedent(line, indent) for line in lines[index + 1 : end])
        blocks.append(
            Block(
                page=path,
                line=index + 1,
                language=opening.group("info").strip().split(" ")[0].lower(),
                marker=_marker_before(lines, index),
                text=body + "\n",
            )
        )
        index = end + 1
    return Page(path, lines, tuple(blocks), tuple(prose))


def _dedent(line: str, indent: int) -> str:
    """A block's line without the indentation of its fence (a block inside a list item)."""
    return line[indent:] if line[:indent].isspace() else line


def _marker_before(lines: tuple[str, ...], index: int) -> str:
    """The comment on the last non-blank line before a fence, if there is one."""
    before = index - 1
    while before >= 0 and not lines[before].strip():
        before -= 1
    found = _MARKER.match(lines[before]) if before >= 0 else None
    return found.group("text") if found else ""


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"<[^>]+>", "", heading).lower()
    kept = "".join(
        char for char in text if char in " -_" or unicodedata.category(char)[0] in {"L", "N"}
    )
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor of a page: its headings' (numbered when repeated) and explicit ones."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in page(path).prose:
        heading = _HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(match.group("anchor") for match in _HTML_ANCHOR.finditer(line))
    return found


def relative_links(path: Path) -> list[Link]:
    """Every link of a page that is not to another site, outside code."""
    links = []
    for number, line in page(path).prose:
        outside_code = _CODE_SPAN.sub("", line)
        targets = [m.group("target") for m in _LINK.finditer(outside_code)]
        targets += [m.group("target") for m in _REFERENCE_LINK.finditer(outside_code)]
        for target in (found.strip("<>") for found in targets):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            links.append(Link(path, number, target))
    return links


def broken(link: Link, root: Path = ROOT) -> str | None:
    """Why a relative link does not resolve within ``root``, or None when it does."""
    target, anchor = resolve(link)
    if not target.is_relative_to(root):
        return f"{link}: outside the repository"
    if not target.exists():
        return f"{link}: no such file"
    if anchor and target.suffix == ".md" and anchor not in anchors(target):
        return f"{link}: {target.relative_to(root)} has no heading with anchor #{anchor}"
    return None


def resolve(link: Link) -> tuple[Path, str]:
    """The file and anchor a relative link points at."""
    file_part, _, anchor = link.target.partition("#")
    return ((link.page.parent / file_part).resolve() if file_part else link.page), anchor
