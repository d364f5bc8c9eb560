"""Child processes of the sandbox: started with a readiness probe, logged to a file, stopped.

Every process runs in a session of its own (a Ctrl-C reaches the sandbox,
which then stops its children in order) with its output in one log file, and
is stopped with SIGTERM, then SIGKILL after a grace period. An
`ImageProcess` runs from an image's root filesystem (`sandbox.rootfs`): its
signals go to the program, not to the `unshare` that started it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

from sandbox import rootfs
from sandbox.apiserver import StartError

POLL_INTERVAL = 0.1
STOP_GRACE = 10.0
LOG_TAIL_LINES = 40


class Process:
    """One child process: its argv, environment, working folder and log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self._log: IO[bytes] | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """Its process id while it runs."""
        return self._popen.pid if self._popen is not None else None

    def start(self, ready: Callable[[], bool] | None = None, *, timeout: float = 60.0) -> None:
        """Start it and wait until `ready` holds (if given).

        Raises:
            StartError: It exited, or was not ready within `timeout` seconds; the
                message holds the tail of its log.
        """
        self._log = self.log_path.open("ab")
        self._popen = self._spawn(self._log)
        if ready is None:
            return
        deadline = time.monotonic() + timeout
        while not ready():
            self.raise_if_exited()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise StartError(f"{self.name} not ready within {timeout:g}s:\n{self.log_tail()}")
            # Waiting on the process itself sees an early exit at once.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._popen.wait(timeout=min(POLL_INTERVAL, remaining))

    def _spawn(self, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.argv,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def running(self) -> bool:
        """Whether it was started and has not exited."""
        return self._popen is not None and self._popen.poll() is None

    def raise_if_exited(self) -> None:
        """Raise StartError with its log tail if it has exited."""
        if self._popen is not None and (code := self._popen.poll()) is not None:
            raise StartError(f"{self.name} exited with status {code}:\n{self.log_tail()}")

    def wait(self, timeout: float) -> int:
        """Wait for it to exit; its exit status."""
        if self._popen is None:
            raise RuntimeError(f"{self.name} was not started")
        return self._popen.wait(timeout=timeout)

    def kill(self) -> None:
        """SIGKILL: it gets no chance to finish anything."""
        if self.running() and self._popen is not None:
            self._send(self._popen, signal.SIGKILL)
            self._popen.wait()
        self._close_log()

    def _send(self, popen: subprocess.Popen[bytes], signum: int) -> None:
        popen.send_signal(signum)

    def stop(self, *, grace: float = STOP_GRACE) -> None:
        """SIGTERM, then SIGKILL if it is still there after `grace` seconds."""
        if self._popen is not None and self._popen.poll() is None:
            self._send(self._popen, signal.SIGTERM)
            try:
                self._popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                # For an image's process, unshare --kill-child takes it along.
                self._popen.kill()
                self._popen.wait()
        self._close_log()

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last lines of its output."""
        if not self.log_path.exists():
            return ""
        text = self.log_path.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


class ImageProcess(Process):
    """A process run from an image's unpacked root filesystem (`sandbox.rootfs`).

    It gets the image's environment with `env` only, never the host's, and
    `binds` mounted. Signals go to the program itself (its pid namespace's
    first process), so a SIGKILL kills the real process, as in a pod.
    """

    def __init__(
        self,
        name: str,
        image: rootfs.Image,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        binds: Sequence[rootfs.Bind] = (),
    ) -> None:
        super().__init__(name, argv, log_path)
        self.image = image
        self.env = dict(env or {})
        self.binds = tuple(binds)

    @property
    def pid(self) -> int | None:
        """The program's process id on the host (not unshare's) while it runs."""
        return rootfs.first_process(self._popen) if self._popen is not None else None

    def _spawn(self, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return rootfs.popen(
            self.image,
            command=self.argv,
            env=self.env,
            binds=self.binds,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def _send(self, popen: subprocess.Popen[bytes], signum: int) -> None:
        rootfs.signal_process(popen, signum)
