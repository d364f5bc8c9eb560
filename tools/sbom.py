"""A CycloneDX SBOM of an image, from its unpacked root filesystem.

Debian packages come from ``/var/lib/dpkg/status.d/`` (one control paragraph
per package, as in distroless images; ``tools/rootfs.py`` writes them), Python
distributions from the ``*.dist-info`` folders of the venv. The document's
time is ``SOURCE_DATE_EPOCH`` and its serial number is derived from the
image's digest, so the same image always gets the same SBOM.

    python3 -m tools.sbom ROOTFS NAME VERSION DIGEST > image.sbom.cdx.json
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import sys
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

STATUS_DIR = "var/lib/dpkg/status.d"
SITE_PACKAGES = "venv/lib/python3.11/site-packages"
DEBIAN_DISTRO = "debian-12"


@dataclass(frozen=True, order=True)
class Package:
    """One component: a Debian package or a Python distribution."""

    ecosystem: str  # "deb" or "pypi", as in a package URL
    name: str
    version: str
    license: str = ""
    architecture: str = ""

    @property
    def purl(self) -> str:
        """Its package URL (https://github.com/package-url/purl-spec)."""
        version = quote(self.version, safe="")
        if self.ecosystem == "deb":
            return (
                f"pkg:deb/debian/{self.name}@{version}"
                f"?arch={self.architecture}&distro={DEBIAN_DISTRO}"
            )
        return f"pkg:pypi/{self.name}@{version}"


def paragraph_fields(text: str) -> dict[str, str]:
    """The single-line fields of a Debian control paragraph (continuations skipped)."""
    found = {}
    for line in text.splitlines():
        if line and not line[0].isspace() and ":" in line:
            key, _, value = line.partition(":")
            found[key] = value.strip()
    return found


def debian_packages(status_dir: Path) -> list[Package]:
    """Every package recorded in a distroless-style ``status.d`` folder."""
    packages = []
    for path in sorted(status_dir.iterdir()):
        if path.suffix == ".md5sums":
            continue
        fields = paragraph_fields(path.read_text(encoding="utf-8"))
        packages.append(
            Package("deb", fields["Package"], fields["Version"], "", fields.get("Architecture", ""))
        )
    return packages


def normalized(name: str) -> str:
    """A distribution's name as PEP 503 and package URLs spell it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def python_distributions(site_packages: Path) -> list[Package]:
    """Every distribution installed in ``site_packages``, from its METADATA."""
    parser = email.parser.HeaderParser()
    packages = []
    for metadata in sorted(site_packages.glob("*.dist-info/METADATA")):
        headers = parser.parsestr(metadata.read_text(encoding="utf-8"))
        license_ = headers.get("License-Expression") or ""
        packages.append(
            Package("pypi", normalized(headers["Name"]), headers["Version"], license_.strip())
        )
    return packages


def component(package: Package) -> dict[str, Any]:
    """A CycloneDX component for ``package``."""
    found: dict[str, Any] = {
        "type": "library",
        "bom-ref": package.purl,
        "name": package.name,
        "version": package.version,
        "purl": package.purl,
    }
    if package.license:
        found["licenses"] = [{"expression": package.license}]
    return found


def cyclonedx(
    name: str, version: str, digest: str, packages: list[Package], created: datetime
) -> dict[str, Any]:
    """The CycloneDX 1.5 document of the image ``name:version`` with ``digest``."""
    algorithm, _, content = digest.partition(":")
    if algorithm != "sha256" or len(content) != 64:
        msg = f"the digest must be sha256:<64 hex digits>, got {digest!r}"
        raise ValueError(msg)
    image_ref = f"{name}@{digest}"
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, image_ref)}",
        "version": 1,
        "metadata": {
            "timestamp": created.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "tools/sbom.py"}]},
            "component": {
                "type": "container",
                "bom-ref": image_ref,
                "name": name,
                "version": version,
                "hashes": [{"alg": "SHA-256", "content": content}],
            },
        },
        "components": [component(p) for p in sorted(packages)],
    }


def main(argv: list[str]) -> None:
    """Print the SBOM of the image unpacked at ``argv[0]`` (see the module)."""
    rootfs, name, version, digest = argv
    root = Path(rootfs)
    packages = [
        *debian_packages(root / STATUS_DIR),
        *python_distributions(root / SITE_PACKAGES),
    ]
    created = datetime.fromtimestamp(int(os.environ.get("SOURCE_DATE_EPOCH", "0")), tz=UTC)
    json.dump(cyclonedx(name, version, digest, packages, created), sys.stdout, indent=2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
