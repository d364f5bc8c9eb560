"""A real Prometheus on the platform: it scrapes every controller and evaluates the shipped rules.

Built by ``tools/build.sh prometheus`` from the module promtool comes from. It
loads ``deploy/monitoring/rules.yaml`` as an operator's plain Prometheus
does, scrapes each job's loopback ports with ``honor_labels`` (Flux's
``namespace`` label is the object's, docs/monitoring.md) and evaluates at the
sandbox's short interval, so an alert without ``for`` fires within seconds.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import yaml

from sandbox.apiserver import free_port
from sandbox.paths import REPO_ROOT, TOOLS_BIN
from sandbox.processes import Process

SHIPPED_RULES = REPO_ROOT / "deploy" / "monitoring" / "rules.yaml"
_LOOPBACK = "127.0.0.1"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True, order=True)
class Alert:
    """A firing alert: its name and the object its labels name."""

    name: str
    namespace: str
    object_name: str

    def __str__(self) -> str:
        where = "/".join(part for part in (self.namespace, self.object_name) if part)
        return f"{self.name} ({where})" if where else self.name


@dataclass
class Prometheus:
    """Prometheus scraping ``targets`` (job name -> loopback ports) on ``rules``."""

    workdir: Path
    targets: Mapping[str, Sequence[int]]
    rules: Path = SHIPPED_RULES
    interval: str = "5s"
    port: int = field(default_factory=free_port)
    process: Process | None = None

    @property
    def url(self) -> str:
        """Where its web UI and API answer."""
        return f"http://{_LOOPBACK}:{self.port}"

    def start(self) -> None:
        """Start it; wait until it is ready (its rules loaded)."""
        binary = TOOLS_BIN / "prometheus"
        if not binary.is_file():
            raise FileNotFoundError(f"{binary} is missing: run tools/build.sh prometheus")
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self._config(), sort_keys=False))
        self.process = Process(
            "prometheus",
            [
                str(binary),
                f"--config.file={config}",
                f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address={_LOOPBACK}:{self.port}",
            ],
            self.workdir / "prometheus.log",
        )
        self.process.start(self._ready, timeout=60)

    def stop(self) -> None:
        """Stop it."""
        if self.process is not None:
            self.process.stop()

    def firing(self) -> list[Alert]:
        """The alerts firing now, sorted."""
        found = self.api("/api/v1/alerts")["alerts"]
        return sorted(
            Alert(
                str(a["labels"]["alertname"]),
                str(a["labels"].get("namespace", "")),
                str(a["labels"].get("name", "")),
            )
            for a in found
            if a.get("state") == "firing"
        )

    def value(self, expr: str) -> float | None:
        """The value of an instant query that selects one series, None when it selects none."""
        result = self.api("/api/v1/query?" + urlencode({"query": expr}))["result"]
        if len(result) > 1:
            raise ValueError(f"{expr} selects {len(result)} series, not one")
        return float(result[0]["value"][1]) if result else None

    def rule_names(self) -> set[str]:
        """The names of the alerting rules it loaded."""
        groups = self.api("/api/v1/rules")["groups"]
        return {rule["name"] for group in groups for rule in group["rules"]}

    def api(self, path: str) -> Any:
        """The ``data`` of an answer of its HTTP API."""
        with _NO_PROXY.open(self.url + path, timeout=5) as answer:
            return json.load(answer)["data"]

    def _config(self) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
            "rule_files": [str(self.rules)],
            "scrape_configs": [
                {
                    "job_name": job,
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"{_LOOPBACK}:{port}" for port in ports]}],
                }
                for job, ports in self.targets.items()
            ],
        }

    def _ready(self) -> bool:
        try:
            with _NO_PROXY.open(f"{self.url}/-/ready", timeout=1) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False
