"""Markdown for generated pages: tables, escaping, and blocks kept between markers.

A hand-written page holds a generated block between two comments::

    <!-- BEGIN GENERATED input-fields: make docs writes this; edit the schema instead -->
    ...
    <!-- END GENERATED input-fields -->

``replace_blocks`` rewrites what is between them and keeps the prose around.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

BEGIN = "<!-- BEGIN GENERATED {name}: make docs writes this; edit the source instead -->"
END = "<!-- END GENERATED {name} -->"
_BLOCK = re.compile(
    r"<!-- BEGIN GENERATED (?P<name>[a-z0-9-]+)(?::[^>]*)? -->\n"
    r".*?<!-- END GENERATED (?P=name) -->",
    re.DOTALL,
)
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")


class MissingBlockError(ValueError):
    """A page lacks the markers of a block the generator writes."""


def text(value: str) -> str:
    """``value`` as table-cell text: no HTML, no emphasis, no cell breaks; code spans kept."""
    out = []
    last = 0
    for span in _CODE_SPAN.finditer(value):
        out.append(_escape(value[last : span.start()]))
        out.append(code_in_cell(span.group(2), span.group(1)))
        last = span.end()
    out.append(_escape(value[last:]))
    return "".join(out)


def _escape(value: str) -> str:
    for raw, escaped in (
        ("\\", "\\\\"),
        ("|", "\\|"),
        ("*", "\\*"),
        ("<", "&lt;"),
        (">", "&gt;"),
        ("[", "\\["),
        ("]", "\\]"),
    ):
        value = value.replace(raw, escaped)
    return value


def code(value: str) -> str:
    """``value`` as a code span (empty for empty), fit for a table cell."""
    return code_in_cell(value, "`" * (_longest_backtick_run(value) + 1)) if value else ""


def code_in_cell(value: str, fence: str = "`") -> str:
    """A code span in a table cell, its pipes escaped: GitHub reads them so in a table."""
    padded = f" {value} " if value.startswith("`") or value.endswith("`") else value
    return f"{fence}{padded.replace('|', chr(92) + '|')}{fence}"


def _longest_backtick_run(value: str) -> int:
    return max((len(run) for run in re.findall(r"`+", value)), default=0)


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub table; cells are used as given (escape them with ``text`` or ``code``)."""
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" for _ in header) + "|",
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    return "\n".join(lines) + "\n"


def block(name: str, content: str) -> str:
    """A generated block with its markers."""
    return f"{BEGIN.format(name=name)}\n{content.rstrip()}\n{END.format(name=name)}"


def block_names(page: str) -> list[str]:
    """The names of the generated blocks a page holds, in order."""
    return [match.group("name") for match in _BLOCK.finditer(page)]


def replace_blocks(page: str, contents: Mapping[str, str], where: str) -> str:
    """``page`` with each named block's content replaced; every block must be there."""
    missing = sorted(set(contents) - set(block_names(page)))
    if missing:
        markers = ", ".join(
            f"{BEGIN.format(name=name)} ... {END.format(name=name)}" for name in missing
        )
        msg = f"{where} has no generated block {', '.join(missing)}: put {markers} where it goes"
        raise MissingBlockError(msg)

    def replaced(match: re.Match[str]) -> str:
        name = match.group("name")
        return block(name, contents[name]) if name in contents else match.group(0)

    return _BLOCK.sub(replaced, page)
