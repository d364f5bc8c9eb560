"""``controlplane-plan``: what a push to a team's repository would do to its control plane.

Layers (``tests/test_architecture.py`` enforces them):

- pure: ``stages`` (the function's own rendering of the stages), ``changes``
  (what a plan says, and the offline comparison), ``kinds`` (which kinds a
  stage installs), ``health`` (the checks Flux would run), ``output``
  (table, Markdown, JSON);
- edges: ``build`` (runs ``controlplane-plan-build``, Flux's build),
  ``checkout`` (git revisions), ``live`` (Kubernetes, only through
  ``provider.kube``);
- ``planner`` puts them together per stage, ``cli`` is the command.
"""
