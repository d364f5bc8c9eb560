"""Shape and cost rules for the CEL health expressions a team writes.

kustomize-controller evaluates a health check's ``current``, ``inProgress`` and
``failed`` with cel-go (fluxcd/pkg ``runtime/cel``) against every object of
the check's kind it applied, with the object's top-level fields (``apiVersion``,
``kind``, ``metadata``, ``spec``, ``status``) as variables, the ``ext.Strings``,
``ext.Sets`` and ``ext.Encoders`` libraries, and no cost limit. A team's
expression therefore runs inside the controller every team shares: one
``.replace`` chained eight times builds a string of a gigabyte and gets the
controller OOM-killed. An expression is refused here, before it is rendered,
unless it only tests and compares values:

- it parses as CEL (cel-python's parser of the CEL grammar; Flux's optional
  syntax, ``?.``, is not taken);
- it calls only functions that test, compare, measure or convert scalars, and
  the comprehension macros (``all``, ``exists``, ``exists_one``, ``filter``,
  ``map``): nothing that builds or rewrites a string (``replace``,
  ``format``, ``join``, ``string()``, ``+`` of two values that may be strings
  or lists, ...), nothing quadratic (``sets.*``), no encoders;
- no macro iterates inside another macro's body, and no ``map`` builds a list
  or a map per element: so what an evaluation holds and does grows at most
  linearly with the object, which the API server bounds;
- ``matches`` takes a literal pattern of at most ``MAX_PATTERN_LENGTH`` characters;
- its estimated cost is within ``COST_BUDGET``.

The cost estimate counts evaluation steps as cel-go's estimator does in
spirit: each operator, call, selection and literal is one step, and each step
of a macro's body runs once per element of the list it iterates, estimated at
``ESTIMATED_LIST_SIZE`` elements for a list of the object (a literal list
counts its own elements). The rules, not the estimate, are what bound memory;
the budget keeps one expression from doing much more work than a health
check needs.

No message quotes the expression: the caller names the field.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeAlias

import lark
from celpy.celparser import CELParseError, CELParser

# A node of cel-python's parse tree, and a node or one of its tokens.
_Tree: TypeAlias = "lark.Tree[lark.Token]"
_Node: TypeAlias = "lark.Tree[lark.Token] | lark.Token"

ESTIMATED_LIST_SIZE = 100
COST_BUDGET = 10_000
MAX_PATTERN_LENGTH = 256
# Parsing is this function's own work, done for every team on one server: the
# brackets are counted before a parser sees them (cel-go itself stops at 250
# levels), and the checks of one composite are bounded together
# (``MAX_TEAM_CHARACTERS``, in function.model).
MAX_NESTING = 32
_OPENING, _CLOSING, _QUOTES = "([{", ")]}", "'\""

# Macros: the first argument names the element, the others run once per element.
COMPREHENSIONS = frozenset({"all", "exists", "exists_one", "filter", "map"})
# Methods that test or measure a value without building one.
METHODS = frozenset({"contains", "startsWith", "endsWith", "matches", "size"})
# Global functions (and the ``has`` macro) that test, measure or convert scalars.
FUNCTIONS = frozenset(
    {"has", "size", "int", "uint", "double", "bool", "duration", "timestamp", "dyn", "type"}
)
# Named in the refusal: functions that build a new string, list or bytes from their input.
BUILDERS = frozenset(
    {
        "replace",
        "format",
        "join",
        "split",
        "substring",
        "lowerAscii",
        "upperAscii",
        "trim",
        "reverse",
        "quote",
        "charAt",
        "indexOf",
        "lastIndexOf",
        "string",
        "bytes",
        "encode",
        "decode",
    }
)
# Nodes of cel-python's parse tree that are one evaluation step; the others
# (expr, conditionalor, ... with a single child) only wrap one.
_OPERATORS = frozenset(
    {
        "relation_lt",
        "relation_le",
        "relation_gt",
        "relation_ge",
        "relation_eq",
        "relation_ne",
        "relation_in",
        "addition_add",
        "addition_sub",
        "multiplication_mul",
        "multiplication_div",
        "multiplication_mod",
        "unary_not",
        "unary_neg",
        "member_dot",
        "member_index",
        "literal",
        "ident",
        "dot_ident",
        "list_lit",
        "map_lit",
    }
)
_NUMBER_TOKENS = frozenset({"INT_LIT", "UINT_LIT", "FLOAT_LIT"})
# Nodes that only pass one child on when they have one: what _only looks through.
_WRAPPERS = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        "addition",
        "multiplication",
        "unary",
        "member",
        "primary",
        "paren_expr",
    }
)


class RefusedError(ValueError):
    """An expression a team may not write; ``str()`` is the rule, never the expression."""


@dataclass(frozen=True)
class _Scope:
    """Where a node is: inside how many macro bodies, and whether inside a map's transform."""

    steps: int = 1
    in_body: bool = False
    in_transform: bool = False


@functools.cache
def _parser() -> CELParser:
    return CELParser()


def warm_up() -> None:
    """Build the parser now (about a second), so no request waits for it."""
    _parser()


def check(expression: str) -> int:
    """Check one expression; return its estimated cost.

    Raises:
        RefusedError: it breaks a rule; the message states the rule.
    """
    verdict = _verdict(expression)
    if isinstance(verdict, str):
        raise RefusedError(verdict)
    return verdict


# Every reconcile of every composite checks its expressions again: each distinct
# expression is parsed once, and its verdict (a cost, or the rule it breaks) kept.
@functools.lru_cache(maxsize=1024)
def _verdict(expression: str) -> int | str:
    if _nesting(expression) > MAX_NESTING:
        return f"nests brackets more than {MAX_NESTING} deep"
    try:
        cost = _cost(_parser().parse(expression), _Scope())
    except CELParseError as error:
        line, column = getattr(error, "line", None), getattr(error, "column", None)
        where = f" at line {line}, column {column}" if line and column else ""
        return f"is not a CEL expression Flux can evaluate (a syntax error{where})"
    except RefusedError as error:
        return str(error)
    if cost > COST_BUDGET:
        return (
            f"has an estimated cost of {cost}, above the budget of {COST_BUDGET} "
            f"(a macro's body counted once per element, {ESTIMATED_LIST_SIZE} per list)"
        )
    return cost


def _nesting(expression: str) -> int:
    """The deepest the brackets outside string literals go (a quote's escapes skipped)."""
    deepest = depth = 0
    quote = ""
    escaped = False
    for char in expression:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in _QUOTES:
            quote = char
        elif char in _OPENING:
            depth += 1
            deepest = max(deepest, depth)
        elif char in _CLOSING:
            depth -= 1
    return deepest


def _cost(node: _Node, scope: _Scope) -> int:
    if isinstance(node, lark.Token):
        return 0
    rule = str(node.data)
    if rule in ("member_dot_arg", "dot_ident_arg", "ident_arg"):
        return _call(node, scope)
    if rule == "member_object":
        msg = "builds a message (Type{...}); team health checks only test values"
        raise RefusedError(msg)
    if rule in ("list_lit", "map_lit") and scope.in_transform:
        msg = (
            "builds a list or a map in a map() transform, which grows with every element; "
            "team health checks only test values"
        )
        raise RefusedError(msg)
    if rule == "addition" and len(node.children) == 2:
        _check_addition(node)
    own = scope.steps if rule in _OPERATORS or _is_branch(node) else 0
    return own + sum(_cost(child, scope) for child in node.children)


def _is_branch(node: _Tree) -> bool:
    """``a || b``, ``a && b`` and ``a ? b : c``: one step each."""
    return str(node.data) in ("conditionalor", "conditionaland", "expr") and (
        len([child for child in node.children if child is not None]) > 1
    )


def _call(node: _Tree, scope: _Scope) -> int:
    rule = str(node.data)
    children = [child for child in node.children if child is not None]
    if rule == "member_dot_arg":
        target, name_token, *rest = children
    else:
        target, (name_token, *rest) = None, children
    name = str(name_token)
    arguments = _arguments(rest)
    if target is not None and _namespace(target) is not None:
        # sets.contains(...), base64.encode(...), strings.quote(...)
        msg = f"calls {_namespace(target)}.{name}, which team health checks may not use"
        raise RefusedError(msg)
    if name in BUILDERS:
        msg = (
            f"calls {name}, which builds a new string or list; team health checks only "
            "test and compare values"
        )
        raise RefusedError(msg)
    if target is not None and name in COMPREHENSIONS:
        return scope.steps + _cost(target, scope) + _comprehension(name, arguments, scope)
    allowed = METHODS if target is not None else FUNCTIONS
    if name not in allowed:
        msg = f"calls {name}, which team health checks may not use"
        raise RefusedError(msg)
    if name == "matches":
        _check_pattern(arguments[-1] if arguments else None)
    cost = scope.steps
    if target is not None:
        cost += _cost(target, scope)
    return cost + sum(_cost(argument, scope) for argument in arguments)


def _comprehension(name: str, arguments: list[_Tree], scope: _Scope) -> int:
    if scope.in_body:
        msg = (
            f"iterates inside an iteration ({name} in the body of another macro), whose "
            "cost grows with the square of the object"
        )
        raise RefusedError(msg)
    if len(arguments) < 2:
        msg = f"calls {name} without a variable and a body"
        raise RefusedError(msg)
    body = _Scope(steps=scope.steps * ESTIMATED_LIST_SIZE, in_body=True)
    *predicates, last = arguments[1:]
    cost = sum(_cost(predicate, body) for predicate in predicates)
    transform = _Scope(body.steps, in_body=True, in_transform=name == "map")
    return cost + _cost(last, transform)


def _arguments(rest: list[_Node]) -> list[_Tree]:
    """The argument expressions of a call (its ``exprlist``), in order."""
    if not rest or not isinstance(rest[0], lark.Tree):
        return []
    return [child for child in rest[0].children if isinstance(child, lark.Tree)]


def _namespace(target: _Node) -> str | None:
    """The name of a bare identifier a function is called on, when it names a library."""
    ident = _only(target, "ident")
    if ident is None:
        return None
    name = str(ident.children[0])
    return name if name in ("sets", "base64", "strings", "math", "optional") else None


def _check_addition(node: _Tree) -> None:
    """``a + b`` builds a string or a list unless one side is a number or a duration."""
    operator = node.children[0]
    right = node.children[1]
    left = operator.children[0] if isinstance(operator, lark.Tree) else None
    if str(getattr(operator, "data", "")) != "addition_add":
        return
    if not any(_is_number_or_duration(side) for side in (left, right) if side is not None):
        msg = (
            "adds two values that may be strings or lists (+ builds a new one); only a "
            "number or a duration() may be added"
        )
        raise RefusedError(msg)


def _is_number_or_duration(node: _Node) -> bool:
    literal = _only(node, "literal")
    if literal is not None:
        token = literal.children[0]
        return isinstance(token, lark.Token) and token.type in _NUMBER_TOKENS
    call = _only(node, "ident_arg")
    return call is not None and str(call.children[0]) == "duration"


def _check_pattern(argument: _Tree | None) -> None:
    literal = _only(argument, "literal") if argument is not None else None
    token = literal.children[0] if literal is not None else None
    if not isinstance(token, lark.Token) or token.type not in ("STRING_LIT", "MLSTRING_LIT"):
        msg = "calls matches with a pattern that is not a string literal"
        raise RefusedError(msg)
    if len(token) > MAX_PATTERN_LENGTH + 2:
        msg = f"calls matches with a pattern longer than {MAX_PATTERN_LENGTH} characters"
        raise RefusedError(msg)


def _only(node: _Node, rule: str) -> _Tree | None:
    """The ``rule`` node that ``node`` only wraps (through single-child nodes), if any."""
    for inner in _chain(node):
        if str(inner.data) == rule:
            return inner
    return None


def _chain(node: _Node) -> Iterator[_Tree]:
    while isinstance(node, lark.Tree):
        yield node
        children = [child for child in node.children if child is not None]
        if str(node.data) not in _WRAPPERS or len(children) != 1:
            return
        node = children[0]
