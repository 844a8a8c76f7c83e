"""Internals of the load-test harness (``loadtest/README.md``, "Load-test harness").

- ``run_files``: reads a run directory's artifacts, noting what is missing or malformed
- ``samples``: the metrics collector's samples per service and process, with restarts found
- ``readback``: confirms acknowledged offset ranges against the log (Oxia + S3)
- ``summary``: ``summary.json``, the roll-up of a run
- ``reconcile``: its reconciliation: client acks against broker counters and the log
- ``summary_text``: its compact text rendering, printed at the end of a run
- ``plots``: pictures of a run from its artifacts (``plots/*.png``)
"""
