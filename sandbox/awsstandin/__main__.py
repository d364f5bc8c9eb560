"""`python -m sandbox.awsstandin`: play provider-aws for the composed S3 and IAM kinds.

Credentials come from the environment (boto3's default chain): the S3 server's
admin key, which moto's IAM accepts as well.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from provider.runtime import logs
from sandbox.awsstandin.cloud import Endpoints
from sandbox.awsstandin.identities import SeaweedAdmin
from sandbox.awsstandin.standin import Settings, running

log = logging.getLogger("sandbox.awsstandin")


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sandbox.awsstandin", description=__doc__)
    parser.add_argument("--kubeconfig", required=True, help="the management cluster's kubeconfig")
    parser.add_argument("--s3-endpoint", required=True, help="the S3 server (SeaweedFS)")
    parser.add_argument("--iam-endpoint", required=True, help="IAM (moto's server)")
    parser.add_argument("--sts-endpoint", default="", help="STS (default: the IAM endpoint)")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--poll-interval", type=float, default=30.0, help="seconds")
    parser.add_argument(
        "--weed-master", default="", help="SeaweedFS master ip:port.grpcPort (for the STS bridge)"
    )
    parser.add_argument(
        "--weed-filer", default="", help="SeaweedFS filer ip:port.grpcPort (for the STS bridge)"
    )
    parser.add_argument(
        "--sts-port", type=int, default=0, help="the STS bridge's loopback port (0: any free one)"
    )
    parser.add_argument("--debug", action="store_true")
    return parser.parse_args(argv)


async def _serve(arguments: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    settings = Settings(
        Endpoints(
            s3=arguments.s3_endpoint,
            iam=arguments.iam_endpoint,
            sts=arguments.sts_endpoint,
            region=arguments.region,
        ),
        poll_interval=arguments.poll_interval,
        seaweed=(
            SeaweedAdmin(arguments.weed_master, arguments.weed_filer)
            if arguments.weed_master and arguments.weed_filer
            else None
        ),
        sts_port=arguments.sts_port,
    )
    async with running(arguments.kubeconfig, settings) as standin:
        sts = standin.sts_endpoint if standin.sts is not None else ""
        log.info("started", extra={"fields": {"sts_endpoint": sts}})
        await stop.wait()


def main(argv: list[str] | None = None) -> None:
    """Run until SIGTERM or SIGINT."""
    arguments = _arguments(argv)
    logs.setup(debug=arguments.debug)
    asyncio.run(_serve(arguments))


if __name__ == "__main__":
    main()
