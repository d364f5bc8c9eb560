"""What the provider's watch-fed caches cost per object, three ways of keeping them.

For each kind the provider caches, a representative object (shaped as the API
server serves it: managedFields of three managers, the provider's annotations,
finalizer and status; a kubeconfig with inline certificates) is kept N times
and measured with tracemalloc:

- as served: the decoded dict, managedFields and all;
- transformed: the dict after the cache's transform;
- transformed, as JSON: what ``provider.cache.Informer`` keeps (compact bytes).

    .venv/bin/python -m bench.cache_memory [--objects 5000]
"""

from __future__ import annotations

import argparse
import base64
import copy
import json
import os
import tracemalloc
from collections.abc import Callable
from functools import partial
from typing import Any

from provider.cache import without_managed_fields
from provider.spaces.backend import cached_space_secret

JsonObject = dict[str, Any]


def _managed_fields(*managers: str) -> list[JsonObject]:
    """managedFields as an API server records them for a few writers."""
    return [
        {
            "manager": manager,
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-12-03T09:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:annotations": {f"f:{k}": {} for k in "abcde"}},
                "f:spec": {f"f:{k}": {"f:value": {}} for k in ("forProvider", "class", "ref")},
                "f:status": {"f:conditions": {'k:{"type":"Ready"}': {".": {}, "f:status": {}}}},
            },
        }
        for manager in managers
    ]


def _metadata(name: str, namespace: str) -> JsonObject:
    return {
        "name": name,
        "namespace": namespace,
        "uid": "0b5e6c1e-8a44-4c39-9f0e-6b7f4f4c2d11",
        "resourceVersion": "123456",
        "generation": 2,
        "creationTimestamp": "2026-12-03T09:00:00Z",
        "managedFields": _managed_fields("kubectl", "controlplane-provider", "crossplane"),
    }


def instance() -> JsonObject:
    """An Instance after the provider made its ControlPlane."""
    metadata = _metadata("ctp-0001", "team-a")
    metadata["annotations"] = {
        "crossplane.io/external-name": "team-a-ctp-0001-1a2b3c4d",
        "crossplane.io/external-create-pending": "2026-12-03T09:00:01Z",
        "crossplane.io/external-create-succeeded": "2026-12-03T09:00:01Z",
    }
    metadata["finalizers"] = ["finalizer.managedresource.crossplane.io"]
    condition = {
        "status": "True",
        "lastTransitionTime": "2026-12-03T09:00:05Z",
        "observedGeneration": 2,
    }
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "Instance",
        "metadata": metadata,
        "spec": {
            "forProvider": {
                "crossplane": {"version": "2.1.4-up.2", "autoUpgrade": {"channel": "Stable"}}
            },
            "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"},
            "writeConnectionSecretToRef": {"name": "ctp-0001-kubeconfig"},
            "managementPolicies": ["*"],
        },
        "status": {
            "atProvider": {"id": "ctp-0b5e6c1e", "crossplaneVersion": "2.1.4-up.2"},
            "conditions": [
                {**condition, "type": "Ready", "reason": "Available", "observedGeneration": 2},
                {
                    **condition,
                    "type": "Synced",
                    "reason": "ReconcileSuccess",
                    "observedGeneration": 2,
                },
            ],
        },
    }


def _kubeconfig() -> str:
    """A kubeconfig with an inline CA, client certificate and key (sizes of EC P-256 PEMs)."""

    def pem(size: int) -> str:
        return base64.b64encode(os.urandom(size)).decode()

    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "ctp",
                    "cluster": {
                        "server": "https://127.0.0.1:6443",
                        "certificate-authority-data": pem(720),
                    },
                }
            ],
            "users": [
                {
                    "name": "ctp",
                    "user": {"client-certificate-data": pem(680), "client-key-data": pem(320)},
                }
            ],
            "contexts": [{"name": "ctp", "context": {"cluster": "ctp", "user": "ctp"}}],
            "current-context": "ctp",
        }
    )


def connection_secret() -> JsonObject:
    """An Instance's connection secret, written by the provider."""
    metadata = _metadata("ctp-0001-kubeconfig", "team-a")
    metadata["labels"] = {"controlplane.spaces.upbound.io/connection-secret": "true"}
    metadata["ownerReferences"] = [
        {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Instance",
            "name": "ctp-0001",
            "uid": "0b5e6c1e-8a44-4c39-9f0e-6b7f4f4c2d11",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    kubeconfig = base64.b64encode(_kubeconfig().encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "connection.crossplane.io/v1alpha1",
        "data": {"kubeconfig": kubeconfig},
    }


def space_secret() -> JsonObject:
    """A ControlPlane's connection secret in the Space."""
    secret = connection_secret()
    secret["metadata"]["name"] = "kubeconfig-team-a-ctp-0001-1a2b3c4d"
    secret["data"]["token"] = base64.b64encode(os.urandom(600)).decode()
    return secret


def control_plane() -> JsonObject:
    """A Ready ControlPlane the provider made."""
    metadata = _metadata("team-a-ctp-0001-1a2b3c4d", "default")
    metadata["annotations"] = {
        "controlplane.spaces.upbound.io/instance-namespace": "team-a",
        "controlplane.spaces.upbound.io/instance-name": "ctp-0001",
    }
    metadata["labels"] = {"controlplane.spaces.upbound.io/instance-uid": metadata["uid"]}
    condition = {"status": "True", "lastTransitionTime": "2026-12-03T09:00:05Z"}
    return {
        "apiVersion": "spaces.upbound.io/v1beta1",
        "kind": "ControlPlane",
        "metadata": metadata,
        "spec": {
            "crossplane": {"version": "2.1.4-up.2", "autoUpgrade": {"channel": "Stable"}},
            "writeConnectionSecretToRef": {
                "name": "kubeconfig-team-a-ctp-0001-1a2b3c4d",
                "namespace": "default",
            },
        },
        "status": {
            "controlPlaneID": "ctp-0b5e6c1e",
            "conditions": [
                {**condition, "type": "Ready", "reason": "Available"},
                {**condition, "type": "Healthy", "reason": "HealthyPackageRevision"},
            ],
        },
    }


def usage() -> JsonObject:
    """A ClusterProviderConfigUsage of one Instance."""
    metadata = _metadata("0b5e6c1e-8a44-4c39-9f0e-6b7f4f4c2d11", "")
    del metadata["namespace"]
    metadata["labels"] = {"crossplane.io/provider-config": "default"}
    return {
        "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
        "kind": "ClusterProviderConfigUsage",
        "metadata": metadata,
        "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "default"},
        "resourceRef": {
            "apiVersion": "controlplane.spaces.upbound.io/v1alpha1",
            "kind": "Instance",
            "name": "ctp-0001",
            "namespace": "team-a",
        },
    }


KINDS: list[tuple[str, Callable[[], JsonObject], Callable[[JsonObject], JsonObject | None]]] = [
    ("Instance", instance, without_managed_fields),
    ("usage", usage, without_managed_fields),
    ("Instance connection Secret", connection_secret, without_managed_fields),
    ("ControlPlane (Space)", control_plane, without_managed_fields),
    ("ControlPlane Secret (Space)", space_secret, cached_space_secret),
]


def copies(text: str, count: int) -> list[JsonObject]:
    """``count`` separately decoded dicts, as a cache of dicts would hold them."""
    return [json.loads(text) for _ in range(count)]


def encoded_copies(encoded: bytes, count: int) -> list[bytes]:
    """``count`` separate byte strings, as the cache holds them."""
    return [bytes(bytearray(encoded)) for _ in range(count)]


def measured(make: Callable[[], list[Any]]) -> float:
    """Bytes allocated and still held by what ``make`` returns, divided by its length."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = make()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / len(kept)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objects", type=int, default=5000)
    args = parser.parse_args()
    count = args.objects
    print(f"bytes per cached object, {count} objects of each kind (tracemalloc)")
    print(f"{'kind':<30}{'as served':>12}{'transformed':>14}{'as JSON':>10}{'JSON size':>11}")
    totals = [0.0, 0.0, 0.0]
    for name, make, transform in KINDS:
        sample = make()
        served = json.loads(json.dumps(sample))
        kept = transform(copy.deepcopy(served)) or {}
        encoded = json.dumps(kept, separators=(",", ":")).encode()
        as_served = measured(partial(copies, json.dumps(served), count))
        as_kept = measured(partial(copies, json.dumps(kept), count))
        as_json = measured(partial(encoded_copies, encoded, count))
        for index, value in enumerate((as_served, as_kept, as_json)):
            totals[index] += value
        print(f"{name:<30}{as_served:>12.0f}{as_kept:>14.0f}{as_json:>10.0f}{len(encoded):>11}")
    print(f"{'per Instance, all five':<30}{totals[0]:>12.0f}{totals[1]:>14.0f}{totals[2]:>10.0f}")


if __name__ == "__main__":
    main()
