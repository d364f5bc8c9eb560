"""Import boundaries between the function, the provider and their dependencies.

The source is parsed with ``ast``; nothing under test is imported. Every
``import``, ``from ... import`` (relative ones resolved against the file's
package), ``importlib.import_module("...")`` and ``__import__("...")`` counts,
wherever it sits (inside functions and ``TYPE_CHECKING`` blocks too).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Import:
    file: str
    line: int
    module: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.module}"


def module_name(relative: str) -> str:
    """The dotted module of a path relative to the repository root."""
    parts = list(Path(relative).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_in_source(source: str, relative: str) -> list[Import]:
    """Every module ``source`` (the file at ``relative``) imports, as absolute dotted names.

    ``from a.b import c`` yields ``a.b.c``: ``c`` may be a module or a name in
    ``a.b``, and either way the file depends on what is under ``a.b``.
    """
    is_package = Path(relative).name == "__init__.py"
    package = module_name(relative).split(".")
    if not is_package:
        package = package[:-1]
    found: list[Import] = []
    for node in ast.walk(ast.parse(source, filename=relative)):
        if isinstance(node, ast.Import):
            found.extend(Import(relative, node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            found.extend(
                Import(relative, node.lineno, f"{base}.{alias.name}" if base else alias.name)
                for alias in node.names
            )
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func):
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append(Import(relative, node.lineno, first.value))
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in {"__import__", "import_module"}
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def imports_in(relative: str) -> list[Import]:
    return imports_in_source((ROOT / relative).read_text(encoding="utf-8"), relative)


def files_matching(patterns: tuple[str, ...]) -> list[str]:
    return sorted(
        {path.relative_to(ROOT).as_posix() for pattern in patterns for path in ROOT.glob(pattern)}
    )


def under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(f"{prefix}.") for prefix in prefixes)


@dataclass
class Boundary:
    reason: str
    files: tuple[str, ...]
    forbidden: tuple[str, ...]
    # Modules under a forbidden prefix that are nonetheless allowed.
    allowed: tuple[str, ...] = ()
    # Files (glob patterns) the boundary does not apply to.
    exempt: tuple[str, ...] = ()


EVERYTHING = ("function/**/*.py", "provider/**/*.py", "plan/**/*.py")
AWS_STANDIN = ("sandbox/awsstandin/**/*.py",)
PURE_PLAN = (
    "plan/stages.py",
    "plan/changes.py",
    "plan/kinds.py",
    "plan/health.py",
    "plan/output.py",
)
# What a pure module must not import: a Kubernetes or S3 client, or a socket.
NETWORK = ("kubernetes", "kubernetes_asyncio", "aiohttp", "boto3", "botocore", "socket", "ssl")
PURE_FUNCTION = (
    "function/allowlists.py",
    "function/compose.py",
    "function/model.py",
    "function/resources/*.py",
    "function/rules.py",
    "function/names.py",
    "function/observed.py",
)

BOUNDARIES = [
    Boundary(
        reason="the function never imports the provider",
        files=("function/**/*.py",),
        forbidden=("provider",),
    ),
    Boundary(
        reason="the provider never imports the function",
        files=("provider/**/*.py",),
        forbidden=("function",),
    ),
    Boundary(
        reason="only provider kube talks to a Kubernetes API server",
        files=EVERYTHING,
        forbidden=("kubernetes", "kubernetes_asyncio", "aiohttp"),
        exempt=("provider/kube.py",),
    ),
    Boundary(
        reason="the managed reconciler imports nothing of the provider outside itself",
        files=("provider/managed/**/*.py",),
        forbidden=("provider",),
        allowed=("provider.managed",),
    ),
    Boundary(
        reason="the pure composition imports neither gRPC nor the SDK nor protobuf",
        files=PURE_FUNCTION,
        forbidden=("grpc", "grpc_reflection", "grpc_health", "crossplane", "google.protobuf"),
    ),
    Boundary(
        reason="the allow-lists judge a git host by its text alone, never resolving it",
        files=("function/allowlists.py",),
        forbidden=("socket", "ssl", "dns", "http", "urllib.request"),
    ),
    Boundary(
        reason="the provider's runtime (queue, metrics, logs, durations, names) imports "
        "nothing else of it",
        files=("provider/runtime/**/*.py",),
        forbidden=("provider",),
        allowed=("provider.runtime",),
    ),
    Boundary(
        reason="provider kube builds only on the managed layer and the kubeconfig allow-list",
        files=("provider/kube.py",),
        forbidden=("provider",),
        allowed=("provider.managed", "provider.kubeconfig"),
    ),
    Boundary(
        reason="the watch-fed caches build only on provider kube and the managed layer",
        files=("provider/cache.py",),
        forbidden=("provider", "kubernetes", "kubernetes_asyncio", "aiohttp"),
        allowed=("provider.kube", "provider.managed"),
    ),
    Boundary(
        reason="the tenancy rules (kubeconfig allow-list, backup prefixes, endpoints and web "
        "identity roles) are pure",
        files=(
            "provider/kubeconfig.py",
            "provider/backup/storage/tenancy.py",
            "provider/backup/storage/web_identity.py",
        ),
        forbidden=("provider", *NETWORK),
        allowed=("provider.runtime.dns", "provider.backup.storage.tenancy"),
    ),
    Boundary(
        reason="which Secret a Backup may read its kubeconfig from is a pure rule",
        files=("provider/backup/source/connection_secret.py",),
        forbidden=("provider", *NETWORK),
        allowed=("provider.model",),
    ),
    Boundary(
        reason="the backup archive format is pure and stands alone: no I/O, nothing else of "
        "the provider",
        files=("provider/backup/format/**/*.py",),
        forbidden=("provider", *NETWORK),
        allowed=("provider.backup.format", "provider.runtime.dns"),
    ),
    Boundary(
        reason="the schedules' and restores' decisions are pure: no I/O",
        files=(
            "provider/backup/controllers/cron.py",
            "provider/backup/controllers/plan.py",
            "provider/backup/controllers/final.py",
            "provider/backup/controllers/last_backup.py",
            "provider/backup/controllers/retention.py",
            "provider/backup/restore/steps.py",
            "provider/backup/restore/compat.py",
        ),
        forbidden=("provider", *NETWORK),
        allowed=(
            "provider.backup.format.archive",
            "provider.backup.controllers.cron",
            "provider.backup.controllers.plan",
            "provider.runtime.dns",
            "provider.runtime.durations",
            "provider.runtime.timestamps",
            "provider.spaces.versions",
        ),
    ),
    Boundary(
        reason="the backup command line's diff, inventory and progress are pure: no I/O",
        files=(
            "provider/backup/restore/diff.py",
            "provider/backup/format/inventory.py",
            "provider/backup/cli/progress.py",
        ),
        forbidden=("provider", *NETWORK),
        allowed=("provider.backup.format.archive",),
    ),
    Boundary(
        reason="S3 and the rules for reaching it build on nothing else of the provider",
        files=("provider/backup/storage/**/*.py",),
        forbidden=("provider", "kubernetes", "kubernetes_asyncio", "aiohttp"),
        allowed=("provider.backup.storage", "provider.runtime"),
    ),
    Boundary(
        reason="the control plane a Backup reads builds only on the archive format among the "
        "backup packages",
        files=("provider/backup/source/**/*.py",),
        forbidden=("provider.backup",),
        allowed=("provider.backup.source", "provider.backup.format"),
    ),
    Boundary(
        reason="the backup controllers import neither the restore nor the command line",
        files=("provider/backup/controllers/**/*.py",),
        forbidden=("provider.backup.restore", "provider.backup.cli"),
    ),
    Boundary(
        reason="the restore takes only the Backup kind from the controllers, and never the "
        "command line",
        files=("provider/backup/restore/**/*.py",),
        forbidden=("provider.backup.controllers", "provider.backup.cli"),
        allowed=("provider.backup.controllers.backups",),
    ),
    Boundary(
        reason="nothing but the backup command line imports it or the restore's dry run and diffs "
        "(and the plan the diffs)",
        files=EVERYTHING,
        forbidden=(
            "provider.backup.cli",
            "provider.backup.restore.dryrun",
            "provider.backup.restore.diff",
        ),
        exempt=(
            "provider/backup/cli/*.py",
            "provider/backup/restore/dryrun.py",
            "plan/changes.py",
        ),
    ),
    Boundary(
        reason="everything about backups lives in provider/backup",
        files=("provider/*.py", "provider/managed/**/*.py", "provider/runtime/**/*.py"),
        forbidden=("provider.backup",),
        exempt=("provider/cli.py",),
    ),
    Boundary(
        reason="provider model builds only on kube and the managed layer",
        files=("provider/model.py",),
        forbidden=("provider",),
        allowed=("provider.managed", "provider.kube"),
    ),
    Boundary(
        reason="the backend and the Kubernetes side of each kind know no controller or CLI",
        files=("provider/spaces/**/*.py", "provider/instances.py", "provider/configs.py"),
        forbidden=("provider.controller", "provider.cli"),
    ),
    Boundary(
        reason="the controller does not import the CLI",
        files=("provider/controller.py",),
        forbidden=("provider.cli",),
    ),
    Boundary(
        reason="only provider/backup/storage/s3.py imports boto3 or botocore",
        files=EVERYTHING,
        forbidden=("boto3", "botocore"),
        exempt=("provider/backup/storage/s3.py",),
    ),
    Boundary(
        reason="the product never imports the sandbox",
        files=EVERYTHING,
        forbidden=("sandbox",),
    ),
    Boundary(
        reason="in the AWS stand-in only sandbox/awsstandin/cloud.py imports boto3 or botocore",
        files=AWS_STANDIN,
        forbidden=("boto3", "botocore"),
        exempt=("sandbox/awsstandin/cloud.py",),
    ),
    Boundary(
        reason="the function and the provider never import the plan command",
        files=("function/**/*.py", "provider/**/*.py"),
        forbidden=("plan",),
    ),
    Boundary(
        reason="the plan renders stages only through the function's pure composition",
        files=("plan/**/*.py",),
        forbidden=("function",),
        allowed=(
            *(module_name(path) for path in PURE_FUNCTION if "*" not in path),
            "function.resources",
        ),
    ),
    Boundary(
        reason="the plan reaches Kubernetes only through provider kube, and nothing else "
        "of the provider but the backup diff it shares",
        files=("plan/**/*.py",),
        forbidden=("provider",),
        allowed=("provider.kube", "provider.backup.restore.diff", "provider.backup.format.archive"),
    ),
    Boundary(
        reason="only plan live and the command talk to a cluster",
        files=("plan/**/*.py",),
        forbidden=("provider.kube",),
        exempt=("plan/live.py", "plan/cli.py", "plan/planner.py"),
    ),
    Boundary(
        reason="the plan's rules and output are pure: no cluster, process, git or network",
        files=PURE_PLAN,
        forbidden=(
            "provider.kube",
            "plan.live",
            "plan.build",
            "plan.checkout",
            "plan.planner",
            "plan.cli",
            "subprocess",
            "socket",
            "ssl",
            "aiohttp",
            "kubernetes",
            "boto3",
        ),
    ),
    Boundary(
        reason="the AWS stand-in talks to Kubernetes only through provider kube",
        files=AWS_STANDIN,
        forbidden=("kubernetes", "kubernetes_asyncio", "aiohttp"),
    ),
    Boundary(
        reason="the AWS stand-in knows nothing of the function or the backup writer",
        files=AWS_STANDIN,
        forbidden=("function", "provider.backup"),
    ),
]


@pytest.mark.parametrize("boundary", BOUNDARIES, ids=lambda boundary: boundary.reason)
def test_no_file_imports_across_a_boundary(boundary: Boundary) -> None:
    exempt = set(files_matching(boundary.exempt))
    files = [f for f in files_matching(boundary.files) if f not in exempt]
    assert files, f"no files match {boundary.files}"

    offending = [
        found
        for relative in files
        for found in imports_in(relative)
        if under(found.module, boundary.forbidden) and not under(found.module, boundary.allowed)
    ]

    assert not offending, f"{boundary.reason}, but:\n" + "\n".join(map(str, offending))


@pytest.mark.parametrize("boundary", BOUNDARIES, ids=lambda boundary: boundary.reason)
def test_every_file_a_boundary_names_exists(boundary: Boundary) -> None:
    for pattern in (*boundary.files, *boundary.exempt):
        assert files_matching((pattern,)), f"{pattern} matches no file"


def test_the_scanner_sees_the_kubernetes_and_aiohttp_imports_of_provider_kube() -> None:
    modules = {found.module for found in imports_in("provider/kube.py")}

    assert under_any(modules, ("kubernetes",))
    assert "aiohttp" in modules


def test_the_scanner_sees_the_boto3_imports_of_the_stand_ins_cloud_module() -> None:
    modules = {found.module for found in imports_in("sandbox/awsstandin/cloud.py")}

    assert under_any(modules, ("boto3",))
    assert under_any(modules, ("botocore",))


def under_any(modules: set[str], prefixes: tuple[str, ...]) -> bool:
    return any(under(module, prefixes) for module in modules)


@dataclass
class ScanCase:
    reason: str
    source: str
    file: str
    expected: list[str]


SCAN_CASES = [
    ScanCase(
        "a plain import is seen", "import boto3.session\n", "provider/x.py", ["boto3.session"]
    ),
    ScanCase(
        "a from import names each imported member",
        "from provider.managed import conditions, meta\n",
        "provider/x.py",
        ["provider.managed.conditions", "provider.managed.meta"],
    ),
    ScanCase(
        "a relative import resolves against the file's package",
        "from . import meta\nfrom .conditions import Condition\n",
        "provider/managed/x.py",
        ["provider.managed.meta", "provider.managed.conditions.Condition"],
    ),
    ScanCase(
        "a relative import two levels up leaves the package",
        "from ..kube import Cluster\n",
        "provider/managed/x.py",
        ["provider.kube.Cluster"],
    ),
    ScanCase(
        "a relative import in a package's init resolves against that package",
        "from .policy import Policies\n",
        "provider/managed/__init__.py",
        ["provider.managed.policy.Policies"],
    ),
    ScanCase(
        "an import inside a function or a type checking block is seen",
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import grpc\n"
        "def f() -> None:\n    import aiohttp\n",
        "function/x.py",
        ["typing.TYPE_CHECKING", "grpc", "aiohttp"],
    ),
    ScanCase(
        "a dynamic import of a literal name is seen",
        "import importlib\nimportlib.import_module('provider.kube')\n__import__('boto3')\n",
        "function/x.py",
        ["importlib", "provider.kube", "boto3"],
    ),
]


@pytest.mark.parametrize("case", SCAN_CASES, ids=lambda case: case.reason)
def test_the_scanner_resolves_every_form_of_import(case: ScanCase) -> None:
    found = [item.module for item in imports_in_source(case.source, case.file)]

    assert sorted(found) == sorted(case.expected)


def test_a_boundary_does_not_mistake_a_module_for_one_sharing_its_prefix() -> None:
    assert under("provider.managed.meta", ("provider.managed",))
    assert not under("provider.managedx", ("provider.managed",))
    assert not under("functions", ("function",))
    assert not under("grpcio_tools", ("grpc",))


# Run by the build machine's bare python3 (tools/images.sh) or, inside the
# launched process's namespaces, by `python -I` (sandbox/rootfs.py): nothing
# but the standard library is importable there.
STANDARD_LIBRARY_ONLY = ("tools/*.py", "sandbox/rootfs.py")


def test_the_image_build_helpers_and_the_rootfs_launcher_import_only_the_standard_library() -> None:
    import sys

    files = files_matching(STANDARD_LIBRARY_ONLY)
    assert "tools/rootfs.py" in files
    offending = [
        found
        for relative in files
        for found in imports_in(relative)
        if found.module.split(".")[0] not in {*sys.stdlib_module_names, "__future__", "tools"}
    ]
    assert not offending, "\n".join(map(str, offending))


def test_every_backup_module_lives_in_the_sub_package_of_its_concern() -> None:
    loose = [f for f in files_matching(("provider/backup/*.py",)) if not f.endswith("__init__.py")]

    assert not loose, f"put each in format, storage, source, controllers, restore or cli: {loose}"
