"""The provider at scale: N Instances against a simulated Space, on real API servers.

Measures the time until every Instance is Ready after all are applied at
once, the API requests per Instance per poll interval in steady state (reads
and writes; an unchanged Instance must cause no writes), the time until every
Instance is gone after all are deleted at once, and the provider's resident
memory (steady and peak).

Requests are counted twice over the same steady window: by the provider
itself (``controlplane_provider_api_requests_total``, by verb and resource)
and by both API servers (``apiserver_request_total`` of the local cluster and
the Space, every verb but WATCH; this includes the servers' own background
requests, such as their identity leases, so it is an upper bound). The Spaces
simulator watches and sends nothing while nothing changes.

    .venv/bin/python -m bench.provider_scale [--instances 500] [--poll-interval 20]
"""

from __future__ import annotations

import argparse
import contextlib
import re
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sandbox.apiserver import APIServer, APIServerFactory, run_etcd
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
_SERVER_SAMPLE = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.MULTILINE)
# Seconds between probes per Instance: listing 5,000 every few seconds would load the API server.
PROBE_SECONDS_PER_INSTANCE = 0.002


def requests(metrics: str) -> dict[tuple[str, str], float]:
    """API request counters by (verb, resource) from a /metrics page."""
    found = {}
    for line in metrics.splitlines():
        match = _SAMPLE.match(line)
        if match:
            found[(match.group(2), match.group(1))] = float(match.group(3))
    return found


def server_requests(server: APIServer) -> float:
    """Requests an API server has served, every verb but WATCH (``apiserver_request_total``)."""
    status, body = server.get("/metrics")
    if status != 200:
        msg = f"{server.name} /metrics answered {status}"
        raise RuntimeError(msg)
    found = 0.0
    for labels, value in _SERVER_SAMPLE.findall(body):
        if 'verb="WATCH"' not in labels:
            found += float(value)
    return found


def memory_mib(pid: int, field: str) -> float:
    """A memory figure of /proc/<pid>/status (VmHWM: peak resident set; VmRSS: now), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def until(what: str, probe: Callable[[], bool], timeout: float, every: float) -> float:
    """Seconds until ``probe`` holds, probing every ``every`` seconds."""
    start = time.monotonic()
    while not probe():
        if time.monotonic() - start > timeout:
            msg = f"timed out after {timeout:.0f}s waiting for {what}"
            raise AssertionError(msg)
        time.sleep(every)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--poll-interval", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--polls", type=int, default=3, help="poll intervals in the window")
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds per phase")
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
            pid = process.process.pid if process.process else 0
            start = time.monotonic()
            bodies = [instance(NAMESPACE, f"ctp-{i:04d}") for i in range(args.instances)]
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(lambda body: local.create("instances", body), bodies))
            created = time.monotonic() - start

            def instances() -> list[dict[str, Any]]:
                return list(
                    local.custom.list_namespaced_custom_object(
                        "controlplane.spaces.upbound.io", "v1alpha1", NAMESPACE, "instances"
                    )["items"]
                )

            def all_ready() -> bool:
                done = sum(condition(i, "Ready").get("status") == "True" for i in instances())
                return bool(done == args.instances)

            every = max(2.0, PROBE_SECONDS_PER_INSTANCE * args.instances)
            until("every Instance Ready", all_ready, args.deadline, every)
            ready_after = time.monotonic() - start
            # Let the last creations settle into their poll rhythm, then count
            # requests over whole poll intervals.
            time.sleep(args.poll_interval * 1.5)
            before = requests(process.metrics())
            servers_before = server_requests(local.server) + server_requests(space.server)
            window = args.poll_interval * args.polls
            time.sleep(window)
            after = requests(process.metrics())
            servers_after = server_requests(local.server) + server_requests(space.server)
            steady_rss = memory_mib(pid, "VmRSS")
            start = time.monotonic()
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(
                    pool.map(
                        lambda body: local.delete("instances", NAMESPACE, body["metadata"]["name"]),
                        bodies,
                    )
                )
            until("every Instance gone", lambda: not instances(), args.deadline, every)
            gone_after = time.monotonic() - start
            peak_rss = memory_mib(pid, "VmHWM")
    delta = {key: after.get(key, 0) - before.get(key, 0) for key in after}
    polls = window / args.poll_interval
    per = {key: value / args.instances / polls for key, value in delta.items() if value}
    reads = sum(v for (verb, _), v in per.items() if verb.lower() not in WRITE_VERBS)
    writes = sum(v for (verb, _), v in per.items() if verb.lower() in WRITE_VERBS)
    served = (servers_after - servers_before) / args.instances / polls
    print(
        f"provider, {args.instances} Instances, poll interval {args.poll_interval:.0f}s, "
        f"concurrency {args.concurrency}"
    )
    print(f"{'created in':<52}{created:>10.1f} s")
    print(f"{'all Ready after':<52}{ready_after:>10.1f} s")
    print(f"{'steady state: requests per Instance per poll':<52}{reads + writes:>10.3f}")
    print(f"{'  of which writes':<52}{writes:>10.3f}")
    for (verb, resource), value in sorted(per.items()):
        print(f"    {verb:<8}{resource:<40}{value:>10.3f}")
    print(f"{'  served by both API servers (but WATCH)':<52}{served:>10.3f}")
    print(f"{'all gone after deleted at once':<52}{gone_after:>10.1f} s")
    print(f"{'provider RSS in steady state':<52}{steady_rss:>10.1f} MiB")
    print(f"{'provider peak RSS':<52}{peak_rss:>10.1f} MiB")


def _quiet(read: object) -> bool:
    with contextlib.suppress(OSError):
        return bool(read())  # type: ignore[operator]
    return False


if __name__ == "__main__":
    main()
