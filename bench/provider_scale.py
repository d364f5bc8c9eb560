"""The provider at scale: N Instances against a simulated Space, on real API servers.

Measures the time until every Instance is Ready after all are applied at
once (``--clients`` concurrent clients create them, as a composition engine
would; the time to create them is shown too), the API requests per Instance
on the way to Ready and per poll interval in steady state (reads and writes;
an unchanged Instance must cause no writes), the time until every Instance is
gone after all are deleted at once, the CPU each process used in each phase,
and the provider's resident memory (steady and peak).

Requests are counted twice over each phase: by the provider itself
(``controlplane_provider_api_requests_total``, by verb and resource) and by
both API servers (``apiserver_request_total`` of the local cluster and the
Space, every verb but WATCH; this includes the servers' own background
requests, such as their identity leases, and the simulator's and the
bench's). The Spaces simulator watches and sends nothing while nothing
changes; the bench follows the Instances with one watch rather than lists.

    .venv/bin/python -m bench.provider_scale [--instances 500] [--poll-interval 20]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import resource
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from sandbox.apiserver import APIServer, APIServerFactory, Etcd, run_etcd
from sandbox.spaces import (
    GROUP,
    VERSION,
    Kube,
    ProviderProcess,
    SpacesSimulator,
    condition,
    provider,
    wait_for,
)
from tests.provider.conftest import connect_to_space
from tests.provider.test_instance import instance

NAMESPACE = "bench"
WRITE_VERBS = ("post", "put", "patch", "delete")
_SAMPLE = re.compile(r"^controlplane_provider_api_requests_total\{([^}]*)\} (\S+)$")
_SERVER_SAMPLE = re.compile(r"^apiserver_request_total\{([^}]*)\} (\S+)$", re.MULTILINE)
_SERVER_CPU = re.compile(r"^process_cpu_seconds_total (\S+)$", re.MULTILINE)


def requests(metrics: str) -> dict[tuple[str, str], float]:
    """API request counters by (verb, resource), every status code summed, from a /metrics page."""
    found: dict[tuple[str, str], float] = {}
    for line in metrics.splitlines():
        match = _SAMPLE.match(line)
        if match:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1)))
            key = (labels["verb"], labels["resource"])
            found[key] = found.get(key, 0.0) + float(match.group(2))
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


def server_cpu_seconds(server: APIServer) -> float:
    """CPU seconds an API server process has used (``process_cpu_seconds_total``)."""
    status, body = server.get("/metrics")
    if status != 200:
        msg = f"{server.name} /metrics answered {status}"
        raise RuntimeError(msg)
    match = _SERVER_CPU.search(body)
    return float(match.group(1)) if match else float("nan")


def etcd_cpu_seconds(etcd: Etcd) -> float:
    """CPU seconds etcd has used (``process_cpu_seconds_total`` of its /metrics)."""
    with urllib.request.urlopen(f"{etcd.url}/metrics", timeout=10) as response:
        match = _SERVER_CPU.search(response.read().decode())
    return float(match.group(1)) if match else float("nan")


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc/<pid>/stat."""
    # The fields after the command name, which is in parentheses and may hold spaces.
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int, field: str) -> float:
    """A memory figure of /proc/<pid>/status (VmHWM: peak resident set; VmRSS: now), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Tally:
    """Which Instances of a namespace exist and which are Ready, kept by a watch.

    A watch rather than a list every few seconds: listing 5,000 Instances costs
    the API server (and this process, which shares the machine) far more than
    their changes do, and a watch sees the last one turn Ready when it does.
    """

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.ready: set[str] = set()
        self.present: set[str] = set()
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tally", daemon=True)

    def __enter__(self) -> Tally:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def until(self, what: str, done: Callable[[], bool], timeout: float) -> None:
        """Wait until ``done`` holds (it reads ``ready`` and ``present``), or fail."""
        with self.changed:
            if not self.changed.wait_for(done, timeout):
                msg = f"timed out after {timeout:.0f}s waiting for {what}"
                raise AssertionError(msg)

    def _watch(self) -> None:
        """List, then watch from the list's version; list again after any failure."""
        while not self._stop.is_set():
            try:
                found = self.kube.custom.list_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, "instances"
                )
                with self.changed:
                    self.present.clear()
                    self.ready.clear()
                    for item in found["items"]:
                        self._saw("ADDED", item)
                version = found["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    stream = watch.Watch().stream(  # type: ignore[no-untyped-call]
                        self.kube.custom.list_namespaced_custom_object,
                        GROUP,
                        VERSION,
                        self.namespace,
                        "instances",
                        resource_version=version,
                        allow_watch_bookmarks=True,
                        timeout_seconds=5,
                    )
                    for event in stream:
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            with self.changed:
                                self._saw(event["type"], event["object"])
            except (ApiException, OSError, ValueError, urllib3.exceptions.HTTPError):
                self._stop.wait(1.0)

    def _saw(self, event_type: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.present.discard(name)
        self.ready.discard(name)
        if event_type != "DELETED":
            self.present.add(name)
            if condition(obj, "Ready").get("status") == "True":
                self.ready.add(name)
        self.changed.notify_all()


@dataclass(frozen=True)
class Sample:
    """What the processes had done at one moment: requests and CPU seconds."""

    provider: dict[tuple[str, str], float]
    served: float
    provider_cpu: float
    local_cpu: float
    space_cpu: float
    etcd_cpu: float
    # This process: the clients creating and deleting, the Spaces simulator, the watch.
    bench_cpu: float

    @classmethod
    def take(
        cls, process: ProviderProcess, pid: int, local: Kube, space: Kube, etcd: Etcd
    ) -> Sample:
        """Read the counters now."""
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(
            provider=requests(process.metrics()),
            served=server_requests(local.server) + server_requests(space.server),
            provider_cpu=cpu_seconds(pid),
            local_cpu=server_cpu_seconds(local.server),
            space_cpu=server_cpu_seconds(space.server),
            etcd_cpu=etcd_cpu_seconds(etcd),
            bench_cpu=usage.ru_utime + usage.ru_stime,
        )


def per_instance(
    before: Sample, after: Sample, instances: int, polls: float = 1.0
) -> dict[tuple[str, str], float]:
    """The provider's requests between two samples per Instance (and per poll), by kind."""
    delta = {key: value - before.provider.get(key, 0) for key, value in after.provider.items()}
    return {key: value / instances / polls for key, value in delta.items() if value}


def print_phase(
    phase: str, what: str, before: Sample, after: Sample, instances: int, polls: float = 1.0
) -> None:
    """One phase between two samples: the requests per Instance (and per poll), then the CPU."""
    served = (after.served - before.served) / instances / polls
    print_requests(f"{phase}: {what}", per_instance(before, after, instances, polls), served)
    print_cpu(f"{phase}:", before, after)


def print_requests(title: str, per: dict[tuple[str, str], float], served: float) -> None:
    """The provider's requests by verb and resource, their total, and the servers' count."""
    reads = sum(v for (verb, _), v in per.items() if verb.lower() not in WRITE_VERBS)
    writes = sum(v for (verb, _), v in per.items() if verb.lower() in WRITE_VERBS)
    print(f"{title:<56}{reads + writes:>10.3f}")
    print(f"{'  of which writes':<56}{writes:>10.3f}")
    for (verb, kind), value in sorted(per.items()):
        print(f"    {verb:<8}{kind:<44}{value:>10.3f}")
    print(f"{'  served by both API servers (but WATCH)':<56}{served:>10.3f}")


def print_cpu(title: str, before: Sample, after: Sample) -> None:
    """CPU seconds used between two samples by the provider and each API server."""
    used = (
        f"provider {after.provider_cpu - before.provider_cpu:.1f}, "
        f"local API server {after.local_cpu - before.local_cpu:.1f}, "
        f"Space API server {after.space_cpu - before.space_cpu:.1f}, "
        f"etcd {after.etcd_cpu - before.etcd_cpu:.1f}, "
        f"bench and simulator {after.bench_cpu - before.bench_cpu:.1f}"
    )
    print(f"{title} CPU s: {used}")


def at_once(
    server: APIServer,
    action: Callable[[Kube, dict[str, Any]], object],
    bodies: list[dict[str, Any]],
    clients: int,
) -> float:
    """Apply ``action`` to every Instance from ``clients`` concurrent clients, as a busy
    composition engine would; seconds until the last answer."""
    local = threading.local()
    start = time.monotonic()

    def act(body: dict[str, Any]) -> None:
        # A client per thread: the shared one's pool keeps 5 connections per core.
        if not hasattr(local, "kube"):
            local.kube = Kube(server)
        action(local.kube, body)

    with ThreadPoolExecutor(max_workers=clients) as pool:
        list(pool.map(act, bodies))
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=500)
    parser.add_argument("--poll-interval", type=float, default=20.0)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--polls", type=int, default=3, help="poll intervals in the window")
    parser.add_argument("--deadline", type=float, default=1800.0, help="seconds per phase")
    parser.add_argument(
        "--clients", type=int, default=16, help="concurrent clients creating and deleting"
    )
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
            Tally(local, NAMESPACE) as tally,
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
            bodies = [instance(NAMESPACE, f"ctp-{i:04d}") for i in range(args.instances)]
            idle = Sample.take(process, pid, local, space, etcd)
            start = time.monotonic()
            created = at_once(
                local.server,
                lambda kube, body: kube.create("instances", body),
                bodies,
                args.clients,
            )
            tally.until(
                "every Instance Ready", lambda: len(tally.ready) == args.instances, args.deadline
            )
            ready_after = time.monotonic() - start
            ready = Sample.take(process, pid, local, space, etcd)
            # Let the last creations settle into their poll rhythm, then count
            # requests over whole poll intervals.
            time.sleep(args.poll_interval * 1.5)
            before = Sample.take(process, pid, local, space, etcd)
            window = args.poll_interval * args.polls
            time.sleep(window)
            after = Sample.take(process, pid, local, space, etcd)
            steady_rss = memory_mib(pid, "VmRSS")
            start = time.monotonic()
            deleted = at_once(
                local.server,
                lambda kube, body: kube.delete("instances", NAMESPACE, body["metadata"]["name"]),
                bodies,
                args.clients,
            )
            tally.until("every Instance gone", lambda: not tally.present, args.deadline)
            gone_after = time.monotonic() - start
            gone = Sample.take(process, pid, local, space, etcd)
            peak_rss = memory_mib(pid, "VmHWM")
    polls = window / args.poll_interval
    print(
        f"provider, {args.instances} Instances, poll interval {args.poll_interval:.0f}s, "
        f"concurrency {args.concurrency}, {args.clients} clients creating"
    )
    print(f"{'all created after':<56}{created:>10.1f} s")
    print(f"{'all Ready after (from the first create)':<56}{ready_after:>10.1f} s")
    print_phase("to Ready", "requests per Instance", idle, ready, args.instances)
    print_phase(
        "steady state", "requests per Instance per poll", before, after, args.instances, polls
    )
    print(f"{'all deleted after':<56}{deleted:>10.1f} s")
    print(f"{'all gone after (from the first delete)':<56}{gone_after:>10.1f} s")
    print_phase("to gone", "requests per Instance", after, gone, args.instances)
    print(f"{'provider RSS in steady state':<56}{steady_rss:>10.1f} MiB")
    print(f"{'provider peak RSS':<56}{peak_rss:>10.1f} MiB")
    print(f"{'load average (1, 5, 15 min) at the end':<56}{os.getloadavg()}")


def _quiet(read: object) -> bool:
    with contextlib.suppress(OSError):
        return bool(read())  # type: ignore[operator]
    return False


if __name__ == "__main__":
    main()
