"""The Dockerfile and `make images` build the same images.

The Dockerfile is for people with Docker; it is not built here. Its stages are
parsed and compared with the configs of the images `make images` built, and
both builds follow one venv recipe (tools/venv.sh) over one allow-list of
sources.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field

import pytest

from sandbox import rootfs
from tests.images.conftest import oci_config
from tests.schemas import ROOT

DOCKERFILE = ROOT / "Dockerfile"


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)


def stages(text: str) -> dict[str, Stage]:
    """The Dockerfile's stages by name, each with its instructions (continuations joined)."""
    joined = re.sub(r"\\\n", " ", text)
    found: dict[str, Stage] = {}
    current: Stage | None = None
    for raw in joined.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            current = Stage(words[2] if len(words) > 2 else words[0], words[0])
            found[current.name] = current
        elif current is not None:
            current.instructions.append((keyword, rest.strip()))
    return found


@dataclass
class ImageConfig:
    """What a Dockerfile target sets of an image's config."""

    entrypoint: list[str] = field(default_factory=list)
    user: str = ""
    workdir: str = ""
    ports: set[str] = field(default_factory=set)
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)


def pairs(arguments: str) -> dict[str, str]:
    return dict(word.split("=", 1) for word in shlex.split(arguments))


def target_config(all_stages: dict[str, Stage], target: str) -> ImageConfig:
    """The config a target ends with: its stage's settings over those of the stages it is FROM."""
    chain = []
    stage: Stage | None = all_stages[target]
    while stage is not None:
        chain.append(stage)
        stage = all_stages.get(stage.base)
    config = ImageConfig()
    for current in reversed(chain):
        for keyword, rest in current.instructions:
            if keyword == "ENTRYPOINT":
                config.entrypoint = json.loads(rest)
            elif keyword == "USER":
                config.user = rest
            elif keyword == "WORKDIR":
                config.workdir = rest
            elif keyword == "EXPOSE":
                config.ports |= {p if "/" in p else f"{p}/tcp" for p in rest.split()}
            elif keyword == "ENV":
                config.env |= pairs(rest)
            elif keyword == "LABEL":
                config.labels |= pairs(rest)
    return config


def test_the_parser_reads_a_target_through_the_stages_it_builds_on() -> None:
    text = (
        "FROM debian:12-slim AS build\nRUN true\n"
        "FROM distroless AS runtime\nENV A=1 \\\n  B=2\nUSER 1:1\nEXPOSE 80\n"
        'LABEL x="a b"\nFROM runtime AS app\nENV B=3\nENTRYPOINT ["/bin/app", "run"]\n'
    )
    config = target_config(stages(text), "app")
    assert config == ImageConfig(
        entrypoint=["/bin/app", "run"],
        user="1:1",
        ports={"80/tcp"},
        env={"A": "1", "B": "3"},
        labels={"x": "a b"},
    )


TARGETS = ["function", "provider"]


@pytest.mark.parametrize("target", TARGETS)
def test_the_dockerfile_target_and_the_daemonless_image_agree(target: str) -> None:
    expected = target_config(stages(DOCKERFILE.read_text()), target)
    built = oci_config(target)["config"]
    assert built["Entrypoint"] == expected.entrypoint
    assert built.get("Cmd") in (None, [])
    assert built["User"] == expected.user
    assert built["WorkingDir"] == expected.workdir
    assert set(built["ExposedPorts"]) == expected.ports
    env = dict(entry.split("=", 1) for entry in built["Env"])
    assert expected.env.items() <= env.items()
    assert expected.labels.items() <= built["Labels"].items()


def test_both_builds_are_debian_12_with_its_python_3_11_in_the_same_venv(
    function_image: rootfs.Image,
) -> None:
    all_stages = stages(DOCKERFILE.read_text())
    assert all_stages["build"].base == "debian:12-slim"
    assert all_stages["runtime"].base.startswith("gcr.io/distroless/python3-debian12:")
    assert ("COPY", "--from=build /venv /venv") in all_stages["runtime"].instructions
    assert ("RUN", "sh tools/venv.sh /src") in all_stages["build"].instructions
    assert (function_image.rootfs / "etc/debian_version").read_text().startswith("12.")
    venv = dict(
        line.split(" = ", 1)
        for line in (function_image.rootfs / "venv/pyvenv.cfg").read_text().splitlines()
    )
    # The venv's python is Debian's /usr/bin/python3, where distroless has it too.
    assert venv["home"] == "/usr/bin"
    assert venv["version"].startswith("3.11.")


def test_the_docker_build_context_is_the_list_of_sources_make_images_copies() -> None:
    allowed = {
        line[1:]
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    script = (ROOT / "tools" / "images.sh").read_text()
    match = re.search(r"^sources=\((.*)\)$", script, re.MULTILINE)
    assert match is not None
    assert set(match.group(1).split()) == allowed
    assert "sandbox" not in allowed
