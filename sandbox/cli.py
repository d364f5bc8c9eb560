"""`controlplane-sandbox up`: the whole platform on this machine, until Ctrl-C.

It builds the Go tools that are missing (tools/build.sh, cached), starts
every process, installs the packages, XRDs and compositions, makes a git
repository with an example, prints the management cluster's kubeconfig and
what to try, and stops everything on Ctrl-C or SIGTERM.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

import click

from sandbox import quickstart
from sandbox.launcher import ImageLauncher, Launcher, VirtualenvLauncher
from sandbox.paths import REPO_ROOT
from sandbox.platform import Platform
from sandbox.prometheus import Alert, Prometheus

# How often `up` asks Prometheus which alerts fire.
ALERT_POLL_SECONDS = 15.0

EXAMPLE_FILES = {
    "clusters/sandbox/greeting.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: greeting\n  namespace: default\n"
        "data:\n  hello: from the sandbox's git repository\n"
    ),
}


def _example(namespace: str, url: str) -> str:
    return f"""apiVersion: v1
kind: Namespace
metadata:
  name: {namespace}
---
apiVersion: platform.acme.io/v1alpha1
kind: ControlPlane
metadata:
  name: demo
  namespace: {namespace}
spec:
  source:
    url: {url}
    ref:
      branch: main
    path: ./clusters/sandbox
    interval: 1m
"""


def _shown(path: Path) -> str:
    """A path of the repository, as from its root."""
    return path.relative_to(REPO_ROOT).as_posix()


def _launcher(from_images: bool) -> Launcher:
    """Where our programs come from; a clear error if the images cannot run."""
    if not from_images:
        return VirtualenvLauncher()
    launcher = ImageLauncher()
    try:
        launcher.check()
    except (FileNotFoundError, PermissionError) as error:
        raise click.ClickException(str(error)) from None
    return launcher


def _print_alerts_until(stop: threading.Event, prometheus: Prometheus) -> None:
    """Print the firing alerts whenever they change, until ``stop``."""
    shown: list[Alert] | None = None
    while not stop.wait(ALERT_POLL_SECONDS if shown is not None else 0):
        try:
            firing = prometheus.firing()
        except OSError as error:
            click.echo(f"Prometheus did not answer: {error}", err=True)
            continue
        if firing != shown:
            names = ", ".join(str(alert) for alert in firing) or "none"
            click.echo(f"{time.strftime('%H:%M:%S')} alerts firing: {names}")
            shown = firing


@click.group()
def main() -> None:
    """The whole platform on one machine: real Crossplane core, Flux and our controllers."""


@main.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where processes keep data and logs (default: a new temporary folder).",
)
@click.option("--no-build", is_flag=True, help="Do not run tools/build.sh first.")
@click.option(
    "--from-images",
    is_flag=True,
    help=(
        "Run the function, provider and Backup controller from the images `make images` "
        "built (as uid 65532, chrooted; needs root) instead of the development venv."
    ),
)
def up(workdir: Path | None, no_build: bool, from_images: bool) -> None:
    """Start the platform, print how to reach it, and stop it on Ctrl-C."""
    launcher = _launcher(from_images)
    if not no_build:
        click.echo("building missing tools (tools/build.sh; cached tools are skipped)...")
        built = subprocess.run([str(REPO_ROOT / "tools" / "build.sh")], check=False)
        if built.returncode != 0:
            raise click.ClickException("tools/build.sh failed; see its output above")
    if workdir is None:
        workdir = Path(tempfile.mkdtemp(prefix="controlplane-sandbox-"))
    stop = threading.Event()

    def stop_on(signum: int, _frame: FrameType | None) -> None:
        stop.set()
        click.echo(f"\n{signal.Signals(signum).name}: stopping everything...", err=True)

    signal.signal(signal.SIGTERM, stop_on)
    signal.signal(signal.SIGINT, stop_on)
    click.echo(f"starting the platform in {workdir} (a minute or two)...")
    started = time.monotonic()
    try:
        with Platform(workdir, launcher, crossplane_in_hosted=True) as platform:
            repository = platform.git.repository("demo")
            repository.commit(EXAMPLE_FILES, "An example for the sandbox")
            example = workdir / "controlplane.yaml"
            example.write_text(_example("team-demo", repository.url))
            team_quickstart = quickstart.prepare(platform.git, workdir)
            kubeconfig = platform.kubeconfig
            click.echo(
                f"""
The platform is up ({time.monotonic() - started:.0f}s). Management cluster:

  export KUBECONFIG={kubeconfig}

Try:

  kubectl apply -f {example}
  kubectl -n team-demo get controlplanes.platform.acme.io demo -w
  kubectl -n team-demo get managed,kustomizations,gitrepositories
  kubectl -n team-demo get secret demo-kubeconfig -o jsonpath='{{.data.kubeconfig}}' \\
    | base64 -d > demo.kubeconfig   # the team's control plane; Flux put a ConfigMap there
  kubectl --kubeconfig demo.kubeconfig get crds   # Crossplane runs there too: install packages

A team's first ControlPlane, with two stages and backups ({_shown(quickstart.EXAMPLE)}; its
README says what to expect):

  kubectl apply -f {team_quickstart}
  kubectl -n team-a get controlplanes.platform.acme.io myctp -w

Prometheus scrapes every controller on the shipped alert rules: {platform.prometheus.url}
(firing alerts are printed here as they change).

Logs are in {workdir}. Ctrl-C stops everything.""",
                nl=True,
            )
            _print_alerts_until(stop, platform.prometheus)
    except KeyboardInterrupt:
        pass
    click.echo("stopped.")
    sys.exit(0)
