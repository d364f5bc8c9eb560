"""The archive writer alone: a baseline commit beside this tree, time and peak RSS per size.

No servers: each run writes ``N`` ConfigMaps (400 random bytes each, so the
compressed archive grows with them) into a sink that drops the bytes, as if
they went on to S3, in a process of its own so its peak RSS (VmHWM) is its
own. What differs between the trees is what the writer holds until it writes
``export.yaml``: before, a map of every file's path and sha256; now, a
``FileList`` (a scratch SQLite database).

    .venv/bin/python -m bench.archive_writer [--sizes 10000 100000] [--baseline COMMIT]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.restore_scale import checkout

ROOT = Path(__file__).resolve().parent.parent
# main before the writer's file list moved to a FileList.
BASELINE = "f386c58"

# Run with the tree's code first on sys.path; prints one JSON line.
WRITE = """
import json, random, sys, time
from datetime import UTC, datetime
from pathlib import Path
from provider.backup.format.archive import ArchiveWriter, ResourceType

class Discard:
    def write(self, data):
        return len(data)

configmaps = ResourceType("configmaps", "", "v1", "ConfigMap", namespaced=True)
count = int(sys.argv[1])
start = time.perf_counter()
writer = ArchiveWriter(Discard())
for index in range(count):
    token = random.Random(index).randbytes(400).hex()
    writer.add(configmaps, {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": f"settings-{index}", "namespace": f"app-{index % 10}"},
        "data": {"token": token},
    })
summary = writer.finish(instance="bench", exported_at=datetime.now(UTC), options={})
seconds = time.perf_counter() - start
status = Path("/proc/self/status").read_text().splitlines()
peak = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024
print(json.dumps({"seconds": seconds, "objects": summary.objects, "peak_rss_mib": peak}))
"""


def write(tree: Path, count: int) -> dict[str, float]:
    """One archive of ``count`` objects written with ``tree``'s code, in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", WRITE, str(count)],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--baseline", default=BASELINE)
    args = parser.parse_args()
    print("| code | objects | seconds | us/object | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="writer-baseline-") as folder:
        trees = {
            f"baseline {args.baseline}": checkout(args.baseline, Path(folder)),
            "this tree": ROOT,
        }
        for size in sorted(args.sizes):
            for label, tree in trees.items():
                run = write(tree, size)
                print(
                    f"| {label} | {int(run['objects']):,} | {run['seconds']:.1f} "
                    f"| {run['seconds'] / size * 1e6:.0f} | {run['peak_rss_mib']:.1f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
