"""An archive back into a control plane, in the contract's order.

- ``restorer``: download, verify and apply an archive (the provider's, and the CLI's).
- ``steps``: the restore's steps, where a resumed restore starts, its progress (pure).
- ``compat``: whether an archive may go into a control plane, by Crossplane versions (pure).
- ``pool``: restores run apart from the reconcile: few at once, one per namespace, bounded.
- ``instance``: the restore an Instance asks for, and what its status says about it.
- ``dryrun``, ``diff``: what a restore would create, change or leave, asked of the API
  server, with unified diffs (Secrets masked). Only the command line uses them, and
  ``controlplane-plan`` the diff.
"""
