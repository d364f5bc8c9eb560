"""Progress of a long export or restore, for a person at a terminal or a log.

On a terminal one line is redrawn in place (objects done, rate, time left) at
most ten times a second; anywhere else (a pipe, a CI log) a plain line is
written every few seconds, and one at the end. Pure: it writes to the stream
it is given and reads the clock it is given.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

TERMINAL_INTERVAL_SECONDS = 0.1
PLAIN_INTERVAL_SECONDS = 5.0
# Erase the line the cursor is on, then write from its start.
_REDRAW = "\r\x1b[K"
_SECONDS_PER_MINUTE = 60
_SECONDS_PER_HOUR = 3600


def duration(seconds: float) -> str:
    """A short, rounded duration: ``42s``, ``3m05s``, ``1h02m``."""
    whole = max(0, round(seconds))
    if whole < _SECONDS_PER_MINUTE:
        return f"{whole}s"
    if whole < _SECONDS_PER_HOUR:
        return f"{whole // _SECONDS_PER_MINUTE}m{whole % _SECONDS_PER_MINUTE:02d}s"
    return f"{whole // _SECONDS_PER_HOUR}h{whole % _SECONDS_PER_HOUR // _SECONDS_PER_MINUTE:02d}m"


class Progress:
    """Counts objects done out of an expected total and shows it on ``stream``."""

    def __init__(
        self,
        stream: TextIO,
        action: str,
        total: int | None = None,
        *,
        terminal: bool | None = None,
        clock: Callable[[], float] = time.monotonic,
        interval: float | None = None,
    ) -> None:
        """Start counting.

        Args:
            stream: where the progress goes (standard error).
            action: what is being done, such as ``restore``.
            total: how many objects are expected, if known; an estimate is fine.
            terminal: redraw one line in place; default: whether ``stream`` is a terminal.
            clock: seconds, monotonic.
            interval: the least time between two updates; default by ``terminal``.
        """
        self.stream = stream
        self.action = action
        self.total = total
        self.terminal = stream.isatty() if terminal is None else terminal
        default = TERMINAL_INTERVAL_SECONDS if self.terminal else PLAIN_INTERVAL_SECONDS
        self.interval = default if interval is None else interval
        self.clock = clock
        self.done = 0
        self.started = clock()
        self._shown_at: float | None = None
        self._visible = False

    def advance(self, count: int) -> None:
        """``count`` more objects are done; show it if the last update is old enough."""
        self.done += count
        now = self.clock()
        if self._shown_at is None or now - self._shown_at >= self.interval:
            self._show(now)

    def clear(self) -> None:
        """On a terminal, erase the progress line so another line can take its place."""
        if self.terminal and self._visible:
            self.stream.write(_REDRAW)
            self.stream.flush()
            self._visible = False

    def finish(self) -> None:
        """Show the final count on a line of its own."""
        self._show(self.clock(), final=True)

    def line(self, now: float, *, final: bool = False) -> str:
        """The progress as text, without a line ending."""
        elapsed = now - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        total = self.total
        if final or total is None:
            counted = f"{self.done} objects"
        else:
            # An estimated total may be passed: never show more done than expected.
            total = max(total, self.done)
            percent = 100 * self.done // total if total else 100
            counted = f"{self.done}/{total} objects ({percent}%)"
        parts = [f"{self.action}: {counted}", f"{rate:.0f} objects/s"]
        if final:
            parts.append(f"done in {duration(elapsed)}")
        elif total is not None and rate > 0:
            parts.append(f"about {duration((total - self.done) / rate)} left")
        return ", ".join(parts)

    def _show(self, now: float, *, final: bool = False) -> None:
        text = self.line(now, final=final)
        if self.terminal:
            self.stream.write(_REDRAW + text + ("\n" if final else ""))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self._shown_at = now
        self._visible = self.terminal and not final
