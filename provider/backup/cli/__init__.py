"""``controlplane-backup``: backups of a control plane from a terminal.

- ``commands``: the commands (export, verify, describe, ls, restore).
- ``listing``: what ``ls`` shows (pure).
- ``progress``: progress on a terminal or in a log (pure).

Nothing outside this package imports it: the controllers never run command-line code.
"""
