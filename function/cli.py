"""``function-controlplane``: serve the function over gRPC, or render a composite in-process."""

from __future__ import annotations

import gc
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import click
import yaml
from crossplane.function import cli as sdkcli

from function import expressions
from function import render as rendering
from function.cache import ResponseCache
from function.fn import FunctionRunner

FUNCTION_NAME = "function-controlplane"
# Off unless asked for: a miss costs a deterministic encoding and a hash of the
# request (~60 us, about a tenth of composing), so the cache pays only where
# Crossplane repeats requests to more composites than it drops. An answer to
# the fullest composite is about 9 kB: 4096 of them take ~40 MiB.
DEFAULT_CACHE_ENTRIES = 0
DEFAULT_CACHE_MIB = 64


@click.group()
def main() -> None:
    """The controlplane composition function."""


@main.command()
@sdkcli.standard_options
@click.option(
    "--cache-entries",
    type=click.IntRange(min=0),
    default=DEFAULT_CACHE_ENTRIES,
    show_default=True,
    envvar="CACHE_ENTRIES",
    help="Answers to keep for requests Crossplane repeats while nothing changes "
    "(0: no cache); at least the number of composites, for every repeat to be "
    "answered from memory.",
)
@click.option(
    "--cache-mib",
    type=click.IntRange(min=0),
    default=DEFAULT_CACHE_MIB,
    show_default=True,
    envvar="CACHE_MIB",
    help="The most memory those answers may take, in MiB.",
)
def serve(cache_entries: int, cache_mib: int, **options: Any) -> None:
    """Serve RunFunction over gRPC for Crossplane."""
    if not options["insecure"] and not options["tls_certs_dir"]:
        msg = "pass --tls-certs-dir DIR (with tls.crt, tls.key and ca.crt) or --insecure"
        raise click.UsageError(msg)
    cache = None
    if cache_entries and cache_mib:
        cache = ResponseCache(max_entries=cache_entries, max_bytes=cache_mib * 1024 * 1024)
    runner = FunctionRunner(cache)
    # The CEL parser's tables take about a second to build: now, not in the
    # first request that carries a team's health check.
    expressions.warm_up()
    # Everything imported so far lives as long as the process: out of the
    # collector's sight, a collection walks only what requests made (about
    # 6 % less CPU per call, see bench/RESULTS.md).
    gc.freeze()
    try:
        sdkcli.run(runner, **options)
    except OSError as error:
        raise click.ClickException(f"cannot serve: {error}") from None


@main.command()
@click.argument("composite_resource", required=False, type=click.Path(exists=True, dir_okay=False))
@click.argument("composition", required=False, type=click.Path(exists=True, dir_okay=False))
@click.argument("functions", required=False, type=click.Path(exists=True))
@click.option(
    "--input",
    "input_file",
    type=click.Path(exists=True, dir_okay=False),
    help="The same as COMPOSITION (the argument's older spelling).",
)
@click.option(
    "-o",
    "--observed-resources",
    "--observed",
    "observed",
    type=click.Path(exists=True),
    help="A YAML file or directory of YAML files specifying the observed state of "
    "composed resources.",
)
@click.option(
    "-e",
    "--required-resources",
    "--extra-resources",
    "required",
    type=click.Path(exists=True),
    help="A YAML file or directory of YAML files specifying required resources to pass to "
    "the function (the Backups spec.restore.fromControlPlane chooses from).",
)
@click.option(
    "-x",
    "--include-full-xr",
    is_flag=True,
    help="Include a direct copy of the input XR's spec and metadata fields in the rendered output.",
)
@click.option(
    "-r",
    "--include-function-results",
    is_flag=True,
    help="Include informational and warning messages from the function in the rendered "
    "output as resources of kind: Result.",
)
def render(
    composite_resource: str | None,
    composition: str | None,
    functions: str | None,
    input_file: str | None,
    observed: str | None,
    *,
    required: str | None,
    include_full_xr: bool,
    include_function_results: bool,
) -> None:
    """Render COMPOSITE_RESOURCE in-process and print what it composes.

    The arguments are `crossplane render`'s: the composite resource (XR), the
    Composition whose pipeline calls this function (or the function's Input
    itself), and optionally the Functions file, which must name
    function-controlplane. With none, the embedded example is rendered.
    """
    if composition and input_file:
        msg = "pass the Composition either as COMPOSITION or as --input, not both"
        raise click.UsageError(msg)
    composition = composition or input_file
    try:
        xr = _one(
            _documents(composite_resource) if composite_resource else _example("xr.yaml"),
            "composite resource",
        )
        pipeline = _documents(composition) if composition else _example("input.yaml")
        function_input, step = _input(pipeline), _step_name(pipeline)
        if functions:
            _check_functions(_documents(functions))
        seen = _documents(observed) if observed else []
        objects = rendering.render(
            xr,
            function_input,
            seen,
            include_full_xr=include_full_xr,
            results_of_step=step if include_function_results else None,
            required=_documents(required) if required else [],
        )
    except (OSError, yaml.YAMLError, ValueError) as error:
        raise click.UsageError(str(error)) from None
    except rendering.FatalError as error:
        click.echo(f"render: the function returned a fatal result: {error}", err=True)
        sys.exit(1)
    click.echo(yaml.safe_dump_all(objects, sort_keys=True, explicit_start=True), nl=False)


def _example(name: str) -> list[dict[str, Any]]:
    text = resources.files("function").joinpath("example", name).read_text()
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _documents(path: str) -> list[dict[str, Any]]:
    """Every YAML document in a file, or in the .yaml/.yml files of a folder."""
    root = Path(path)
    files = (
        sorted(p for p in root.rglob("*") if p.suffix in (".yaml", ".yml"))
        if root.is_dir()
        else [root]
    )
    documents = []
    for file in files:
        for doc in yaml.safe_load_all(file.read_text()):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                msg = f"{file}: every YAML document must be an object"
                raise ValueError(msg)
            documents.append(doc)
    return documents


def _one(documents: list[dict[str, Any]], what: str) -> dict[str, Any]:
    if len(documents) != 1:
        msg = f"expected exactly one {what}, found {len(documents)} YAML documents"
        raise ValueError(msg)
    return documents[0]


def _input(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """The Input itself, or the input of this function's step in a Composition."""
    document = _one(documents, "Input or Composition")
    if document.get("kind") != "Composition":
        return document
    return dict(_our_step(document)["input"])


def _step_name(documents: list[dict[str, Any]]) -> str:
    """The name of this function's pipeline step (the function's name for a bare Input)."""
    document = _one(documents, "Input or Composition")
    if document.get("kind") != "Composition":
        return FUNCTION_NAME
    return str(_our_step(document).get("step", FUNCTION_NAME))


def _our_step(composition: dict[str, Any]) -> dict[str, Any]:
    for step in composition.get("spec", {}).get("pipeline", []):
        if step.get("functionRef", {}).get("name") == FUNCTION_NAME and step.get("input"):
            return dict(step)
    msg = f"the Composition has no pipeline step calling {FUNCTION_NAME} with an input"
    raise ValueError(msg)


def _check_functions(documents: list[dict[str, Any]]) -> None:
    """FUNCTIONS must name this function, as crossplane render needs it to."""
    names = [
        str(doc.get("metadata", {}).get("name"))
        for doc in documents
        if doc.get("kind") == "Function" and str(doc.get("apiVersion", "")).startswith("pkg.")
    ]
    if FUNCTION_NAME not in names:
        msg = (
            f"FUNCTIONS names no pkg.crossplane.io Function {FUNCTION_NAME} "
            f"(found: {', '.join(names) or 'none'})"
        )
        raise ValueError(msg)
