"""Compaction and vacuum, and the service that runs them.

``compactor`` (``LeaderlessLogCompactor``, SPEC 7.7), ``vacuum`` (SPEC 7.9)
and ``vacuum_cli``; the service: ``service`` (threads and wiring),
``scheduler`` (which log is due, delays), ``discovery``, ``task_runner``
(claim, run, release), ``claims``, ``tasks`` (``TaskOutcome``,
``TaskResult``), ``vacuum_runner``, ``http`` (health and metrics),
``config`` and ``blob_cache`` (shared WAL blobs read once per pass). The
public faces are ``server.leaderless_log_compactor``,
``server.leaderless_log_compactor_server`` and ``server.leaderless_log_vacuum``.
Does not import ``server._broker``.
"""
