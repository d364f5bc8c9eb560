"""SeaweedFS identities that mirror IAM role sessions, through `weed shell`.

SeaweedFS 4.48 signs and authorizes S3 requests itself: it knows an access key
only as a credential of one of its identities, and evaluates the IAM policy
documents attached to that identity (Resource ARNs, `s3:prefix` conditions).
It refuses a session token it did not issue, even for a key it knows. So each
session moto's STS hands out becomes an access key of an identity named after
the role (`role-<name>`), with the role's managed policies attached verbatim.
`weed shell` writes them into the filer, and the S3 gateway picks them up.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.s3 import WEED_BIN

_SHELL_TIMEOUT = 30.0


class IdentityError(Exception):
    """`weed shell` failed; the message holds its output (no secret: keys are not echoed)."""


@dataclass(frozen=True)
class SeaweedAdmin:
    """Where `weed shell` finds the cluster: the master's and filer's `ip:port.grpcPort`."""

    master: str
    filer: str
    weed: Path = WEED_BIN


def identity_name(role: str) -> str:
    """The SeaweedFS identity standing for an IAM role."""
    return f"role-{role}"


class Identities:
    """Gives an IAM role's sessions to SeaweedFS, with the role's policies."""

    def __init__(self, admin: SeaweedAdmin) -> None:
        """Administer the cluster ``admin`` names."""
        self.admin = admin

    def grant(
        self,
        role: str,
        policies: Mapping[str, Mapping[str, Any]],
        access_key: str,
        secret_key: str,
    ) -> None:
        """Let the key act as ``role``, under exactly ``policies`` (name to document).

        Raises:
            IdentityError: SeaweedFS refused a step.
        """
        name = identity_name(role)
        current = self._show(name)
        key = f"-access_key {access_key} -secret_key {secret_key}"
        if current is None:
            self._sync(name, None, policies, f"s3.user.create -name {name} {key}")
        else:
            self._sync(name, current, policies, f"s3.accesskey.create -user {name} {key}")

    def refresh(self, role: str, policies: Mapping[str, Mapping[str, Any]]) -> None:
        """Give the role's identity, if it has one, exactly ``policies`` from now on.

        Raises:
            IdentityError: SeaweedFS refused a step.
        """
        name = identity_name(role)
        current = self._show(name)
        if current is not None:
            self._sync(name, current, policies)

    def _sync(
        self,
        name: str,
        current: Mapping[str, Any] | None,
        policies: Mapping[str, Mapping[str, Any]],
        *key_commands: str,
    ) -> None:
        """Put the policies, run ``key_commands``, attach the policies and detach the rest."""
        with tempfile.TemporaryDirectory(prefix="standin-policies-") as folder:
            commands = []
            for policy, document in sorted(policies.items()):
                path = Path(folder) / f"{policy}.json"
                path.write_text(json.dumps(document))
                commands.append(f"s3.policy -put -name={policy} -file={path}")
            commands.extend(key_commands)
            commands.extend(f"s3.policy.attach -policy {p} -user {name}" for p in sorted(policies))
            stale = set((current or {}).get("policies") or []) - set(policies)
            commands.extend(f"s3.policy.detach -policy {p} -user {name}" for p in sorted(stale))
            self._run(commands)

    def revoke(self, role: str, access_key: str) -> None:
        """Remove a session's key (an expired one)."""
        self._run([f"s3.accesskey.delete -user {identity_name(role)} -access_key {access_key}"])

    def _show(self, name: str) -> dict[str, Any] | None:
        output = self._shell([f"s3.user.show -name {name}"], check=False)
        for line in output.splitlines():
            if line.startswith("{"):
                shown: dict[str, Any] = json.loads(line)
                return shown
        if "not found" in output:
            return None
        raise IdentityError(f"s3.user.show {name}: {_first_line(output)}")

    def _run(self, commands: list[str]) -> None:
        self._shell(commands, check=True)

    def _shell(self, commands: list[str], *, check: bool) -> str:
        done = subprocess.run(
            [
                str(self.admin.weed),
                "shell",
                f"-master={self.admin.master}",
                f"-filer={self.admin.filer}",
            ],
            input="\n".join(commands) + "\n",
            capture_output=True,
            text=True,
            timeout=_SHELL_TIMEOUT,
            check=False,
        )
        output = done.stdout + done.stderr
        failed = done.returncode != 0 or any(
            line.lower().startswith("error") for line in output.splitlines()
        )
        if check and failed:
            # The commands carry secret keys; the output names only the step that failed.
            raise IdentityError(f"weed shell failed: {_first_error(output)}")
        return output


def _first_line(output: str) -> str:
    return next((line for line in output.splitlines() if line.strip()), "no output")


def _first_error(output: str) -> str:
    return next(
        (line for line in output.splitlines() if line.lower().startswith("error")),
        _first_line(output),
    )
