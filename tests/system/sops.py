"""SOPS fixtures as a team makes them: an age key, and a Secret encrypted for it.

With the sops and age-keygen that `tools/build.sh sops age_keygen` builds,
so what Flux decrypts is what `sops --encrypt --age` writes.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from sandbox.paths import TOOLS_BIN

SOPS_BIN = TOOLS_BIN / "sops"
AGE_KEYGEN_BIN = TOOLS_BIN / "age-keygen"
# kustomize-controller imports every key of its decryption Secret whose name ends so.
AGE_KEY_NAME = "identity.agekey"
# Only the values of a Secret are encrypted; its kind and name stay readable.
ENCRYPTED_REGEX = "^(data|stringData)$"
TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class AgeKey:
    """An age identity (the private key file's text) and its recipient (the public key)."""

    identity: str
    recipient: str


def _run(*args: str, cwd: Path) -> str:
    done = subprocess.run(
        list(args), cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, check=False
    )
    if done.returncode != 0:
        msg = f"{Path(args[0]).name} failed: {done.stderr.strip()}"
        raise RuntimeError(msg)
    return done.stdout


def age_key(workdir: Path) -> AgeKey:
    """A new age key, as `age-keygen` writes it."""
    path = workdir / "age.key"
    _run(str(AGE_KEYGEN_BIN), "-o", str(path), cwd=workdir)
    recipient = _run(str(AGE_KEYGEN_BIN), "-y", str(path), cwd=workdir).strip()
    return AgeKey(path.read_text(), recipient)


def encrypt(manifest: str, recipient: str, workdir: Path) -> str:
    """`manifest` (YAML) encrypted for `recipient` by `sops --encrypt --age`."""
    plain = workdir / "plain.yaml"
    plain.write_text(manifest)
    return _run(
        str(SOPS_BIN),
        "--encrypt",
        "--age",
        recipient,
        "--encrypted-regex",
        ENCRYPTED_REGEX,
        "--input-type",
        "yaml",
        "--output-type",
        "yaml",
        str(plain),
        cwd=workdir,
    )
