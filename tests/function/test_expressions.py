"""The shape and cost rules for team health expressions (function.expressions), case by case."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from function import expressions
from function.resources.flux import CROSSPLANE_HEALTH_CHECKS

# The issue's attack: each .replace multiplies the string by ten, so eight of them build
# a string of a billion characters inside kustomize-controller in one evaluation.
REPLACE_BOMB = "'xxxxxxxxxx'" + ".replace('x', 'xxxxxxxxxx')" * 8 + ".size() > 0"


@dataclass(frozen=True)
class Hostile:
    reason: str
    expression: str
    rule: str  # a fragment the refusal must state


HOSTILE = [
    Hostile(
        "A chain of .replace grows the string tenfold per call: the reproduced OOM.",
        REPLACE_BOMB,
        "calls replace, which builds a new string",
    ),
    Hostile(
        "One .replace of the empty string inserts its argument between every character.",
        "metadata.name.replace('', metadata.name).size() > 0",
        "calls replace",
    ),
    Hostile(
        "format builds a string as large as its arguments make it.",
        "'%s%s'.format([status.message, status.message]) != ''",
        "calls format",
    ),
    Hostile(
        "join builds a string from a list of the object.",
        "status.items.map(i, i.name).join(',') != ''",
        "calls join",
    ),
    Hostile(
        "split makes a list of every piece of a string.",
        "status.message.split('').size() > 0",
        "calls split",
    ),
    Hostile(
        "string() copies a value of the object into a new string.",
        "string(status.observedGeneration) == '1'",
        "calls string",
    ),
    Hostile(
        "Concatenating fields repeats the object's strings as often as the expression says.",
        "status.message + status.message + status.message == ''",
        "adds two values that may be strings or lists",
    ),
    Hostile(
        "Concatenating a string literal builds a string too.",
        "status.phase + 'x' == 'Readyx'",
        "adds two values",
    ),
    Hostile(
        "Concatenating lists builds a list.",
        "status.conditions + status.conditions != []",
        "adds two values",
    ),
    Hostile(
        "A macro inside a macro's body iterates the object's list once per element of it.",
        "status.conditions.all(a, status.conditions.exists(b, a.type == b.type))",
        "iterates inside an iteration",
    ),
    Hostile(
        "A macro nested in a filter's predicate is quadratic as well.",
        "status.items.filter(a, status.items.exists_one(b, b == a)).size() == 0",
        "iterates inside an iteration",
    ),
    Hostile(
        "A map that builds a list per element multiplies the list at every chained map.",
        "status.items.map(x, [x, x, x, x]).map(y, [y, y, y, y]).size() > 0",
        "builds a list or a map in a map() transform",
    ),
    Hostile(
        "A map that builds a map per element grows the same way.",
        "status.items.map(x, {'a': x, 'b': x}).size() > 0",
        "builds a list or a map",
    ),
    Hostile(
        "sets.contains compares every element of one list with every element of another.",
        "sets.contains(status.items, spec.items)",
        "calls sets.contains",
    ),
    Hostile(
        "The encoders build strings and bytes.",
        "base64.encode(bytes(status.message)) != ''",
        "calls base64.encode",
    ),
    Hostile(
        "A regular expression taken from the object is compiled on every evaluation.",
        "status.message.matches(spec.pattern)",
        "pattern that is not a string literal",
    ),
    Hostile(
        "A very long literal pattern is refused too.",
        "status.message.matches('" + "a?" * 200 + "')",
        f"longer than {expressions.MAX_PATTERN_LENGTH} characters",
    ),
    Hostile(
        "A function the checks have no use for is refused by name.",
        "status.message.lowerAscii() == 'ready'",
        "calls lowerAscii",
    ),
    Hostile(
        "An unknown function is refused rather than guessed at.",
        "status.items.sortBy(x, x) != []",
        "calls sortBy, which team health checks may not use",
    ),
    Hostile(
        "A message literal is no test of a value.",
        "google.protobuf.Struct{} != null",
        "builds a message",
    ),
    Hostile(
        "Many macros side by side exceed the cost budget.",
        " && ".join(["status.conditions.all(c, c.status == 'True' && c.reason != '')"] * 12),
        f"above the budget of {expressions.COST_BUDGET}",
    ),
    Hostile(
        "Thousands of nested parentheses are refused, not a crash of the checker.",
        "(" * 2000 + "true" + ")" * 2000,
        f"nests brackets more than {expressions.MAX_NESTING} deep",
    ),
    Hostile(
        "What does not parse is refused, with where and not what.",
        "status.phase ==",
        "is not a CEL expression Flux can evaluate",
    ),
    Hostile(
        "Flux's optional syntax is refused: the parser the platform checks with does not take it.",
        "status.?phase.orValue('') == 'Ready'",
        "is not a CEL expression",
    ),
]


@dataclass(frozen=True)
class Benign:
    reason: str
    expression: str


BENIGN = [
    Benign("A field compared with a literal.", "status.phase == 'Ready'"),
    Benign(
        "Brackets inside a string literal are text, not nesting.",
        "status.message == '" + "(" * 40 + "\\'" + "[" * 40 + "'",
    ),
    Benign(
        "Flux's documented form: filter the conditions, then test them.",
        "status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')",
    ),
    Benign(
        "A condition found with exists, guarded by has.",
        "has(status.conditions) && status.conditions.exists(c, c.type == 'Ready' && "
        "c.status == 'True')",
    ),
    Benign(
        "A generation compared, plus a number.",
        "status.observedGeneration + 0 == metadata.generation",
    ),
    Benign("Membership in a literal list.", "status.phase in ['Ready', 'Succeeded']"),
    Benign("A literal pattern.", "status.phase.matches('^(Ready|Done)$')"),
    Benign(
        "String tests that build nothing.",
        "status.message.startsWith('ok') || status.message.contains('done')",
    ),
    Benign("A ternary.", "has(status.ready) ? status.ready : false"),
    Benign("Sizes.", "size(status.conditions) > 0 && status.items.size() < 10"),
    Benign(
        "Time arithmetic with a duration.",
        "timestamp(status.lastUpdate) + duration('5m') > timestamp('2026-01-01T00:00:00Z')",
    ),
    Benign(
        "A map that picks a field of each element, then a test.",
        "status.conditions.map(c, c.type).exists(t, t == 'Ready')",
    ),
    Benign("Conversions of scalars.", "int(status.replicas) == 3 && double(status.ratio) < 0.5"),
]


@pytest.mark.parametrize("case", HOSTILE, ids=lambda case: case.reason)
def test_a_hostile_expression_is_refused_naming_the_rule_and_not_quoting_it(
    case: Hostile,
) -> None:
    with pytest.raises(expressions.RefusedError) as refused:
        expressions.check(case.expression)
    message = str(refused.value)
    assert case.rule in message, case.reason
    assert case.expression not in message
    assert "status." not in message and "'x" not in message


@pytest.mark.parametrize("case", BENIGN, ids=lambda case: case.reason)
def test_a_benign_expression_passes_within_the_budget(case: Benign) -> None:
    assert 0 < expressions.check(case.expression) <= expressions.COST_BUDGET


def test_the_attack_is_about_the_length_the_issue_reproduced() -> None:
    # The issue's expression had 239 characters; the length limit alone never stops it.
    assert 200 < len(REPLACE_BOMB) < 260


def test_the_platforms_own_default_health_checks_pass_the_team_rules() -> None:
    # Whatever a team may not write, the platform does not write either.
    for check in CROSSPLANE_HEALTH_CHECKS:
        for expression in (check.current, check.failed, check.in_progress):
            if expression is not None:
                expressions.check(expression)


def test_a_macro_body_costs_once_per_estimated_element() -> None:
    body = expressions.check("i == 'Ready'")
    looped = expressions.check("status.items.all(i, i == 'Ready')")
    assert looped > body * expressions.ESTIMATED_LIST_SIZE
