"""The controlplane provider: the Instance managed resource, on Upbound Spaces.

Layers, from the inside out; each imports only those before it
(``tests/test_architecture.py`` enforces it):

- ``managed``: crossplane-runtime's managed reconciler, generic: conditions,
  annotations, management policies, the external-client interface and the loop.
- ``runtime``: work queue, metrics with /healthz and /readyz, JSON logs.
- ``kube``: the only module that talks to a Kubernetes API server; ``cache``:
  watch-fed caches (informers) on it, which reconciles read instead of the server.
- ``model``: pydantic models of the kinds we read, and where they live.
- ``spaces``: the Spaces backend behind the external-client interface;
  ``instances`` and ``configs``: the Kubernetes side of Instances and of
  provider configs.
- ``backup``: everything about backups (archive, storage, export, restore,
  schedules, the Backup and BackupSchedule reconcilers); the Spaces backend
  uses its restore.
- ``controller`` wires a watch, the queue and a reconciler; ``cli`` is
  ``controlplane-provider`` and ``controlplane-backup-controller``.
"""
