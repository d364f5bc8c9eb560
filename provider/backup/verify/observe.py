"""What a control plane shows of what an archive promised: the I/O half of ``verify.checks``.

Type by type, a page at a time, keeping only what the archive names; then
its CRDs' and its packages' conditions.
"""

from __future__ import annotations

from provider.backup.source.export import api_resource
from provider.backup.verify import checks
from provider.kube import CRDS, Cluster, ListBounds, NotFoundError
from provider.managed import meta


async def observe(target: Cluster, expected: checks.Expected) -> checks.Observed:
    """What ``target`` shows of what ``expected`` names."""
    present: set[checks.Ref] = set()
    paused: dict[checks.Ref, bool] = {}
    packages: dict[checks.Ref, list[dict[str, object]]] = {}
    for rtype in expected.types.values():
        try:
            async for page in target.pages(api_resource(rtype), None, bounds=ListBounds()):
                for obj in page:
                    ref = checks.ref_of(rtype, obj)
                    if ref not in expected.objects:
                        continue
                    present.add(ref)
                    if ref in expected.paused:
                        paused[ref] = meta.is_paused(obj)
                    if ref in expected.packages:
                        packages[ref] = list((obj.get("status") or {}).get("conditions") or [])
        except NotFoundError:
            # The type is not served (its CRD is missing): none of its objects are there.
            continue
    crds = {}
    for name in expected.crds:
        crd = await target.get(CRDS, None, name)
        if crd is not None:
            crds[name] = list((crd.get("status") or {}).get("conditions") or [])
    return checks.Observed(frozenset(present), paused, crds, packages)
