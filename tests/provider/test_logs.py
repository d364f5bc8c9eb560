"""JSON log lines, the --debug switch, and redaction of secrets in fields and messages."""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import click
import pytest
from click.testing import CliRunner

from provider.runtime import logs

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nq83Yp0==\n-----END RSA PRIVATE KEY-----"
JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2EifQ.c2lnbmF0dXJl"

Lines = Callable[[], list[dict[str, Any]]]


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def lines(restore_root_logger: None) -> Lines:
    """Set logging up on a buffer; the returned function parses what was written."""
    stream = io.StringIO()
    logs.setup(debug=True, stream=stream)
    return lambda: [json.loads(line) for line in stream.getvalue().splitlines()]


def test_each_record_is_one_json_object_with_the_core_keys(lines: Lines) -> None:
    logging.getLogger("provider.test").info("hello %s", "world")
    logging.getLogger("provider.test").warning("two\nlines")

    first, second = lines()
    assert set(first) == {"time", "level", "logger", "message"}
    assert first["level"] == "info"
    assert first["logger"] == "provider.test"
    assert first["message"] == "hello world"
    assert first["time"].endswith("Z")
    assert second["message"] == "two\nlines"
    assert second["level"] == "warning"


@dataclass
class FieldsCase:
    reason: str
    fields: Any
    want: dict[str, Any]


@pytest.mark.parametrize(
    "case",
    [
        FieldsCase(
            "plain fields sit beside the core keys",
            {"controller": "instance", "attempt": 2, "ok": True, "none": None},
            {"controller": "instance", "attempt": 2, "ok": True, "none": None},
        ),
        FieldsCase(
            "a field named like a core key is prefixed",
            {"message": "mine", "level": 3},
            {"fields.message": "mine", "fields.level": 3},
        ),
        FieldsCase(
            "tuples and sets become lists, other objects their text",
            {"path": ("ns", "a"), "ids": frozenset({3}), "amount": Decimal("1.5")},
            {"path": ["ns", "a"], "ids": [3], "amount": "1.5"},
        ),
        FieldsCase(
            "fields that are not a mapping are kept under fields",
            ["a", "b"],
            {"fields": ["a", "b"]},
        ),
    ],
    ids=lambda c: c.reason,
)
def test_fields_given_as_extra_are_written_in_the_line(case: FieldsCase, lines: Lines) -> None:
    logging.getLogger("t").info("m", extra={"fields": case.fields})

    (line,) = lines()
    assert {k: v for k, v in line.items() if k not in ("time", "level", "logger")} == {
        "message": "m",
        **case.want,
    }


@dataclass
class RedactCase:
    reason: str
    fields: dict[str, Any]
    want: dict[str, Any]


@pytest.mark.parametrize(
    "case",
    [
        RedactCase(
            "each secret-looking name is redacted",
            {
                "kubeconfig": "apiVersion: v1",
                "token": "abc",
                "password": "hunter2",
                "secret": "s",
                "key": "k",
                "credentials": "c",
            },
            {
                "kubeconfig": "[redacted]",
                "token": "[redacted]",
                "password": "[redacted]",
                "secret": "[redacted]",
                "key": "[redacted]",
                "credentials": "[redacted]",
            },
        ),
        RedactCase(
            "names match in any case and inside longer names",
            {"X-Auth-Token": "a", "apiKey": "b", "DB_PASSWORD": "c", "kube_Config": "d"},
            {
                "X-Auth-Token": "[redacted]",
                "apiKey": "[redacted]",
                "DB_PASSWORD": "[redacted]",
                "kube_Config": "[redacted]",
            },
        ),
        RedactCase(
            "a secret name hides its whole value, even an object",
            {"credentials": {"user": "bob", "pass": "x"}, "tokens": ["a", "b"]},
            {"credentials": "[redacted]", "tokens": "[redacted]"},
        ),
        RedactCase(
            "secret names are redacted at any depth, in lists too",
            {
                "spec": {"forProvider": {"secretRef": {"name": "n"}, "size": 3}},
                "items": [{"token": "t"}],
            },
            {
                "spec": {"forProvider": {"secretRef": "[redacted]", "size": 3}},
                "items": [{"token": "[redacted]"}],
            },
        ),
        RedactCase(
            "secret-looking text in a harmless field is scrubbed",
            {"error": f"cannot parse {PEM}", "header": "Authorization: Bearer abc123"},
            {"error": "cannot parse [redacted]", "header": "Authorization: Bearer [redacted]"},
        ),
        RedactCase(
            "harmless names and values are kept",
            {"controller": "instance", "request": "team-a/cp", "namespace": "team-a"},
            {"controller": "instance", "request": "team-a/cp", "namespace": "team-a"},
        ),
    ],
    ids=lambda c: c.reason,
)
def test_secret_fields_are_redacted(case: RedactCase, lines: Lines) -> None:
    logging.getLogger("t").info("m", extra={"fields": case.fields})

    (line,) = lines()
    assert {k: line[k] for k in case.want} == case.want


@dataclass
class ScrubCase:
    reason: str
    message: str
    want: str
    args: tuple[object, ...] = field(default_factory=tuple)


@pytest.mark.parametrize(
    "case",
    [
        ScrubCase(
            "a PEM block", f"loaded {PEM} from the secret", "loaded [redacted] from the secret"
        ),
        ScrubCase("a PEM block cut short", f"got {PEM[:40]}", "got [redacted]"),
        ScrubCase(
            "a bearer token",
            "sent Authorization: Bearer abc.def-ghi==",
            "sent Authorization: Bearer [redacted]",
        ),
        ScrubCase("a bearer token in lower case", "bearer abc", "bearer [redacted]"),
        ScrubCase(
            "a bare JWT",
            f"service account token {JWT} expired",
            "service account token [redacted] expired",
        ),
        ScrubCase(
            "a name=value pair",
            "login with password=hunter2 now",
            "login with password=[redacted] now",
        ),
        ScrubCase(
            "a quoted pair",
            "body {'apiKey': 'xyz', 'user': 'bob'}",
            "body {'apiKey': '[redacted]', 'user': 'bob'}",
        ),
        ScrubCase(
            "a secret passed as an argument", "config %s", "config token=[redacted]", ("token=abc",)
        ),
        ScrubCase(
            "STS credentials in an XML answer",
            "<Credentials><SecretAccessKey>wJalr/K7+MDENG</SecretAccessKey>"
            "<SessionToken>FwoGZXIvYXdzEBYaD</SessionToken><Expiration>2026</Expiration>",
            "<Credentials><SecretAccessKey>[redacted]</SecretAccessKey>"
            "<SessionToken>[redacted]</SessionToken><Expiration>2026</Expiration>",
        ),
        ScrubCase(
            "an XML element with attributes and a namespace prefix",
            '<sts:SessionToken xmlns:sts="x">abc</sts:SessionToken>',
            '<sts:SessionToken xmlns:sts="x">[redacted]</sts:SessionToken>',
        ),
        ScrubCase(
            "a secret in the repr of a byte string",
            "answer {'SecretAccessKey': b'wJalr/K7+MDENG', 'Expiration': 1}",
            "answer {'SecretAccessKey': b'[redacted]', 'Expiration': 1}",
        ),
        ScrubCase(
            "an XML body in the repr of a byte string",
            "body b'<SessionToken>FwoGZXIvYXdz</SessionToken>'",
            "body b'<SessionToken>[redacted]</SessionToken>'",
        ),
        ScrubCase(
            "the password of a URL's user",
            "cloning https://alice:hunter2@git.example/repo.git",
            "cloning https://alice:[redacted]@git.example/repo.git",
        ),
        ScrubCase(
            "a colon and an at sign in a URL's path are not a password",
            "see https://example.org/a:b@c",
            "see https://example.org/a:b@c",
        ),
        ScrubCase(
            "a harmless message", "reconciled team-a/cp in 1.2s", "reconciled team-a/cp in 1.2s"
        ),
    ],
    ids=lambda c: c.reason,
)
def test_secret_looking_text_is_scrubbed_from_messages(case: ScrubCase, lines: Lines) -> None:
    logging.getLogger("t").info(case.message, *case.args)

    (line,) = lines()
    assert line["message"] == case.want


def test_a_traceback_is_written_scrubbed(lines: Lines) -> None:
    try:
        raise ValueError(f"bad kubeconfig: token: {JWT}")
    except ValueError:
        logging.getLogger("t").exception("cannot connect")

    (line,) = lines()
    assert "ValueError" in line["exception"]
    assert JWT not in line["exception"]


def test_arguments_that_do_not_fit_the_format_do_not_raise(lines: Lines) -> None:
    logging.getLogger("t").info("one %s two %s", "Bearer abc")  # noqa: PLE1206 (under test)

    (line,) = lines()
    assert "abc" not in line["message"]
    assert line["message"].startswith("one %s two %s")


def test_records_from_any_logger_are_redacted(lines: Lines) -> None:
    logging.getLogger("kubernetes.client.rest").warning("x", extra={"fields": {"token": "t"}})

    (line,) = lines()
    assert line["token"] == "[redacted]"


def test_redacting_twice_changes_nothing_more() -> None:
    once = logs.scrub(f"password={PEM} Bearer {JWT}")

    assert logs.scrub(once) == once
    assert once == "password=[redacted] Bearer [redacted]"


def test_a_self_referencing_field_is_cut_off() -> None:
    loop: dict[str, Any] = {}
    loop["again"] = loop

    redacted = logs.redact(loop)

    depth = 0
    while isinstance(redacted, dict):
        redacted, depth = redacted["again"], depth + 1
    assert redacted == "[redacted]"
    assert depth > 10


@pytest.mark.parametrize(
    "text",
    [
        "keyx" * 25_000,
        "token" * 20_000,
        "eyJ-" * 25_000,
        "a." * 50_000,
        "Bearer " * 20_000,
        "<token" * 20_000,
        "a://b:" * 20_000,
    ],
    ids=[
        "a long run with a secret name inside",
        "repeated names",
        "repeated JWT starts",
        "dots",
        "repeated bearer",
        "repeated XML starts",
        "repeated URL starts",
    ],
)
def test_scrubbing_a_long_hostile_line_takes_linear_time(text: str) -> None:
    # Quadratic backtracking took about a minute on the first of these.
    start = time.perf_counter()
    logs.scrub(text)
    assert time.perf_counter() - start < 2


def test_bound_fields_are_added_and_a_calls_own_fields_win(lines: Lines) -> None:
    base = logs.with_fields(logging.getLogger("t"), controller="instance", attempt=1)
    log = logs.with_fields(base, request="team-a/cp")

    log.info("m", extra={"fields": {"attempt": 2}})
    log.info("n", extra={"fields": {"token": "t"}})

    first, second = lines()
    assert (first["controller"], first["request"], first["attempt"]) == ("instance", "team-a/cp", 2)
    assert (second["attempt"], second["token"]) == (1, "[redacted]")


@dataclass
class DebugCase:
    reason: str
    args: list[str]
    want_level: int


@pytest.mark.parametrize(
    "case",
    [
        DebugCase("without the switch, info", [], logging.INFO),
        DebugCase("with --debug, debug", ["--debug"], logging.DEBUG),
        DebugCase("with -d, debug", ["-d"], logging.DEBUG),
    ],
    ids=lambda c: c.reason,
)
def test_the_debug_switch_sets_the_level(case: DebugCase, restore_root_logger: None) -> None:
    stream = io.StringIO()

    @click.command()
    @logs.debug_option
    def command(debug: bool) -> None:
        logs.setup(debug=debug, stream=stream)
        logging.getLogger("t").debug("detail")
        logging.getLogger("t").info("summary")

    result = CliRunner().invoke(command, case.args)

    assert result.exit_code == 0, result.output
    assert logging.getLogger().level == case.want_level
    messages = [json.loads(line)["message"] for line in stream.getvalue().splitlines()]
    assert messages == (["detail", "summary"] if case.want_level == logging.DEBUG else ["summary"])


def test_setup_again_replaces_the_handler_instead_of_adding_one(restore_root_logger: None) -> None:
    first, second = io.StringIO(), io.StringIO()
    logs.setup(stream=first)
    logs.setup(stream=second)

    logging.getLogger("t").info("once")

    assert first.getvalue() == ""
    assert len(second.getvalue().splitlines()) == 1


@pytest.mark.parametrize("name", logs.QUIET_LOGGERS)
def test_libraries_that_log_credentials_stay_at_info_under_debug(name: str, lines: Lines) -> None:
    """botocore logs an assumed role's keys and every request body at debug level."""
    logging.getLogger(f"{name}.endpoint").debug("Response body: b'<SecretAccessKey>x'")
    logging.getLogger(f"{name}.endpoint").info("retrying")
    logging.getLogger("provider.test").debug("our own debug line")

    assert [line["message"] for line in lines()] == ["retrying", "our own debug line"]
