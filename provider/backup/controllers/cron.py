"""Cron expressions (pure): parse the five-field syntax and find firing times in UTC.

``@every <duration>`` (robfig/cron's, which Spaces' schedules take) fires at
every multiple of the duration counted from the Unix epoch, so its times are
known without remembering when the schedule began: ``@every 6h`` fires at
00:00, 06:00, 12:00 and 18:00 UTC. The duration is whole minutes, at least one.

The syntax and the day rule are Vixie cron's: a day matches when both the
day-of-month and the day-of-week match, except that when neither field starts
with ``*`` a day matches if either does (``0 0 1 * mon`` fires on the first of
the month and on every Monday). Times are searched field by field, skipping
whole months, days and hours, so a search costs some forty steps per year it
crosses, even for an expression that fires once in decades.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from provider.runtime.durations import parse_go_duration

MACROS = {
    "@hourly": "0 * * * *",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@weekly": "0 0 * * 0",
    "@monthly": "0 0 1 * *",
}
MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
DAY_NAMES = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")

_MINUTE = timedelta(minutes=1)
_DAY = timedelta(days=1)
# February counts its leap day: "0 0 29 2 *" fires, if only every four years.
_LONGEST_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
_ITEM = re.compile(
    r"(?:(?P<star>\*)|(?P<low>[0-9a-z]+)(?:-(?P<high>[0-9a-z]+))?)(?:/(?P<step>.*))?"
)


EVERY = "@every "
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class CronError(ValueError):
    """A cron expression that is malformed or can never fire; the message names the rule."""


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()

    def parse(self, text: str) -> tuple[int, ...]:
        """The sorted values ``text`` (a comma-separated list) selects."""
        values: set[int] = set()
        for item in text.split(","):
            values.update(self._item(item, text))
        return tuple(sorted(values))

    def _item(self, item: str, text: str) -> range:
        if not item:
            msg = f"{self.name} has an empty list item (got {text!r})"
            raise CronError(msg)
        match = _ITEM.fullmatch(item.lower())
        if match is None:
            msg = f"{self.name} must be *, a value or a range a-b, each with /step (got {item!r})"
            raise CronError(msg)
        step = 1
        if match["step"] is not None:
            # Vixie cron reads "5/10" as an error, not as "5-max/10": only * and ranges step.
            if match["star"] is None and match["high"] is None:
                msg = f"{self.name} step needs * or a range before it (got {item!r})"
                raise CronError(msg)
            if not match["step"].isascii() or not match["step"].isdigit() or not int(match["step"]):
                msg = f"{self.name} step must be a positive whole number (got {item!r})"
                raise CronError(msg)
            step = int(match["step"])
        if match["star"] is not None:
            return range(self.low, self.high + 1, step)
        low = self._value(match["low"])
        high = low if match["high"] is None else self._value(match["high"])
        if low > high:
            msg = f"{self.name} range must go upwards (got {item!r})"
            raise CronError(msg)
        return range(low, high + 1, step)

    def _value(self, token: str) -> int:
        if token in self.names:
            return self.names.index(token) + self.low
        if token.isdigit() and self.low <= int(token) <= self.high:
            return int(token)
        rule = f"{self.name} must be within {self.low}-{self.high}"
        if self.names:
            rule += f" or a name {self.names[0]}-{self.names[-1]}"
        msg = f"{rule} (got {token!r})"
        raise CronError(msg)


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day-of-month", 1, 31),
    _Field("month", 1, 12, MONTH_NAMES),
    # 7 is Sunday as well as 0; it is folded onto 0 after parsing.
    _Field("day-of-week", 0, 7, DAY_NAMES),
)


@dataclass(frozen=True)
class Cron:
    """A parsed cron expression; construct it with :meth:`parse` (or directly, which also parses).

    Raises:
        CronError: the expression is malformed, or names only days that never occur
            (such as the 31st of February), so it would never fire.
    """

    expression: str
    _minutes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _hours: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _days: frozenset[int] = field(init=False, repr=False, compare=False)
    _months: frozenset[int] = field(init=False, repr=False, compare=False)
    _weekdays: frozenset[int] = field(init=False, repr=False, compare=False)
    _either_day: bool = field(init=False, repr=False, compare=False)
    # ``@every``'s interval in minutes; 0 for a five-field expression or a macro.
    _every: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        """Parse the expression into the sets of values each field allows."""
        text = self.expression.strip()
        if text.startswith(EVERY):
            object.__setattr__(self, "_every", _every_minutes(text.removeprefix(EVERY).strip()))
            return
        if text.startswith("@"):
            if text not in MACROS:
                msg = f"macro must be one of {', '.join(MACROS)} or @every (got {text!r})"
                raise CronError(msg)
            text = MACROS[text]
        parts = text.split()
        if len(parts) != len(_FIELDS):
            msg = (
                "expression must have five fields (minute hour day-of-month month day-of-week)"
                f" or be a macro (got {len(parts)} in {self.expression!r})"
            )
            raise CronError(msg)
        minutes, hours, days, months, weekdays = (
            spec.parse(part) for spec, part in zip(_FIELDS, parts, strict=True)
        )
        # Vixie cron decides by the first character: "*/2" counts as unrestricted.
        either_day = not parts[2].startswith("*") and not parts[4].startswith("*")
        if not either_day and not any(
            day <= _LONGEST_MONTH[month - 1] for month in months for day in days
        ):
            msg = (
                f"day-of-month {parts[2]!r} never occurs in month {parts[3]!r},"
                " so the expression never fires"
            )
            raise CronError(msg)
        object.__setattr__(self, "_minutes", minutes)
        object.__setattr__(self, "_hours", hours)
        object.__setattr__(self, "_days", frozenset(days))
        object.__setattr__(self, "_months", frozenset(months))
        object.__setattr__(self, "_weekdays", frozenset(day % 7 for day in weekdays))
        object.__setattr__(self, "_either_day", either_day)

    @classmethod
    def parse(cls, expression: str) -> Cron:
        """Parse a five-field expression, one of the macros or ``@every <duration>``.

        Args:
            expression: ``minute hour day-of-month month day-of-week``, each ``*``, ``a``,
                ``a-b``, ``*/n`` or ``a-b/n`` or a comma-separated list of those, with month
                names jan-dec and day names sun-sat; or ``@hourly``, ``@daily``,
                ``@midnight``, ``@weekly`` or ``@monthly``; or ``@every <duration>``.

        Returns:
            The parsed expression.

        Raises:
            CronError: the expression is malformed or can never fire.
        """
        return cls(expression)

    def next_after(self, moment: datetime) -> datetime:
        """The first firing time strictly after ``moment``.

        Args:
            moment: a timezone-aware time.

        Returns:
            The firing time, in UTC, at minute resolution.

        Raises:
            ValueError: ``moment`` is naive.
        """
        at = _utc_minute(moment, "moment") + _MINUTE
        if self._every:
            # The first multiple of the interval, counted from the epoch, at or after ``at``.
            periods = -(-_minutes_since_epoch(at) // self._every)
            return _EPOCH + timedelta(minutes=periods * self._every)
        while True:
            if at.month not in self._months:
                year, month = (at.year + 1, 1) if at.month == 12 else (at.year, at.month + 1)
                at = datetime(year, month, 1, tzinfo=UTC)
            elif not self._day_matches(at):
                at = at.replace(hour=0, minute=0) + _DAY
            elif at.hour not in self._hours:
                index = bisect_right(self._hours, at.hour)
                if index == len(self._hours):
                    at = at.replace(hour=0, minute=0) + _DAY
                else:
                    at = at.replace(hour=self._hours[index], minute=0)
            elif at.minute not in self._minutes:
                index = bisect_right(self._minutes, at.minute)
                if index == len(self._minutes):
                    at = at.replace(minute=0) + timedelta(hours=1)
                else:
                    at = at.replace(minute=self._minutes[index])
            else:
                return at

    def latest_at_or_before(self, moment: datetime, not_before: datetime) -> datetime | None:
        """The most recent firing time ``t`` with ``not_before < t <= moment``.

        Args:
            moment: a timezone-aware time, the latest a firing may be.
            not_before: a timezone-aware time the firing must come strictly after.

        Returns:
            The firing time in UTC, or None when there is none in that window.

        Raises:
            ValueError: ``moment`` or ``not_before`` is naive.
        """
        at = _utc_minute(moment, "moment")
        floor = _utc_minute(not_before, "not_before")
        if self._every:
            periods = _minutes_since_epoch(at) // self._every
            latest = _EPOCH + timedelta(minutes=periods * self._every)
            return latest if latest > floor else None
        while at > floor:
            if at.month not in self._months:
                at = at.replace(day=1, hour=0, minute=0) - _MINUTE
            elif not self._day_matches(at):
                at = at.replace(hour=0, minute=0) - _MINUTE
            elif at.hour not in self._hours:
                index = bisect_left(self._hours, at.hour)
                if index == 0:
                    at = at.replace(hour=0, minute=0) - _MINUTE
                else:
                    at = at.replace(hour=self._hours[index - 1], minute=59)
            elif at.minute not in self._minutes:
                index = bisect_left(self._minutes, at.minute)
                if index == 0:
                    at = at.replace(minute=0) - _MINUTE
                else:
                    at = at.replace(minute=self._minutes[index - 1])
            else:
                return at
        return None

    def _day_matches(self, at: datetime) -> bool:
        in_month = at.day in self._days
        # Python counts Monday as 0; cron counts Sunday as 0.
        in_week = (at.weekday() + 1) % 7 in self._weekdays
        return in_month or in_week if self._either_day else in_month and in_week


def _every_minutes(duration: str) -> int:
    """The minutes of ``@every <duration>``: a Go duration of whole minutes, at least one."""
    try:
        # To the microsecond, as the function reads it: 0.1h is 360s, not 360.00000000000006.
        seconds = round(parse_go_duration(duration), 6)
    except ValueError as error:
        msg = f"@every needs a duration such as 30m or 6h: {error}"
        raise CronError(msg) from None
    if seconds < _MINUTE.total_seconds() or seconds % _MINUTE.total_seconds():
        msg = f"@every must be a whole number of minutes, at least 1m (got {duration!r})"
        raise CronError(msg)
    return int(seconds // _MINUTE.total_seconds())


def _minutes_since_epoch(at: datetime) -> int:
    return int((at - _EPOCH) // _MINUTE)


def _utc_minute(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        msg = f"{name} must be timezone-aware (got {moment.isoformat()})"
        raise ValueError(msg)
    return moment.astimezone(UTC).replace(second=0, microsecond=0)
