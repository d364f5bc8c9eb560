"""Pure validation rules shared by the models: durations, cron, URLs and names.

Each checker raises ``ValueError`` with a message that states the rule, so a
pydantic error names the field path and the rule together.
"""

from __future__ import annotations

import functools
import re
from datetime import timedelta
from urllib.parse import urlsplit

# Flux's duration fields take these units (a subset of Go's); its GitRepository
# timeout takes no hours.
DURATION_UNITS = ("ms", "s", "m", "h")
TIMEOUT_UNITS = ("ms", "s", "m")
_UNIT_SECONDS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}

DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
S3_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
AWS_REGION = re.compile(r"[a-z]{2}(-[a-z]+)+-\d")
SEMVER = re.compile(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?")
# A Kubernetes apiVersion (group/version, or a core version alone), a kind, and a
# variable name as Flux's postBuild substitution accepts it.
API_VERSION = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?v[0-9][a-z0-9]*"
)
KIND = re.compile(r"[A-Z][A-Za-z0-9]*")
VARIABLE_NAME = re.compile(r"[_a-zA-Z][_a-zA-Z0-9]*")
ARN = re.compile(r"arn:aws[a-z-]*:[a-z0-9-]+:[a-z0-9-]*:\d{0,12}:.+")

GIT_URL_SCHEMES = ("http", "https", "ssh")
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
CRON_MACROS = ("@hourly", "@daily", "@weekly")
CRON_EVERY = "@every "
_MINUTE = timedelta(minutes=1)
# (name, low, high, names accepted in place of numbers)
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    (
        "month",
        1,
        12,
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    ),
    ("day of week", 0, 7, ("sun", "mon", "tue", "wed", "thu", "fri", "sat")),
)


def parse_duration(text: str, units: tuple[str, ...] = DURATION_UNITS) -> timedelta:
    """Parse a duration such as ``1m30s`` or ``168h`` in the given units.

    Raises:
        ValueError: the text is not such a duration.
    """
    whole, part = _duration_patterns(units)
    if not whole.fullmatch(text):
        example = "30s, 5m or 168h" if "h" in units else "30s, 90s or 5m"
        msg = f"must be a duration in {', '.join(units)} such as {example} (got {text!r})"
        raise ValueError(msg)
    parts = part.findall(text)
    return timedelta(seconds=sum(float(number) * _UNIT_SECONDS[u] for number, u in parts))


# Durations are parsed on every composition; their patterns are built once per set of units.
@functools.cache
def _duration_patterns(units: tuple[str, ...]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    unit = "|".join(sorted(units, key=len, reverse=True))
    return re.compile(rf"(?:\d+(?:\.\d+)?(?:{unit}))+"), re.compile(rf"(\d+(?:\.\d+)?)({unit})")


def duration_at_least(
    text: str, minimum: timedelta, units: tuple[str, ...] = DURATION_UNITS
) -> str:
    """Check that ``text`` is a duration of at least ``minimum``; return it unchanged."""
    if parse_duration(text, units) < minimum:
        msg = f"must be at least {format_duration(minimum)} (got {text})"
        raise ValueError(msg)
    return text


def format_duration(value: timedelta) -> str:
    """Format whole seconds the way Go prints a duration (``1h0m0s`` becomes ``1h``)."""
    seconds = int(value.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n]
    return "".join(parts) or "0s"


def check_cron(text: str) -> str:
    """Check a five-field cron expression, a macro or ``@every <duration>``; return it unchanged.

    ``@every`` takes a Go duration of whole minutes, at least one (robfig/cron's
    syntax, which Spaces' schedules take; the Backup controller fires at minute
    resolution).
    """
    if text.startswith(CRON_EVERY):
        check_every(text.removeprefix(CRON_EVERY))
        return text
    if text.startswith("@"):
        if text not in CRON_MACROS:
            msg = (
                f"must be a 5-field cron expression, one of {', '.join(CRON_MACROS)} "
                "or @every <duration>"
            )
            raise ValueError(f"{msg} (got {text!r})")
        return text
    fields = text.split()
    if len(fields) != len(_CRON_FIELDS):
        msg = f"must be a cron expression of 5 fields (got {len(fields)} in {text!r})"
        raise ValueError(msg)
    allowed = [
        {value for item in field.split(",") for value in _cron_item(item, name, low, high, names)}
        for field, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True)
    ]
    # With the day of week unrestricted, the day of month alone must fall in a
    # month that has it (Vixie cron's rule), or the schedule never fires.
    days, months = allowed[2], allowed[3]
    if fields[4].startswith("*") and not any(
        day <= _MONTH_DAYS[month - 1] for day in days for month in months
    ):
        msg = f"never fires: no month in {fields[3]!r} has day {fields[2]!r} (in {text!r})"
        raise ValueError(msg)
    return text


def check_every(duration: str) -> timedelta:
    """The interval of ``@every <duration>``: whole minutes, at least one."""
    interval = parse_duration(duration)
    if interval < _MINUTE or interval % _MINUTE:
        msg = f"@every must be a whole number of minutes, at least 1m (got {duration!r})"
        raise ValueError(msg)
    return interval


def _cron_item(item: str, name: str, low: int, high: int, names: tuple[str, ...]) -> range:
    """The values one comma-separated item allows."""
    span, slash, step = item.partition("/")
    if slash and (not step.isdigit() or int(step) == 0):
        msg = f"cron {name} step must be a positive number (got {item!r})"
        raise ValueError(msg)
    if span == "*":
        return range(low, high + 1, int(step or 1))
    bounds = span.split("-")
    if len(bounds) > 2:
        msg = f"cron {name} must be a number, a range or * (got {item!r})"
        raise ValueError(msg)
    if slash and len(bounds) == 1:
        msg = f"cron {name} step needs * or a range before it (got {item!r})"
        raise ValueError(msg)
    values = [_cron_value(bound, name, low, high, names) for bound in bounds]
    if len(values) == 2 and values[0] > values[1]:
        msg = f"cron {name} range must go upwards (got {item!r})"
        raise ValueError(msg)
    return range(values[0], values[-1] + 1, int(step or 1))


def _cron_value(text: str, name: str, low: int, high: int, names: tuple[str, ...]) -> int:
    if text.lower() in names:
        return names.index(text.lower()) + low
    if not text.isdigit() or not low <= int(text) <= high:
        msg = f"cron {name} must be within {low}-{high} (got {text!r})"
        raise ValueError(msg)
    return int(text)


CREDENTIALS_IN_URL = (
    "must not carry credentials (a user:password@ part); "
    "put them in the Secret that spec.source.secretRef names"
)


def check_git_url(text: str) -> str:
    """Check that a git URL uses http, https or ssh, has no password, a host and a sound port.

    No message quotes the URL's user-info part, which may hold a password.
    Returns the URL unchanged.
    """
    parts = urlsplit(text)
    if parts.scheme not in GIT_URL_SCHEMES:
        shown = parts.scheme or "none"
        msg = f"must be an http, https or ssh URL (got scheme {shown!r})"
        raise ValueError(msg)
    # A password field, even an empty one ("user:@"), is a credential in the
    # URL; a user name alone (ssh://git@host) is not.
    if parts.password is not None:
        raise ValueError(CREDENTIALS_IN_URL)
    if not parts.hostname:
        shown = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
        msg = f"must name a host (got {shown!r})"
        raise ValueError(msg)
    try:
        _ = parts.port
    except ValueError:
        msg = "must have a port from 0 to 65535 when it names one"
        raise ValueError(msg) from None
    return text


def check_pattern(text: str, pattern: re.Pattern[str], what: str, max_length: int) -> str:
    """Check ``text`` against ``pattern`` and a length limit; return it unchanged."""
    if len(text) > max_length or not pattern.fullmatch(text):
        msg = f"must be {what} of at most {max_length} characters (got {text!r})"
        raise ValueError(msg)
    return text
