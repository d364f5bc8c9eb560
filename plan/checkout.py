"""Revisions of a team's git checkout, each as a folder the way Flux's artifact holds it.

``git archive`` writes a revision's tree (what source-controller packs, less
its ignore rules, which kustomize-controller's build applies again) into a
temporary folder; the working tree is used as it is.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class CheckoutError(Exception):
    """A revision cannot be read from the checkout; the message says which and why."""


def resolve(repository: Path, revision: str) -> str:
    """The commit ``revision`` names in ``repository``.

    Raises:
        CheckoutError: it names no commit there.
    """
    finished = _git(repository, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    sha = finished.stdout.decode().strip()
    if finished.returncode != 0 or not sha:
        msg = f"{revision!r} names no commit in {repository}"
        raise CheckoutError(msg)
    return sha


@contextmanager
def revision_tree(repository: Path, revision: str) -> Iterator[Path]:
    """The tree of ``revision`` in a temporary folder, removed afterwards.

    ``git archive`` piped into tar: git's own paths hold no ``..`` and no
    absolute name, and the stage's build reads only below the folder (Flux's
    secure file system), whatever a symbolic link in it points to.

    Raises:
        CheckoutError: the revision cannot be read.
    """
    sha = resolve(repository, revision)
    with tempfile.TemporaryDirectory(prefix="plan-revision-") as folder:
        archive = subprocess.Popen(  # noqa: S603
            ["git", "-C", str(repository), "archive", "--format=tar", sha],  # noqa: S607
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        assert archive.stdout is not None
        try:
            extract = subprocess.run(  # noqa: S603
                ["tar", "-x", "--no-same-owner", "-C", folder],  # noqa: S607
                stdin=archive.stdout,
                capture_output=True,
                check=False,
            )
        except OSError as error:
            msg = f"cannot run tar: {error.strerror}"
            raise CheckoutError(msg) from None
        finally:
            archive.stdout.close()
            archive.wait()
        if archive.returncode != 0 or extract.returncode != 0:
            msg = f"cannot read revision {revision} (git archive exit code {archive.returncode})"
            raise CheckoutError(msg)
        yield Path(folder)


def _git(repository: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(  # noqa: S603
            ["git", "-C", str(repository), *args],  # noqa: S607
            capture_output=True,
            check=False,
        )
    except OSError as error:
        msg = f"cannot run git: {error.strerror}"
        raise CheckoutError(msg) from None
