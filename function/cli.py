"""``function-controlplane``: serve the function over gRPC, or render a composite in-process."""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path
from typing import Any

import click
import yaml
from crossplane.function import cli as sdkcli

from function import render as rendering
from function.fn import FunctionRunner

FUNCTION_NAME = "function-controlplane"


@click.group()
def main() -> None:
    """The controlplane composition function."""


@main.command()
@sdkcli.standard_options
def serve(**options: Any) -> None:
    """Serve RunFunction over gRPC for Crossplane."""
    if not options["insecure"] and not options["tls_certs_dir"]:
        msg = "pass --tls-certs-dir DIR (with tls.crt, tls.key and ca.crt) or --insecure"
        raise click.UsageError(msg)
    try:
        sdkcli.run(FunctionRunner(), **options)
    except OSError as error:
        raise click.ClickException(f"cannot serve: {error}") from None


@main.command()
@click.argument("composite", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--input",
    "input_file",
    type=click.Path(exists=True, dir_okay=False),
    help="The function Input, or a Composition whose pipeline carries it. "
    "Default: the embedded example input.",
)
@click.option(
    "--observed",
    type=click.Path(exists=True),
    help="A YAML file or a folder of YAML files of observed composed resources.",
)
def render(composite: str | None, input_file: str | None, observed: str | None) -> None:
    """Render COMPOSITE (default: the embedded example) and print what it composes."""
    try:
        xr = _one(_documents(composite) if composite else _example("xr.yaml"), "composite")
        function_input = _input(_documents(input_file) if input_file else _example("input.yaml"))
        seen = _documents(observed) if observed else []
        objects = rendering.render(xr, function_input, seen)
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
    for step in document.get("spec", {}).get("pipeline", []):
        if step.get("functionRef", {}).get("name") == FUNCTION_NAME and step.get("input"):
            return dict(step["input"])
    msg = f"the Composition has no pipeline step calling {FUNCTION_NAME} with an input"
    raise ValueError(msg)
