"""JSON logs for the provider: one object per line, with secrets redacted.

Each line holds ``time``, ``level``, ``logger`` and ``message``, then the
record's fields, given as ``extra={"fields": {...}}`` or bound with
``with_fields``. A field named like a core key is written as ``fields.<name>``.

``RedactionFilter`` sits on the handler, so it sees every record that reaches it,
from any logger (a filter on a logger would miss its children's records). It
replaces the value of any field whose name looks secret, at any depth, and
scrubs PEM blocks, bearer tokens, JWTs and ``secret=value`` pairs out of
messages, field values and tracebacks.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Mapping, MutableMapping
from datetime import UTC, datetime
from typing import IO, Any

import click

REDACTED = "[redacted]"

# Substrings of a field name (lower-cased, without "-", "_" or ".") that mark its
# value secret. Broad on purpose: "key" also hides "keyspace", and a hidden
# harmless value costs less than a leaked one. Log a queue key as "request".
SECRET_NAME_PARTS = ("kubeconfig", "token", "password", "passwd", "secret", "key", "credential")

# Deeper than any object we log; a self-referencing structure stops here.
_MAX_DEPTH = 32

_PEM = re.compile(
    r"-----BEGIN [A-Z0-9 ]+-----.*?(?:-----END [A-Z0-9 ]+-----|\Z)",
    re.DOTALL,
)
# Possessive quantifiers, and starts only where a run of name characters
# begins, keep every pattern linear in the text's length: a log line may hold a
# megabyte of base64, and backtracking over it would stall the logging thread.
_BEARER = re.compile(r"(?i)\b(bearer)\s++[A-Za-z0-9\-._~+/]++=*+")
_JWT = re.compile(r"(?<![\w-])eyJ[\w-]++\.[\w-]++\.[\w-]*+")
_SECRET_NAME = "(?:" + "|".join(SECRET_NAME_PARTS) + ")"
# "token=abc", "password: abc", "'apiKey': 'abc'", "'token': b'abc'" and the like.
_PAIR = re.compile(
    r"(?i)(\b(?=\w*?" + _SECRET_NAME + r")\w++[\"']?\s*+[:=]\s*+(?:b(?=[\"']))?+[\"']?+)"
    r"(?!\[redacted\])[^\s\"',;&}\]]++"
)
# "<SecretAccessKey>abc</SecretAccessKey>", as STS and S3 answer in XML.
_XML = re.compile(
    r"(?i)(<((?=[\w:.-]*?" + _SECRET_NAME + r")[\w:.-]++)(?:\s[^<>]*+)?>)"
    r"(?!\[redacted\]<)[^<]++(</\2>)"
)
# "https://user:password@host": the password of a URL's user info.
_URL_PASSWORD = re.compile(
    r"(?i)((?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,31}+://[^/\s:@]++:)(?!\[redacted\]@)[^/\s@]++@"
)
# Loggers that write credentials or whole bodies at debug level (botocore the
# assumed role's keys and archive parts, the Kubernetes client Secret bodies):
# held at info whatever --debug says.
QUIET_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "kubernetes", "aiohttp")


def looks_secret(name: str) -> bool:
    """Whether a field with this name may hold a secret."""
    compact = re.sub(r"[-_.]", "", name).lower()
    return any(part in compact for part in SECRET_NAME_PARTS)


def scrub(text: str) -> str:
    """``text`` with secrets redacted.

    PEM blocks, bearer tokens, JWTs, ``secret=value`` pairs (in byte-string reprs
    too), XML elements named like secrets and the password of a URL.
    """
    text = _PEM.sub(REDACTED, text)
    text = _BEARER.sub(r"\1 " + REDACTED, text)
    text = _JWT.sub(REDACTED, text)
    text = _XML.sub(r"\1" + REDACTED + r"\3", text)
    text = _URL_PASSWORD.sub(r"\1" + REDACTED + "@", text)
    return _PAIR.sub(r"\1" + REDACTED, text)


def redact(value: object, _depth: int = 0) -> object:
    """A JSON-ready copy of ``value`` with secret fields and secret-looking text redacted.

    Mappings are copied with the value of every key that ``looks_secret``
    replaced by ``[redacted]``, whatever it holds; sequences are copied item by
    item; strings are scrubbed; other objects become their scrubbed ``str()``.
    """
    if _depth > _MAX_DEPTH:
        return REDACTED
    if isinstance(value, Mapping):
        return {
            str(k): REDACTED if looks_secret(str(k)) else redact(v, _depth + 1)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [redact(item, _depth + 1) for item in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return scrub(value if isinstance(value, str) else str(value))


class RedactionFilter(logging.Filter):
    """Redacts a record's fields, message, traceback and stack in place; drops nothing."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact ``record`` and let it through."""
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            # Arguments that do not fit the format: keep both, rather than
            # raise from the logging call.
            message = f"{record.msg} {record.args}"
        record.msg = scrub(message)
        record.args = None
        fields = getattr(record, "fields", None)
        if fields is not None:
            # LogRecord declares no "fields"; extra= puts it in the instance dict.
            record.__dict__["fields"] = redact(
                fields if isinstance(fields, Mapping) else {"fields": fields}
            )
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub(record.exc_text)
        if record.stack_info:
            record.stack_info = scrub(record.stack_info)
        return True


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON object on one line."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, Mapping):
            core = set(entry)
            for name, value in fields.items():
                entry[f"fields.{name}" if name in core else str(name)] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = record.stack_info
        return json.dumps(entry, default=str)


class FieldsAdapter(logging.LoggerAdapter[Any]):
    """A logger with fields bound to every record; a call's own fields win."""

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        """Merge the bound fields under the call's ``extra={"fields": ...}``."""
        extra = dict(kwargs.get("extra") or {})
        extra["fields"] = {**(self.extra or {}), **extra.get("fields", {})}
        kwargs["extra"] = extra
        return msg, kwargs


def with_fields(
    logger: logging.Logger | logging.LoggerAdapter[Any], **fields: object
) -> FieldsAdapter:
    """``logger`` with ``fields`` added to every record it logs.

    Adapters nest: ``with_fields(with_fields(log, controller="instance"), request="ns/a")``
    logs both fields.
    """
    return FieldsAdapter(logger, fields)


debug_option = click.option(
    "--debug", "-d", is_flag=True, default=False, help="Log at debug level."
)


def setup(*, debug: bool = False, stream: IO[str] | None = None) -> logging.Handler:
    """Send every log record to ``stream`` as JSON, redacted, at info or debug level.

    ``QUIET_LOGGERS`` stay at info even with ``debug``: they would log credentials
    and whole request bodies.

    The root logger's handlers are replaced, so calling it again reconfigures.

    Args:
        debug: Log debug records too (the ``--debug`` switch).
        stream: Where to write; standard error by default.

    Returns:
        The handler installed on the root logger.
    """
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.addFilter(RedactionFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if debug else logging.INFO)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    return handler
