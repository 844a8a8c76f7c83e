"""Compaction and vacuum, and the service that runs them.

``compactor`` (``LeaderlessLogCompactor``, SPEC 7.7), ``service`` (claims,
scheduling, workers), ``http`` (health and metrics), ``config``,
``blob_cache`` (shared WAL blobs read once per pass), ``vacuum`` (SPEC 7.9)
and ``vacuum_cli``. The public faces are ``server.leaderless_log_compactor``,
``server.leaderless_log_compactor_server`` and ``server.leaderless_log_vacuum``.
Does not import ``server._broker``.
"""
