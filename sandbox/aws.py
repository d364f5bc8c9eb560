"""The AWS side of the platform: SeaweedFS (S3), moto (IAM, STS) and the provider-aws stand-in.

The stand-in (`sandbox.awsstandin`) reconciles the composed S3 and IAM
managed resources into SeaweedFS and moto, as provider-aws-s3 and
provider-aws-iam (one stand-in each, as the identity of that package), and
serves an STS endpoint whose sessions SeaweedFS accepts. The compositions'
trust is the shipped `irsa`: the backup controller passes the web identity
token EKS would project for it (`sandbox.eks`) straight into the role the
function rendered, and the provider one it mints for that ServiceAccount;
neither has an AWS key of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

from sandbox.awsstandin.cloud import Endpoints
from sandbox.awsstandin.identities import SeaweedAdmin
from sandbox.awsstandin.kinds import KINDS
from sandbox.awsstandin.standin import AwsStandin, Settings, running_in_thread
from sandbox.s3 import Moto, SeaweedFS, credentials_environment, run_moto, run_seaweedfs

REGION = "us-east-1"
# The service whose stand-in serves STS (its sessions are of the IAM roles).
STS_SERVICE = "iam"
# The stand-in runs in this process with the provider's managed reconciler: their
# logs go to a file of the sandbox, as a process's output would.
_STANDIN_LOGGERS = ("provider", "sandbox.awsstandin")


@contextlib.contextmanager
def _logs_to(path: Path) -> Iterator[None]:
    """Send the stand-in's loggers to `path` only, and restore them on exit."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    loggers = [logging.getLogger(name) for name in _STANDIN_LOGGERS]
    saved = [logger.propagate for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.propagate = False
    try:
        yield
    finally:
        for logger, propagate in zip(loggers, saved, strict=True):
            logger.removeHandler(handler)
            logger.propagate = propagate
        handler.close()


@contextlib.contextmanager
def _environment(variables: Mapping[str, str]) -> Iterator[None]:
    """Set variables of this process for a moment (boto3 reads them when it makes clients)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Aws:
    """SeaweedFS, moto and the stand-in for one management cluster; a context manager.

    Entering it starts SeaweedFS and moto;
    `run_standin` then plays each member of the provider-aws family the
    package manager installed (`sandbox.provideraws`): its kinds, with the
    kubeconfig of that member's ServiceAccount.
    """

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._stack = contextlib.ExitStack()
        self.seaweed: SeaweedFS
        self.moto: Moto
        self.standins: dict[str, AwsStandin] = {}
        # The kubeconfig each service's stand-in runs with.
        self.kubeconfigs: dict[str, Path] = {}

    def __enter__(self) -> Aws:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # moto's server runs in this process: its request log would drown the sandbox's output.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        try:
            self._stack.enter_context(_logs_to(self.workdir / "aws-standin.log"))
            self.seaweed = self._stack.enter_context(run_seaweedfs(parent_dir=self.workdir))
            self.moto = self._stack.enter_context(run_moto())
        except BaseException:
            self._stack.close()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self._stack.close()

    def run_standin(self, kubeconfigs: Mapping[str, Path]) -> None:
        """Play provider-aws: the kinds of each service (`s3`, `iam`) as its member's kubeconfig.

        The IAM member serves the STS endpoint too: its sessions are of the
        roles it reconciles.
        """
        endpoints = Endpoints(s3=self.seaweed.endpoint, iam=self.moto.endpoint, region=REGION)
        seaweed = SeaweedAdmin(self.seaweed.master.address, self.seaweed.filer.address)
        admin = credentials_environment(self.seaweed.access_key, self.seaweed.secret_key)
        for service, kubeconfig in kubeconfigs.items():
            settings = Settings(
                endpoints,
                poll_interval=10.0,
                short_wait=0.5,
                seaweed=seaweed if service == STS_SERVICE else None,
            )
            kinds = [kind for kind in KINDS if kind.service == service]
            self.kubeconfigs[service] = kubeconfig
            with _environment(admin):
                self.standins[service] = self._stack.enter_context(
                    running_in_thread(kubeconfig, settings, kinds)
                )

    def endpoints_environment(self) -> dict[str, str]:
        """The region and the S3 and STS endpoints, for the backup controller and provider.

        On EKS the SDK finds AWS's own endpoints; here they are the sandbox's. No
        key, and no other source of one (a process from the venv inherits this
        one's environment): a pod's only way in is its IRSA token.
        """
        return {
            **credentials_environment("", ""),
            "AWS_SESSION_TOKEN": "",
            "AWS_REGION": REGION,
            "AWS_ENDPOINT_URL_S3": self.seaweed.endpoint,
            "AWS_ENDPOINT_URL_STS": self.standins[STS_SERVICE].sts_endpoint,
        }
