"""The backup archive's format: pure, no I/O of its own and nothing else of ``provider.backup``.

- ``archive``: the layout (``up controlplane migration export``'s): write a gzip tar
  as a stream, verify one whole, with the limits a reader holds it to.
- ``inventory``: what a verified archive holds, by kind and namespace.
"""
