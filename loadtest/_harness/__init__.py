"""Internals of the load-test harness (loadtest/README.md, "Load-test harness").

The harness's commands (``orchestrate``, ``precreate``, ``routing``,
``metrics_collector``, ...) live in ``loadtest/``; what they share, and what
is worth testing on its own, lives here, one module per concept:

- ``procfs``: reading ``/proc`` for one process (CPU, RSS, threads, open
  files) and for the host (CPU times, available memory, network and disk
  bytes), with parsers that take the files' text;
- ``json_files``: reading a run-directory JSON file with a check that names
  the file, and writing one whole (temporary file, then rename).
"""
