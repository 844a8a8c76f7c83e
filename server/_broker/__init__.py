"""The HTTP broker: /produce and /consume over the log.

``broker`` (the ``Broker``: routes and lifecycle over its parts), ``cli``
(flags, ``serve``, ``main``), ``http`` (the HTTP server), ``codec``
(request/response JSON), ``config``, ``consume`` (the long-poll consume
service), ``tail_cache`` and ``tail_cache_file`` (recent batches in memory
or on local disk). The public face is ``server.leaderless_log_broker``.
Does not import ``server._compaction``.
"""
