"""`controlplane-sandbox up` as the README runs it: it comes up, says how to reach it, and
stops every process it started on SIGTERM.

Each case starts a whole platform of its own, not the system tests' shared one:
it runs with the other tests, beside the system scenarios (`make test`).
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox import rootfs
from sandbox.spaces import wait_for
from tests.system.conftest import skip_unless_built

UP_DEADLINE = 300.0
ALERTS_DEADLINE = 30.0
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
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


def descendants(pid: int) -> list[int]:
    """Every process started by `pid`, its children's children included."""
    try:
        children = [
            int(child)
            for task in Path(f"/proc/{pid}/task").iterdir()
            for child in (task / "children").read_text().split()
        ]
    except OSError:
        return []
    return [*children, *(grandchild for child in children for grandchild in descendants(child))]


def rooted_in(folder: Path, pids: list[int]) -> list[int]:
    """Those of `pids` whose root filesystem (chroot) lies under `folder`."""
    found = []
    for pid in pids:
        try:
            root = Path(f"/proc/{pid}/root").readlink()
        except OSError:
            continue
        if root.is_relative_to(folder):
            found.append(pid)
    return found


@dataclass
class UpCase:
    reason: str
    flags: list[str]
    image_processes: int


FROM_IMAGES = UpCase(
    "the function, provider and Backup controller from the built images", ["--from-images"], 3
)
CASES = [
    UpCase("our programs from the development venv", [], 0),
    pytest.param(FROM_IMAGES, marks=pytest.mark.images, id=FROM_IMAGES.reason),
]


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.reason)
def test_the_sandbox_comes_up_prints_its_kubeconfig_and_stops_everything_on_sigterm(
    tmp_path: Path, case: UpCase
) -> None:
    skip_unless_built()
    workdir = tmp_path / "sandbox"
    script = Path(sys.executable).with_name("controlplane-sandbox")
    process = subprocess.Popen(
        [str(script), "up", "--no-build", "--workdir", str(workdir), *case.flags],
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
        # The team-quickstart example, ready to apply, and the command that applies it.
        team_quickstart = workdir / "team-quickstart.yaml"
        assert f"kubectl apply -f {team_quickstart}" in "".join(output)
        assert "examples/team-quickstart" in "".join(output)
        assert team_quickstart.is_file()
        # Prometheus on the shipped rules, and the alerts firing, printed as they change.
        url = re.search(r"on the shipped alert rules: (http://\S+)", "".join(output))
        assert url, "".join(output)
        wait_for(
            "the firing alerts printed",
            lambda: any(" alerts firing: " in line for line in output),
            timeout=ALERTS_DEADLINE,
        )
        with NO_PROXY.open(f"{url.group(1)}/api/v1/rules", timeout=5) as answer:
            assert "ControlPlaneBackupFailing" in answer.read().decode()
        assert processes_mentioning(str(workdir)), "no process of the sandbox runs"
        from_images = rooted_in(rootfs.IMAGES_DIR, descendants(process.pid))
        assert len(from_images) == case.image_processes
    finally:
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=STOP_DEADLINE)
    reader.join(timeout=10)
    assert code == 0, "".join(output)
    assert processes_mentioning(str(workdir)) == []
    assert [pid for pid in from_images if Path(f"/proc/{pid}").exists()] == []
