"""sandbox.rootfs: bind mounts, a refused mount point, and a process that ignores SIGTERM."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from sandbox import rootfs
from sandbox.processes import ImageProcess
from tests.images.conftest import owned_by, python_in


def test_a_bound_file_is_readable_and_read_only_inside(
    function_image: rootfs.Image, tmp_path: Path
) -> None:
    config = tmp_path / "settings.txt"
    config.write_text("from the host\n")
    owned_by(function_image, config)
    result = python_in(
        function_image,
        "print(open('/tmp/in/settings.txt').read().strip())\n"
        "try:\n    open('/tmp/in/settings.txt', 'a')\nexcept OSError as error:\n"
        "    print(error.errno)\n",
        binds=[rootfs.Bind(config, "/tmp/in/settings.txt")],
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["from the host", "30"], "EROFS: bound read-only"


def test_a_mount_point_the_image_lacks_outside_tmp_is_refused(
    function_image: rootfs.Image, tmp_path: Path
) -> None:
    result = python_in(
        function_image, "print('ran')", binds=[rootfs.Bind(tmp_path, "/etc/not-in-the-image")]
    )
    assert result.returncode != 0
    assert result.stdout == ""
    assert "/etc/not-in-the-image does not exist in the image" in result.stderr


def test_stop_kills_a_process_that_ignores_sigterm_after_the_grace_period(
    function_image: rootfs.Image,
) -> None:
    # As pid 1 of its namespace, a process without a SIGTERM handler ignores it.
    process = rootfs.popen(
        function_image,
        ["-c", "print('up', flush=True)\nimport time\ntime.sleep(600)"],
        command=["/venv/bin/python"],
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"up\n"
    started = time.monotonic()
    code = rootfs.stop(process, grace=1.0)
    assert code != 0
    assert 1.0 <= time.monotonic() - started < 30


def test_the_image_user_cannot_read_a_root_only_file_it_is_given(
    function_image: rootfs.Image, tmp_path: Path
) -> None:
    secret = tmp_path / "root-only"
    secret.write_text("x")
    secret.chmod(0o600)
    result = python_in(function_image, "open('/tmp/s')", binds=[rootfs.Bind(secret, "/tmp/s")])
    assert result.returncode != 0
    assert "PermissionError" in result.stderr, "uid 65532 holds no capability to bypass modes"


# Says when SIGTERM reached it.
GRACEFUL = (
    "import signal, sys, time\n"
    "def done(*_):\n    print('terminated', flush=True)\n    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, done)\n"
    "print('up', flush=True)\n"
    "time.sleep(600)\n"
)


def image_process(image: rootfs.Image, log: Path) -> ImageProcess:
    process = ImageProcess("graceful", image, ["/venv/bin/python", "-c", GRACEFUL], log)
    process.start(lambda: "up" in log.read_text())
    return process


def test_an_image_process_stopped_gets_sigterm_itself_and_exits_cleanly(
    function_image: rootfs.Image, tmp_path: Path
) -> None:
    process = image_process(function_image, tmp_path / "graceful.log")
    process.stop()
    assert process.log_tail().splitlines() == ["up", "terminated"]


def test_an_image_process_killed_dies_at_once_with_no_chance_to_finish(
    function_image: rootfs.Image, tmp_path: Path
) -> None:
    process = image_process(function_image, tmp_path / "graceful.log")
    program = process.pid
    assert program is not None
    assert Path(f"/proc/{program}/cmdline").read_bytes().startswith(b"/venv/bin/python")
    process.kill()
    assert not Path(f"/proc/{program}").exists(), "the program itself is gone"
    assert "terminated" not in process.log_tail(), "it ran no SIGTERM handler"
