"""``controlplane-plan``: what a push to a team's repository would do to its control plane.

Exit codes as ``terraform plan -detailed-exitcode``: 0 nothing would change,
2 something would, 1 the plan failed (its message names the stage and the
object). No output shows a Secret's value: diffs mask them, SOPS objects are
never decrypted, and every value read from a Secret (``substituteFrom``, the
kubeconfig's credentials) is masked once more over the whole output.
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import click
import yaml

from plan import build, checkout, output, planner, stages
from plan.changes import EXIT_ERROR, Built, Plan, StagePlan, exit_code, inventory, redact
from plan.live import ControlPlanes, Management, secret_values
from provider.kube import Cluster, KubeError, Resource

DEFAULT_COMPOSITE = "controlplanes.v1alpha1.platform.acme.io"
Format = Literal["table", "markdown", "json"]


class PlanFailedError(Exception):
    """The plan cannot be made at all (no stage can be planned); the message says why."""


@dataclass
class Request:
    """What the command was asked for."""

    controlplane: str
    repository: Path
    head: str | None
    base: str | None
    offline: bool
    function_input: Path | None
    kubeconfig: Path | None
    management_kubeconfig: Path | None
    composite_resource: str
    substitute_from: Path | None
    binary: Path
    default_service_account: str = ""
    # Every value that must not be shown, collected as the plan reads them.
    secrets: list[str] = field(default_factory=list)


def _load(path: Path) -> Any:
    try:
        return yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        msg = f"cannot read {path}: {type(error).__name__}"
        raise PlanFailedError(msg) from None


def _load_all(path: Path) -> list[dict[str, Any]]:
    try:
        return [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]
    except (OSError, yaml.YAMLError) as error:
        msg = f"cannot read {path}: {type(error).__name__}"
        raise PlanFailedError(msg) from None


def _resource(text: str) -> Resource:
    """``plural.version.group`` as kubectl spells a resource."""
    plural, _, rest = text.partition(".")
    version, _, group = rest.partition(".")
    if not plural or not version or not group:
        msg = f"--composite-resource {text!r}: must be plural.version.group"
        raise PlanFailedError(msg)
    return Resource(group, version, plural, "", namespaced=True)


def _reference(text: str) -> tuple[str, str]:
    """``NAMESPACE/NAME``, or ``NAME`` for a legacy (cluster-scoped) composite."""
    namespace, _, name = text.rpartition("/")
    return namespace, name


@contextmanager
def _trees(request: Request) -> Iterator[planner.Checkouts]:
    """The head (a revision, or the working tree) and the base revision, written out when asked."""
    with ExitStack() as stack:
        try:
            head = (
                stack.enter_context(checkout.revision_tree(request.repository, request.head))
                if request.head
                else request.repository
            )
        except checkout.CheckoutError as error:
            raise PlanFailedError(str(error)) from None
        lock = threading.Lock()
        written: list[Path] = []

        def base() -> Path:
            # Stages build side by side: the first to ask writes the revision out.
            assert request.base is not None
            with lock:
                if not written:
                    try:
                        tree = checkout.revision_tree(request.repository, request.base)
                        written.append(stack.enter_context(tree))
                    except checkout.CheckoutError as error:
                        raise build.BuildError(str(error)) from None
            return written[0]

        yield planner.Checkouts(head, base if request.base else None)


def _builder(
    request: Request, objects: Sequence[Mapping[str, Any]], options: build.Options
) -> planner.Builder:
    def run(stage: stages.Stage, root: Path) -> list[Built]:
        return build.build(request.binary, root, stage.kustomization, objects, options)

    return run


def _revision_names(request: Request) -> tuple[str, str]:
    def name(revision: str | None) -> str:
        if revision is None:
            return ""
        try:
            return checkout.resolve(request.repository, revision)[:12]
        except checkout.CheckoutError as error:
            raise PlanFailedError(str(error)) from None

    return name(request.base), name(request.head)


def _render(
    composite: Mapping[str, Any],
    function_input: Mapping[str, Any],
    observed: Sequence[Mapping[str, Any]] = (),
) -> tuple[stages.Stage, ...]:
    try:
        return stages.render(composite, stages.function_input_of(function_input), observed)
    except stages.StageError as error:
        raise PlanFailedError(str(error)) from None


def _name(composite: Mapping[str, Any]) -> str:
    metadata = composite.get("metadata") or {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    return f"{namespace}/{name}" if namespace else str(name)


def plan_offline(request: Request) -> Plan:
    """Build base and head, compare them; no cluster is asked anything."""
    composite = _load(Path(request.controlplane))
    if request.function_input is None:
        msg = "--function-input is required offline (the platform's Input or Composition)"
        raise PlanFailedError(msg)
    found = _render(composite, _load(request.function_input))
    given = _load_all(request.substitute_from) if request.substitute_from else []
    request.secrets.extend(secret_values(given))
    notes = []
    if any(stage.substitute_from for stage in found) and not given:
        notes.append(
            "substituteFrom is not read offline: its variables render empty "
            "(--substitute-from FILE gives their values)"
        )
    # Offline with no values for substituteFrom, a variable only they define must not fail
    # the build: Flux's strict rule is kept whenever their values are given.
    options = build.Options(strict_substitutions=bool(given) or not notes)
    if not given:
        found = tuple(_optional_substitute_from(stage) for stage in found)
    base, head = _revision_names(request)
    with _trees(request) as trees:
        plans = planner.plan_offline(found, trees, _builder(request, given, options))
    return Plan(_name(composite), "offline", plans, head, base, notes=tuple(notes))


def _optional_substitute_from(stage: stages.Stage) -> stages.Stage:
    body = dict(stage.kustomization)
    spec = dict(body["spec"])
    post_build = dict(spec.get("postBuild") or {})
    if post_build.get("substituteFrom"):
        post_build["substituteFrom"] = [
            {**reference, "optional": True} for reference in post_build["substituteFrom"]
        ]
        spec["postBuild"] = post_build
        body["spec"] = spec
    return stages.Stage(stage.name, body)


async def plan_live(request: Request) -> Plan:
    """Build each stage and ask the control plane what applying it would do."""
    management = await _management(request)
    targets: ControlPlanes | None = None
    try:
        composite, function_input, observed = await _composite(request, management)
        found = _render(composite, function_input, observed)
        targets = ControlPlanes(await _kubeconfig(request, management, composite, found))
        notes: list[str] = []
        objects: list[dict[str, Any]] = []
        inventories: dict[str, Any] = {}
        if management is None:
            notes.append(
                "the management cluster is not reachable: substituteFrom is not read "
                "and nothing is shown as pruned"
            )
            found = tuple(_optional_substitute_from(stage) for stage in found)
        else:
            for stage in found:
                objects.extend(
                    await management.substitute_from(stage.namespace, stage.substitute_from)
                )
                live = await management.kustomization(stage.namespace, stage.kustomization_name)
                try:
                    inventories[stage.kustomization_name] = inventory(live)
                except ValueError as error:
                    raise PlanFailedError(f"stage {stage.name}: {error}") from None
        request.secrets.extend(secret_values(objects))
        options = build.Options(strict_substitutions=management is not None)
        base, head = _revision_names(request)
        with _trees(request) as trees:
            plans = await planner.plan_live(
                found,
                trees,
                _builder(request, objects, options),
                targets,
                inventories,
                default_service_account=request.default_service_account,
            )
        version = str(
            ((composite.get("status") or {}).get("instance") or {}).get("crossplaneVersion") or ""
        )
        plans = tuple(_package_note(stage, version) for stage in plans)
        return Plan(_name(composite), "live", plans, head, base, version, tuple(notes))
    except KubeError as error:
        raise PlanFailedError(str(error)) from None
    finally:
        if targets is not None:
            await targets.close()
        if management is not None:
            await management.close()


def _package_note(stage: StagePlan, version: str) -> StagePlan:
    """Say which Crossplane a stage's new or upgraded packages install on."""
    packages = [
        change
        for change in stage.changes
        if change.object.group == "pkg.crossplane.io" and change.action in {"create", "change"}
    ]
    if not packages or not version:
        return stage
    note = (
        f"the control plane runs Crossplane {version}: a package whose crossplane.version "
        "constraint asks for more fails its health check (Installed/Healthy)"
    )
    return replace(stage, notes=(*stage.notes, note))


async def _management(request: Request) -> Management | None:
    """The management cluster; None when it cannot be used and the kubeconfig is given."""
    path = str(request.management_kubeconfig) if request.management_kubeconfig else None
    try:
        return Management(await Cluster.from_environment(path))
    except KubeError:
        if request.kubeconfig is None:
            raise
        return None


async def _composite(
    request: Request, management: Management | None
) -> tuple[dict[str, Any], Mapping[str, Any], list[dict[str, Any]]]:
    """The composite, the function input and the composite's composed resources."""
    given = Path(request.controlplane)
    if given.is_file():
        composite = _load(given)
    elif management is None:
        msg = (
            f"--controlplane {request.controlplane}: no such file, and no management "
            "cluster to read it from"
        )
        raise PlanFailedError(msg)
    else:
        namespace, name = _reference(request.controlplane)
        composite = await management.composite(
            _resource(request.composite_resource), namespace, name
        )
    if request.function_input is not None:
        function_input: Mapping[str, Any] = _load(request.function_input)
    elif management is not None:
        function_input = await management.function_input(composite)
    else:
        msg = "--function-input is required when the management cluster is not reachable"
        raise PlanFailedError(msg)
    observed = await management.composed(composite) if management is not None else []
    return composite, function_input, observed


async def _kubeconfig(
    request: Request,
    management: Management | None,
    composite: Mapping[str, Any],
    found: tuple[stages.Stage, ...],
) -> dict[str, Any]:
    """The team's control plane's kubeconfig: a file, or the ControlPlane's connection secret.

    The secret is in the namespace of the composed objects (a legacy composite's claim's).
    """
    if request.kubeconfig is not None:
        try:
            kubeconfig = yaml.safe_load(request.kubeconfig.read_text())
        except (OSError, yaml.YAMLError) as error:
            msg = f"cannot read the kubeconfig {request.kubeconfig}: {type(error).__name__}"
            raise PlanFailedError(msg) from None
    else:
        assert management is not None
        metadata = composite.get("metadata") or {}
        ref = ((composite.get("status") or {}).get("instance") or {}).get(
            "kubeconfigSecretRef"
        ) or {}
        namespace = found[0].namespace if found else str(metadata.get("namespace") or "")
        name = str(ref.get("name") or f"{metadata.get('name')}-kubeconfig")
        kubeconfig = await management.kubeconfig(
            namespace, name, str(ref.get("key") or "kubeconfig")
        )
    if not isinstance(kubeconfig, dict):
        msg = "the control plane's kubeconfig is not a kubeconfig"
        raise PlanFailedError(msg)
    request.secrets.extend(_credential_values(kubeconfig))
    return kubeconfig


def _credential_values(kubeconfig: Any) -> list[str]:
    """The kubeconfig's credentials, so no error can show them."""
    found = []
    for user in (kubeconfig or {}).get("users") or ():
        for value in ((user or {}).get("user") or {}).values():
            if isinstance(value, str) and len(value) >= 8:
                found.append(value)
    return found


def failed(controlplane: str, message: str, *, offline: bool) -> Plan:
    """A plan that could not be made: one error, shown in every format."""
    mode: Literal["live", "offline"] = "offline" if offline else "live"
    return Plan(controlplane, mode, (StagePlan("(all)", "", "", error=message),))


def render(plan: Plan, fmt: Format, *, diffs: bool = True) -> str:
    """The plan in ``fmt``."""
    if fmt == "markdown":
        return output.markdown(plan)
    if fmt == "json":
        return output.as_json(plan)
    return output.table(plan, diffs=diffs)


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--controlplane",
    required=True,
    help="The ControlPlane: a file, or NAMESPACE/NAME in the management cluster.",
)
@click.option(
    "--repo",
    "repository",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The team's git checkout.",
)
@click.option("--head", help="The revision the push makes (default: the working tree).")
@click.option(
    "--base",
    help="The revision Flux has applied: offline it is compared with the head; "
    "live it gives the ciphertext SOPS objects are compared with.",
)
@click.option("--offline", is_flag=True, help="Ask no cluster: compare base and head only.")
@click.option(
    "--function-input",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The platform's function Input, or a Composition passing it "
    "(default, live: the Composition the ControlPlane uses).",
)
@click.option(
    "--kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The control plane's kubeconfig (default: the ControlPlane's connection secret).",
)
@click.option(
    "--management-kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The management cluster's kubeconfig (default: $KUBECONFIG).",
)
@click.option(
    "--composite-resource",
    default=DEFAULT_COMPOSITE,
    show_default=True,
    help="The composite's resource, plural.version.group.",
)
@click.option(
    "--substitute-from",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Offline: ConfigMaps and Secrets (YAML) standing in for those substituteFrom names.",
)
@click.option(
    "--build-tool",
    type=click.Path(exists=True, dir_okay=False),
    help=f"The {build.BINARY} program (default: ${build.BINARY_VARIABLE}, then PATH).",
)
@click.option(
    "-o",
    "--output",
    "fmt",
    type=click.Choice(["table", "markdown", "json"]),
    default="table",
    show_default=True,
    help="For a terminal, for a pull request's comment, or for a program.",
)
@click.option(
    "--default-service-account",
    default="",
    help="kustomize-controller's --default-service-account on the platform: the identity a "
    "stage without serviceAccountName is applied as (default: the kubeconfig's own).",
)
@click.option("--no-diff", is_flag=True, help="Table: list the objects without their diffs.")
def main(  # noqa: PLR0917 (click passes every option by keyword, in its order)
    controlplane: str,
    repository: Path,
    head: str | None,
    base: str | None,
    offline: bool,
    function_input: Path | None,
    kubeconfig: Path | None,
    management_kubeconfig: Path | None,
    composite_resource: str,
    substitute_from: Path | None,
    build_tool: str | None,
    fmt: Format,
    default_service_account: str,
    no_diff: bool,
) -> None:
    """Show, stage by stage, what a push to a team's repository would do to its control plane.

    Exit codes: 0 no changes, 2 changes, 1 error.
    """
    secrets: list[str] = []
    try:
        request = Request(
            controlplane=controlplane,
            repository=repository,
            head=head,
            base=base,
            offline=offline,
            function_input=function_input,
            kubeconfig=kubeconfig,
            management_kubeconfig=management_kubeconfig,
            composite_resource=composite_resource,
            substitute_from=substitute_from,
            binary=build.find_binary(build_tool),
            default_service_account=default_service_account,
            secrets=secrets,
        )
        plan = plan_offline(request) if offline else asyncio.run(plan_live(request))
    except (PlanFailedError, build.BuildError, KubeError) as error:
        plan = failed(controlplane, str(error), offline=offline)
    text = redact(render(plan, fmt, diffs=not no_diff), secrets)
    click.echo(text, nl=False)
    if plan.failed:
        errors = [f"stage {stage.stage}: {stage.error}" for stage in plan.stages if stage.error]
        if fmt != "table":
            click.echo(redact("\n".join(errors), secrets), err=True)
    sys.exit(exit_code(plan) if not plan.failed else EXIT_ERROR)
