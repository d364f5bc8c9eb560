"""The controlplane provider: the Instance managed resource, on Upbound Spaces.

Layers, from the inside out; each imports only those before it (a test
enforces this):

- ``managed``: crossplane-runtime's managed reconciler, generic: conditions,
  annotations, management policies, the external-client interface and the loop.
- ``model``: pydantic models of the kinds we read (Instance, provider configs,
  Spaces ControlPlanes).
- ``kube``: the only module that talks to a Kubernetes API server.
- ``spaces``: the Spaces backend behind the external-client interface.
- ``runtime``: work queue, metrics, health, logs; ``controller`` wires a
  watch, the queue and the reconciler; ``cli`` is ``controlplane-provider``.
"""
