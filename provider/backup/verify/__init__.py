"""Whether a restored control plane holds what its archive promised.

``checks`` is the pure comparison, ``observe`` reads a control plane for it.
Both the command line's ``verify --restore`` (through ``restore.verification``)
and the BackupSchedules' restore drills (``controllers.restore_drills``) use
them, so this package imports neither.
"""
