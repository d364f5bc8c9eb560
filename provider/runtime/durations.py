"""Go's duration syntax (``time.ParseDuration``), which Crossplane's flags take.

``300ms``, ``30s``, ``1m``, ``1h30m`` and ``1.5h`` are durations; a bare number
but ``0`` is not (it has no unit), as in Go.
"""

from __future__ import annotations

import re

_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "\u00b5s": 1e-6,  # micro sign
    "\u03bcs": 1e-6,  # Greek small letter mu
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_UNITS = "|".join(sorted(_UNIT_SECONDS, key=len, reverse=True))
_PART = re.compile(rf"(\d+\.?\d*|\.\d+)({_UNITS})")
_DURATION = re.compile(rf"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:{_UNITS}))+")


def parse_go_duration(text: str) -> float:
    """The seconds of a Go duration such as ``1h30m``.

    Raises:
        ValueError: ``text`` is not a Go duration; the message says why.
    """
    if text in ("0", "+0", "-0"):
        return 0.0
    if not _DURATION.fullmatch(text):
        reason = "missing unit" if re.fullmatch(r"[-+]?[\d.]+", text) else "invalid duration"
        msg = f"{reason} in {text!r}: a duration is a number and a unit (ns, us, ms, s, m, h)"
        raise ValueError(msg)
    seconds = sum(float(number) * _UNIT_SECONDS[unit] for number, unit in _PART.findall(text))
    return -seconds if text.startswith("-") else seconds


def format_go_duration(seconds: float) -> str:
    """Whole seconds the short way Go's flags show them (``3600`` becomes ``1h``)."""
    whole = int(seconds)
    if whole != seconds or whole <= 0:
        return f"{seconds:g}s"
    hours, rest = divmod(whole, 3600)
    minutes, rest = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (rest, "s")) if n]
    return "".join(parts)
