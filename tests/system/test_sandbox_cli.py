"""`controlplane-sandbox up` as the README runs it: it comes up, says how to reach it, and
stops every process it started on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from sandbox.spaces import wait_for

from .conftest import skip_unless_built

UP_DEADLINE = 300.0
STOP_DEADLINE = 120.0


def processes_mentioning(text: str) -> list[str]:
    """The command lines of running processes that mention `text` (a folder of theirs)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(cmdline)
    return found


def test_the_sandbox_comes_up_prints_its_kubeconfig_and_stops_everything_on_sigterm(
    tmp_path: Path,
) -> None:
    skip_unless_built()
    workdir = tmp_path / "sandbox"
    script = Path(sys.executable).with_name("controlplane-sandbox")
    process = subprocess.Popen(
        [str(script), "up", "--no-build", "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    output: list[str] = []
    reader = threading.Thread(
        target=lambda: output.extend(iter(process.stdout.readline, "")),  # type: ignore[union-attr]
        daemon=True,
    )
    reader.start()
    try:
        wait_for(
            "the sandbox to say it is up",
            lambda: (
                any("The platform is up" in line for line in output) or process.poll() is not None
            ),
            timeout=UP_DEADLINE,
        )
        assert process.poll() is None, "".join(output)
        kubeconfig = workdir / "management.kubeconfig"
        assert f"export KUBECONFIG={kubeconfig}" in "".join(output)
        assert kubeconfig.is_file()
        assert processes_mentioning(str(workdir)), "no process of the sandbox runs"
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=STOP_DEADLINE)
    reader.join(timeout=10)
    assert code == 0, "".join(output)
    assert processes_mentioning(str(workdir)) == []
