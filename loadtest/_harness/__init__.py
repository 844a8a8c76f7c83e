"""Internals of the load-test harness (``loadtest/README.md``, "Load-test harness").

The harness's commands (``orchestrate``, ``precreate``, ``routing``,
``metrics_collector``, ``quick_observability``) live in ``loadtest/``; what
they share, and what is worth testing on its own, lives here, one module per
concept:

- ``scenario``: scenario files (TOML) as frozen dataclasses, validated
- ``rundir``: the run directory's name and its snapshots (config, git, environment)
- ``stack``: the processes of a run (Oxia, MinIO, brokers, compactors) and ``stack.json``
- ``faults``: the scenario's faults on their schedule (``faults.jsonl``)
- ``run``: one run end to end (``orchestrate.py run``)
- ``hammer``: building and running the Go load generator (``http_hammer.go``)
- ``procfs``: reading ``/proc`` for one process and for the host
- ``json_files``: reading a run-directory JSON file with a check that names
  the file, and writing one whole (temporary file, then rename)
- ``run_files``: reads a run directory's artifacts, noting what is missing or malformed
- ``samples``: the metrics collector's samples per service and process, with restarts found
- ``readback``: confirms acknowledged offset ranges against the log (Oxia + S3)
- ``summary``: ``summary.json``, the roll-up of a run
- ``reconcile``: its reconciliation: client acks against broker counters and the log
- ``summary_text``: its compact text rendering, printed at the end of a run
- ``plots``: pictures of a run from its artifacts (``plots/*.png``)
- ``payloads``: the hammer's records byte for byte, and a read-back decoder that checks them
- ``soak_run``: the soak run end to end (``python -m loadtest.soak``)
- ``soak_sampler``: its samples every 10 s (processes, S3 objects by kind, compaction lag, vacuum)
- ``soak_checks``: its verdict (read-back, flat RSS and open files, objects bounded, compaction caught up)
- ``soak_plot``: its picture (``soak.png``)
"""
