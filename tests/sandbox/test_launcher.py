"""sandbox.launcher: which command runs our programs, from the venv or from an image.

Pure: the images here are fakes of an unpacked bundle (``config.json`` and the
``/venv/bin`` scripts); tests/images/test_launcher.py runs the real ones.
"""

from __future__ import annotations

import json
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest

from sandbox.launcher import IMAGE_MOUNTS, ImageLauncher, VirtualenvLauncher, readable_by_group
from sandbox.processes import ImageProcess, Process

NONROOT = 65532


def fake_bundle(images: Path, name: str, *programs: str) -> Path:
    """An unpacked image `name` whose /venv/bin holds `programs`."""
    bundle = images / name
    bin_dir = bundle / "rootfs" / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for program in programs:
        (bin_dir / program).write_text("#!/venv/bin/python\n")
    config = {
        "root": {"path": "rootfs"},
        "process": {
            "args": [f"/venv/bin/{programs[0]}"],
            "env": ["PATH=/venv/bin:/usr/bin"],
            "cwd": "/home/nonroot",
            "user": {"uid": NONROOT, "gid": NONROOT},
        },
    }
    (bundle / "config.json").write_text(json.dumps(config))
    return bundle


@pytest.fixture
def images(tmp_path: Path) -> Path:
    folder = tmp_path / "images"
    fake_bundle(folder, "function", "function-controlplane")
    fake_bundle(folder, "provider", "controlplane-provider", "controlplane-backup-controller")
    return folder


@dataclass
class ProgramCase:
    reason: str
    program: str
    image: str


PROGRAMS = [
    ProgramCase("the function ships in the function image", "function-controlplane", "function"),
    ProgramCase("the provider ships in the provider image", "controlplane-provider", "provider"),
    ProgramCase(
        "the Backup controller is the provider image with another command",
        "controlplane-backup-controller",
        "provider",
    ),
]


@pytest.mark.parametrize("case", PROGRAMS, ids=lambda case: case.reason)
def test_an_image_command_runs_the_programs_script_of_its_image(
    images: Path, case: ProgramCase
) -> None:
    command = ImageLauncher(images).command(case.program, "--flag", "value")
    assert command.argv == (f"/venv/bin/{case.program}", "--flag", "value")
    assert command.image is not None
    assert command.image.rootfs == (images / case.image / "rootfs").resolve()
    assert command.binds == ()


def test_a_path_argument_is_bound_read_only_and_named_where_the_image_sees_it(
    images: Path, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "management.kubeconfig"
    kubeconfig.write_text("{}")
    certs = tmp_path / "tls"
    certs.mkdir()
    command = ImageLauncher(images).command(
        "function-controlplane", "serve", "--tls-certs-dir", certs, "--kubeconfig", kubeconfig
    )
    targets = [bind.target for bind in command.binds]
    assert command.argv == ("/venv/bin/function-controlplane", "serve", "--tls-certs-dir",
                            targets[0], "--kubeconfig", targets[1])  # fmt: skip
    assert targets == [f"{IMAGE_MOUNTS}/0/tls", f"{IMAGE_MOUNTS}/1/management.kubeconfig"]
    assert [bind.source for bind in command.binds] == [certs, kubeconfig]
    assert all(bind.read_only for bind in command.binds)


def test_the_venv_passes_a_path_argument_as_it_is(tmp_path: Path) -> None:
    (tmp_path / "controlplane-provider").write_text("")
    kubeconfig = tmp_path / "kubeconfig"
    command = VirtualenvLauncher(tmp_path).command(
        "controlplane-provider", "--kubeconfig", kubeconfig
    )
    assert command.argv == (
        str(tmp_path / "controlplane-provider"),
        "--kubeconfig",
        str(kubeconfig),
    )
    assert command.image is None


@dataclass
class ProcessCase:
    reason: str
    from_images: bool
    kind: type[Process]


PROCESSES = [
    ProcessCase("a venv command starts as a host process", False, Process),
    ProcessCase("an image command starts through sandbox.rootfs", True, ImageProcess),
]


@pytest.mark.parametrize("case", PROCESSES, ids=lambda case: case.reason)
def test_a_command_makes_the_process_that_runs_it_where_it_comes_from(
    images: Path, tmp_path: Path, case: ProcessCase
) -> None:
    (tmp_path / "controlplane-provider").write_text("")
    launcher = ImageLauncher(images) if case.from_images else VirtualenvLauncher(tmp_path)
    command = launcher.command("controlplane-provider")
    process = command.process("provider", tmp_path / "provider.log", {"AWS_REGION": "us-east-1"})
    assert type(process) is case.kind
    assert process.env["AWS_REGION"] == "us-east-1"


def test_an_image_process_gets_only_the_environment_it_is_given(images: Path) -> None:
    command = ImageLauncher(images).command("controlplane-provider")
    process = command.process("provider", images / "provider.log", {"AWS_REGION": "us-east-1"})
    assert process.env == {"AWS_REGION": "us-east-1"}, "nothing of the host's environment"


@dataclass
class MissingCase:
    reason: str
    program: str
    error: type[Exception]
    message: str


MISSING = [
    MissingCase(
        "a program of no image is refused", "kubectl", ValueError, "kubectl ships in no image"
    ),
    MissingCase(
        "an image without the program asks for a rebuild",
        "controlplane-backup-controller",
        FileNotFoundError,
        "no /venv/bin/controlplane-backup-controller: run `make images`",
    ),
]


@pytest.mark.parametrize("case", MISSING, ids=lambda case: case.reason)
def test_a_program_without_its_image_is_a_clear_error(tmp_path: Path, case: MissingCase) -> None:
    fake_bundle(tmp_path, "provider", "controlplane-provider")
    with pytest.raises(case.error, match=case.message.replace("(", r"\(")):
        ImageLauncher(tmp_path).command(case.program)


def test_an_image_not_built_says_to_run_make_images(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="run `make images`"):
        ImageLauncher(tmp_path).command("function-controlplane")


def test_files_given_to_an_image_become_group_readable_and_stay_private_to_others(
    tmp_path: Path,
) -> None:
    certs = tmp_path / "tls"
    certs.mkdir(mode=0o700)
    key = certs / "tls.key"
    key.write_text("secret")
    key.chmod(0o600)
    readable_by_group(certs, NONROOT)
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in (certs, key)}
    assert modes == {"tls": 0o750, "tls.key": 0o640}
    assert {path.stat().st_gid for path in (certs, key)} == {NONROOT}
