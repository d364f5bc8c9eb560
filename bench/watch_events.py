"""Watch events that reach Crossplane core's composite controller, per kind and writer.

Core's circuit breaker (crossplane/crossplane ``internal/circuit``) charges a
composite one token for every watch event of the composite or of an object it
composes that its map function turns into a request for it; an update is mapped
twice (controller-runtime maps its old and its new object), so it costs two;
an object being deleted is let through uncharged. The bucket holds
``--circuit-breaker-burst`` tokens (100 by default) and refills at
``--circuit-breaker-refill-rate`` a second (1 by default).

This starts the sandbox platform once, watches every namespaced custom kind in
a team namespace, creates one ControlPlane (git source syncing every 10 s,
backups), and counts the events on the composite and on the objects labelled
``crossplane.io/composite`` with its name, from creation to Ready and then for a
steady-state window. Each update is tallied by its writer (the newest
``managedFields`` entry) and as a no-op when nothing but ``resourceVersion``,
``managedFields`` or ``generation`` changed. Finally it replays the events
through token buckets of the default and the shipped sizes, to show the lowest
level each reached.

    .venv/bin/python -m bench.watch_events [--steady 120]
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import watch

from sandbox.platform import Platform
from sandbox.spaces import wait_for
from tests.system.helpers import XR, app_files, controlplane

# What a write may change that makes it more than bookkeeping of the API server.
META_KEYS = ("labels", "annotations", "finalizers", "ownerReferences", "deletionTimestamp")
BOOKKEEPING = ("resourceVersion", "managedFields", "generation")
# The (burst, refill a second) pairs the events are replayed through.
BUCKETS = {"core's defaults": (100.0, 1.0), "shipped flags": (400.0, 12.0)}
READY_DEADLINE = 900.0


def changed_parts(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """What an update changed: top-level fields and the meaningful metadata; [] is a no-op."""
    parts: list[str] = []
    for key in sorted((set(old) | set(new)) - {"metadata", "apiVersion", "kind"}):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if key == "status" and isinstance(before, dict) and isinstance(after, dict):
            fields = set(before) | set(after)
            parts += [f"status.{f}" for f in sorted(fields) if before.get(f) != after.get(f)]
        else:
            parts.append(key)
    old_meta, new_meta = old.get("metadata", {}), new.get("metadata", {})
    for key in META_KEYS:
        before, after = old_meta.get(key), new_meta.get(key)
        if before == after:
            continue
        if key == "annotations" and old_meta:
            before, after = before or {}, after or {}
            keys = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
            parts += [f"metadata.annotations[{k}]" for k in keys]
        else:
            parts.append(f"metadata.{key}")
    return parts


def writer(obj: Mapping[str, Any]) -> str:
    """The manager of the newest managedFields entry (the last one on a tie)."""
    entries = obj.get("metadata", {}).get("managedFields") or []
    if not entries:
        return "unknown"
    newest = max(enumerate(entries), key=lambda item: (item[1].get("time") or "", item[0]))
    return str(newest[1].get("manager", "unknown"))


def lowest_level(charges: Iterable[tuple[float, int]], burst: float, refill: float) -> float:
    """The lowest level a bucket of ``burst`` refilled at ``refill``/s reaches, never opened."""
    level, lowest, last = burst, burst, None
    for at, tokens in sorted(charges):
        if last is not None:
            level = min(burst, level + (at - last) * refill)
        last = at
        level -= tokens
        lowest = min(lowest, level)
    return lowest


@dataclass(frozen=True)
class Event:
    at: float
    phase: str
    kind: str
    name: str
    type: str
    writer: str
    changed: tuple[str, ...]

    @property
    def tokens(self) -> int:
        """What core charges for it (an update maps its old and new object)."""
        return 2 if self.type == "MODIFIED" else 1

    @property
    def noop(self) -> bool:
        return self.type == "MODIFIED" and not self.changed


class Recorder:
    """Watches the namespace's custom kinds and keeps the composite's events."""

    def __init__(self, platform: Platform, namespace: str, composite: str) -> None:
        self.platform, self.namespace, self.composite = platform, namespace, composite
        self.phase = "create to Ready"
        self.events: list[Event] = []
        self.responsive: list[tuple[float, str, str]] = []
        self._last: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._watches: list[Any] = []  # the client's untyped watch.Watch

    def kinds(self) -> list[tuple[str, str, str, str]]:
        crds = self.platform.kube.extensions.list_custom_resource_definition().items
        return [
            (
                crd.spec.group,
                next(v.name for v in crd.spec.versions if v.storage),
                crd.spec.names.plural,
                crd.spec.names.kind,
            )
            for crd in crds
            if crd.spec.scope == "Namespaced"
        ]

    def start(self) -> None:
        for kind in self.kinds():
            thread = threading.Thread(target=self._watch, args=kind, daemon=True)
            thread.start()

    def stop(self) -> None:
        for each in self._watches:
            each.stop()

    def _watch(self, group: str, version: str, plural: str, kind: str) -> None:
        stream: Any = watch.Watch()  # type: ignore[no-untyped-call]
        self._watches.append(stream)
        with contextlib.suppress(Exception):  # the platform stopping ends every watch
            self._stream(stream, group, version, plural, kind)

    def _stream(self, stream: Any, group: str, version: str, plural: str, kind: str) -> None:
        custom = self.platform.kube.custom
        for item in stream.stream(
            custom.list_namespaced_custom_object,
            group,
            version,
            self.namespace,
            plural,
            timeout_seconds=0,
        ):
            self._record(kind, item["type"], item["object"])

    def _ours(self, kind: str, obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata", {})
        if kind == "ControlPlane" and obj.get("apiVersion", "").startswith("platform.acme.io/"):
            return bool(meta.get("name") == self.composite)
        return bool((meta.get("labels") or {}).get("crossplane.io/composite") == self.composite)

    def _record(self, kind: str, type_: str, obj: dict[str, Any]) -> None:
        if not self._ours(kind, obj):
            return
        meta = obj["metadata"]
        key = (kind, meta["name"])
        with self._lock:
            old = self._last.get(key, {})
            self._last[key] = obj
            changed = tuple(changed_parts(old, obj)) if type_ == "MODIFIED" else ()
            # Core lets an object being deleted through uncharged.
            if meta.get("deletionTimestamp"):
                return
            self.events.append(
                Event(time.monotonic(), self.phase, kind, meta["name"], type_, writer(obj), changed)
            )
            if kind == "ControlPlane":
                for condition in obj.get("status", {}).get("conditions", []):
                    if condition.get("type") == "Responsive":
                        seen = (condition.get("status", ""), condition.get("reason", ""))
                        if not self.responsive or self.responsive[-1][1:] != seen:
                            self.responsive.append((time.monotonic(), *seen))


def table(events: list[Event]) -> list[str]:
    """Per phase, kind and writer: events, tokens, no-op updates."""
    rows: Counter[tuple[str, str, str]] = Counter()
    tokens: Counter[tuple[str, str, str]] = Counter()
    noops: Counter[tuple[str, str, str]] = Counter()
    for event in events:
        key = (event.phase, event.kind, event.writer)
        rows[key] += 1
        tokens[key] += event.tokens
        noops[key] += event.noop
    lines = [
        "| phase | kind | writer | events | tokens | no-op updates |",
        "|---|---|---|---:|---:|---:|",
    ]
    for key in sorted(rows, key=lambda k: (k[0], -tokens[k])):
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {rows[key]} | {tokens[key]} | {noops[key]} |"
        )
    return lines


def changes(events: list[Event]) -> list[str]:
    """What the updates changed, per kind: the no-op ones are ``(nothing)``."""
    counted = Counter(
        (e.kind, ", ".join(e.changed) or "(nothing)") for e in events if e.type == "MODIFIED"
    )
    lines = ["| kind | changed | updates |", "|---|---|---:|"]
    lines += [f"| {kind} | {what} | {n} |" for (kind, what), n in counted.most_common()]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steady", type=float, default=120.0, help="seconds watched once Ready")
    args = parser.parse_args()
    namespace, name = "bench-watch", "ctp"
    with (
        tempfile.TemporaryDirectory(prefix="bench-watch-") as folder,
        Platform(Path(folder)) as platform,
    ):
        repository = platform.git.repository(namespace)
        repository.commit(app_files("bench"), "bench")
        platform.kube.namespace(namespace)
        recorder = Recorder(platform, namespace, name)
        recorder.start()
        time.sleep(2)  # the watches' first lists; there is nothing to wait on
        group, version, plural = XR
        created = time.monotonic()
        platform.kube.create(
            plural,
            controlplane(namespace, name, repository.url, backup={"schedule": "0 3 * * *"}),
            group,
            version,
        )

        def ready() -> bool:
            found = platform.kube.get(plural, namespace, name, group, version) or {}
            conditions = found.get("status", {}).get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        wait_for("the ControlPlane Ready", ready, timeout=READY_DEADLINE)
        to_ready = time.monotonic() - created
        recorder.phase = "steady state"
        steady_from = time.monotonic()
        time.sleep(args.steady)  # the steady-state window is a duration, not a condition
        recorder.stop()
        events = list(recorder.events)
        print(f"Ready after {to_ready:.0f} s; steady state watched for {args.steady:.0f} s\n")
        print("\n".join(table(events)))
        print()
        print("\n".join(changes(events)))
        print()
        for phase in ("create to Ready", "steady state"):
            of = [e for e in events if e.phase == phase]
            total = sum(e.tokens for e in of)
            noop = sum(e.tokens for e in of if e.noop)
            span = to_ready if phase == "create to Ready" else args.steady
            print(
                f"{phase}: {len(of)} events, {total} tokens ({total / span:.2f}/s), "
                f"{noop} of them no-op updates"
            )
        steady = [e for e in events if e.phase == "steady state"]
        rate = sum(e.tokens for e in steady) / args.steady if steady else 0.0
        print(f"steady-state rate {rate:.2f} tokens/s from {steady_from - created:.0f} s")
        charges = [(e.at, e.tokens) for e in events]
        for label, (burst, refill) in BUCKETS.items():
            low = lowest_level(charges, burst, refill)
            print(
                f"{label} (burst {burst:.0f}, refill {refill:g}/s): lowest level {low:.0f}"
                f"{' -> opens' if low < 0 else ''}"
            )
        print(
            f"Responsive as seen: {[(round(t - created), s, r) for t, s, r in recorder.responsive]}"
        )


if __name__ == "__main__":
    main()
