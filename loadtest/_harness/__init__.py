"""Internals of the load-test harness (loadtest/README.md, "Load-test harness").

The harness's commands (``orchestrate``, ``precreate``, ``routing``,
``metrics_collector``, ...) live in ``loadtest/``; what they share, and what
is worth testing on its own, lives here, one module per concept:

- ``json_files``: reading a run-directory JSON file with a check that names
  the file, and writing one whole (temporary file, then rename).
"""
