"""``make docs``: the reference pages and tables generated from the schemas and the programs.

Run in the development venv (``python -m tools.docs``), unlike the image build
helpers beside it (``tools/*.py``), which the build machine's bare python3
runs: this package reads the CRDs with PyYAML and the flags from the programs'
own click commands.

- ``schema``: every field of a CRD or XRD schema, by path, with its type,
  default, rules and description.
- ``flags``: every flag of a click command, with its variable and default.
- ``markdown``: tables, and the generated blocks kept between markers in
  hand-written pages.
- ``pages``: which page shows what, and the whole set of generated files.
"""
