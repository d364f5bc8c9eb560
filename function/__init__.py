"""The controlplane composition function.

Layers, from the inside out (each imports only those above it):

- ``rules``, ``names``: pure helpers (durations, cron, URLs; deterministic names).
- ``model``: pydantic models of the composite's spec and of the function input.
- ``observed``: read-only views of what Crossplane observed.
- ``resources``: builders of each composed object, one module per concern.
- ``compose``: the pure composition (observed state and input in, an outcome out).
- ``fn``: the gRPC servicer that adapts ``compose`` to RunFunction.
- ``render``, ``cli``: the command line (``serve`` and an in-process ``render``).
"""
