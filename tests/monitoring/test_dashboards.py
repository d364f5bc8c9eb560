"""The generated Grafana dashboards: current, every query parses, every metric is one we know.

Each query is parsed by promtool (as a recording rule of a throwaway rules
file: ``promtool check rules`` parses every expression), with Grafana's
template variables replaced by values, and must name only metrics our
controllers export (the provider's registry) or Flux and Crossplane core do.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tools.monitoring import dashboards, generate

ROOT = generate.ROOT

# What Flux's controllers (fluxcd/pkg/runtime/metrics, kustomize-controller
# v1.9.6) and Crossplane core (v2.2.1, internal/circuit) export that we query.
THEIRS = {
    "gotk_reconcile_condition",
    "gotk_reconcile_duration_seconds_bucket",
    "circuit_breaker_opens_total",
    "circuit_breaker_closes_total",
    "circuit_breaker_events_total",
}
# PromQL's words that look like metric names: functions, aggregations, operators.
WORDS = {
    "by", "on", "and", "or", "unless", "without", "ignoring", "group_left", "group_right",
    "bool", "offset", "le", "time", "vector", "count", "sum", "max", "min", "rate", "increase",
    "histogram_quantile", "label_values",
}  # fmt: skip
_SELECTOR_INSIDE = re.compile(r"\{[^}]*\}|\[[^]]*\]|\"[^\"]*\"")
_GROUPING = re.compile(r"\b(?:by|on|without|ignoring)\s*\([^)]*\)")
_NAME = re.compile(r"\b[a-zA-Z_:][a-zA-Z0-9_:]*\b")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects; Grafana's label_values(metric, label) its metric."""
    grafana = re.fullmatch(r"label_values\((\w+), *\w+\)", expr)
    if grafana:
        return {grafana.group(1)}
    bare = _GROUPING.sub(" ", _SELECTOR_INSIDE.sub(" ", expr))
    return {name for name in _NAME.findall(bare) if name not in WORDS and not name[0].isdigit()}


def ours() -> set[str]:
    names = {line.split("`")[1] for line in generate.metrics_table().splitlines()[2:]}
    # A histogram's series.
    return names | {f"{n}_{s}" for n in names for s in ("bucket", "sum", "count")}


def every_query() -> list[tuple[str, str]]:
    return [
        (name, query)
        for name, text in dashboards.generated().items()
        for query in dashboards.queries(json.loads(text))
    ]


@pytest.fixture(scope="module")
def promtool() -> Path:
    subprocess.run([str(ROOT / "tools" / "build.sh"), "promtool"], check=True)
    return ROOT / ".tools" / "bin" / "promtool"


def test_the_dashboards_are_current() -> None:
    for name, text in dashboards.generated().items():
        path = generate.DASHBOARDS / name
        assert path.exists() and path.read_text() == text, f"{name} is stale: run `make docs`"


def test_there_is_an_overview_and_a_team_dashboard_with_queries() -> None:
    by_file = {name for name, _ in every_query()}
    assert by_file == {"overview.json", "team.json"}


@pytest.mark.parametrize(
    ("expr", "want"),
    [
        ('sum by (reason) (increase(x_total{namespace="$n"}[1h]))', {"x_total"}),
        ("a / on (namespace, name) b", {"a", "b"}),
        ("count(up == 0) or vector(0)", {"up"}),
        ("label_values(up, namespace)", {"up"}),
    ],
    ids=[
        "a grouping and a selector are not names",
        "both sides count",
        "a literal is not",
        "grafana's label_values names its metric, not its label",
    ],
)
def test_metric_names_finds_exactly_the_selected_metrics(expr: str, want: set[str]) -> None:
    assert metric_names(expr) == want


def test_every_query_names_only_metrics_our_controllers_flux_or_crossplane_export() -> None:
    known = ours() | THEIRS
    unknown = {
        f"{name}: {query} names {sorted(metric_names(query) - known)}"
        for name, query in every_query()
        if not metric_names(query) or metric_names(query) - known
    }
    assert unknown == set()


def test_every_query_parses_as_promql(promtool: Path, tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:query:{i}", "expr": query.replace("$namespace", "team-a")}
        for i, (_, query) in enumerate(every_query())
        if not query.startswith("label_values(")
    ]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [str(promtool), "check", "rules", str(path)], check=False, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
