"""How a process of ours (function, provider, backup controller, AWS stand-in) is launched.

The one place that knows where our programs come from. Today they are the
console scripts of the development virtualenv this interpreter runs in; an
image's root filesystem would be another `Launcher` giving the image's
entrypoint, environment and working directory.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class Command:
    """What to run: the argv, the extra environment, and the working directory."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None


class Launcher(Protocol):
    """Gives the command that runs one of our programs with its arguments."""

    def command(self, program: str, *args: str) -> Command:
        """The command running `program` (a console script name) with `args`."""
        ...


@dataclass(frozen=True)
class VirtualenvLauncher:
    """Runs our console scripts from a virtualenv's bin folder (this interpreter's by default)."""

    bin_dir: Path = field(default_factory=lambda: Path(sys.executable).parent)

    def command(self, program: str, *args: str) -> Command:
        """The console script `program` of the virtualenv, with `args`."""
        script = self.bin_dir / program
        if not script.is_file():
            raise FileNotFoundError(f"{script} is missing: run `make .venv/.installed`")
        return Command((str(script), *args))
