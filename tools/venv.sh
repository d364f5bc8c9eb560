#!/bin/sh
# Makes /venv, the product and its locked dependencies, inside the build stage
# of an image: the one recipe the Dockerfile and tools/images.sh both follow,
# so that both images carry the same venv.
#
#   sh tools/venv.sh SOURCE   (SOURCE holds pyproject.toml, README.md, function/,
#                              provider/ and tools/image-requirements.txt)
#
# Only the product goes in: SOURCE has no sandbox/ (the Dockerfile's
# .dockerignore and tools/images.sh copy the same allow-list), and pip installs
# exactly the hashed lock, no extras. pip and setuptools are removed after; the
# .pyc files are compiled with unchecked hashes, so they embed no time and the
# read-only image never rewrites them.
set -eu
source_dir="$1"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

/usr/bin/python3 -m venv /venv
/venv/bin/pip install --quiet --no-compile --require-hashes --no-deps --only-binary=:all: \
  -r "${source_dir}/tools/image-requirements.txt"
# setuptools, pinned by the lock, builds the product without build isolation.
/venv/bin/pip install --quiet --no-compile --no-deps --no-build-isolation "${source_dir}"
/venv/bin/python -B -m pip uninstall --quiet --yes pip setuptools
rm -f /venv/bin/activate /venv/bin/activate.csh /venv/bin/activate.fish /venv/bin/Activate.ps1
find /venv -name __pycache__ -prune -exec rm -rf {} +
# A console script whose module is not in the image would only fail: it goes.
# Ours for the development-only sandbox; and a dependency's that points at a
# module its own wheel lacks (cel-python 0.5.0's `cel-python = cel_python:main`,
# whose package is `celpy`).
/venv/bin/python -I -B - <<'SCRIPTS'
import importlib.metadata
import importlib.util
import pathlib

for distribution in importlib.metadata.distributions():
    for script in distribution.entry_points.select(group="console_scripts"):
        if importlib.util.find_spec(script.module.split(".")[0]) is None:
            pathlib.Path("/venv/bin", script.name).unlink()
            print(f"venv.sh: no {script.name}: {script.module} is not part of the image")
SCRIPTS
/venv/bin/python -I -B -c 'import function.cli, provider.cli'
/venv/bin/python -B -m compileall -q --invalidation-mode unchecked-hash /venv
