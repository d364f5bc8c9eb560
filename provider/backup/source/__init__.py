"""The control plane a Backup reads, through ``provider.kube``.

- ``connection_secret``: the one Secret a Backup may read its kubeconfig from (pure).
- ``versions``: what the control plane says it runs (Kubernetes, Crossplane).
- ``export``: what of it goes into an archive, read a page at a time, and the
  selection rules a restore holds an archive to.
"""
