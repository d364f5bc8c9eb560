"""The provider at scale: N Instances against a simulated Space, on real API servers.

Measures the time until every Instance is Ready, the API requests per
Instance per poll interval in steady state (reads and writes; an unchanged
Instance must cause no writes), and the provider's peak RSS.

    .venv/bin/python -m bench.provider_scale [--instances 500] [--poll-interval 20]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sandbox.apiserver import APIServerFactory, run_etcd
from sandbox.spaces import (
    Kube,
    SpacesSimulator,
    condition,
    provider,
    wait_for,
)
from tests.provider.conftest import connect_to_space
from tests.provider.test_instance import instance

NAMESPACE = "bench"
WRITE_VERBS = ("post", "put", "patch", "delete")
_SAMPLE = re.compile(
    r'^controlplane_provider_api_requests_total\{resource="([^"]+)",verb="([^"]+)"\} (\S+)$'
)


def requests(metrics: str) -> dict[tuple[str, str], float]:
    """API request counters by (verb, resource) from a /metrics page."""
    found = {}
    for line in metrics.splitlines():
        match = _SAMPLE.match(line)
        if match:
            found[(match.group(2), match.group(1))] = float(match.group(3))
    return found


def peak_rss_mib(pid: int) -> float:
    """VmHWM, the process's peak resident set, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--poll-interval", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=10)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="provider-bench-"))
    with run_etcd() as etcd, APIServerFactory(etcd) as factory:
        local = Kube(factory(name="local"))
        space = Kube(factory(name="space"))
        hosted = factory(name="hosted")
        connect_to_space(local, space)
        local.namespace(NAMESPACE)
        with (
            SpacesSimulator(space, hosted),
            provider(
                local.server.kubeconfig_path,
                work / "provider.log",
                "--poll-interval",
                str(args.poll_interval),
                "--concurrency",
                str(args.concurrency),
            ) as process,
        ):
            wait_for("the provider's metrics", lambda: _quiet(process.metrics))
            start = time.monotonic()
            bodies = [instance(NAMESPACE, f"ctp-{i:04d}") for i in range(args.instances)]
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda body: local.create("instances", body), bodies))
            created = time.monotonic() - start

            def all_ready() -> bool:
                items = local.custom.list_namespaced_custom_object(
                    "controlplane.spaces.upbound.io", "v1alpha1", NAMESPACE, "instances"
                )["items"]
                done = sum(condition(i, "Ready").get("status") == "True" for i in items)
                return bool(done == args.instances)

            wait_for("every Instance Ready", all_ready, timeout=1800)
            ready_after = time.monotonic() - start
            # Let the last creations settle into their poll rhythm, then count
            # requests over whole poll intervals.
            time.sleep(args.poll_interval * 1.5)
            before = requests(process.metrics())
            window = args.poll_interval * 3
            time.sleep(window)
            after = requests(process.metrics())
            rss = peak_rss_mib(process.process.pid) if process.process else float("nan")
    delta = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    polls = window / args.poll_interval
    per = {key: value / args.instances / polls for key, value in delta.items() if value}
    reads = sum(v for (verb, _), v in per.items() if verb not in WRITE_VERBS)
    writes = sum(v for (verb, _), v in per.items() if verb in WRITE_VERBS)
    print(
        f"provider, {args.instances} Instances, poll interval {args.poll_interval:.0f}s, "
        f"concurrency {args.concurrency}"
    )
    print(f"{'created in':<44}{created:>10.1f} s")
    print(f"{'all Ready after':<44}{ready_after:>10.1f} s")
    print(f"{'steady state: reads per Instance per poll':<44}{reads:>10.2f}")
    print(f"{'steady state: writes per Instance per poll':<44}{writes:>10.2f}")
    for (verb, resource), value in sorted(per.items()):
        print(f"  {verb:<8}{resource:<34}{value:>10.2f}")
    print(f"{'provider peak RSS':<44}{rss:>10.1f} MiB")


def _quiet(read: object) -> bool:
    with contextlib.suppress(OSError):
        return bool(read())  # type: ignore[operator]
    return False


if __name__ == "__main__":
    main()
