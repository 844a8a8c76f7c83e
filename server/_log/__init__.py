"""The log: appending to and reading from topic-partitions over the storage seams.

``writer`` (``LeaderlessLogWriter``), ``producer`` (``BatchingProducer``),
``recovery`` (materializing pending appends, shared with the compactor),
``reader`` (``LeaderlessLogReader``), ``index`` (the sparse-index lookup).
Public names are re-exported by ``server.leaderless_log_writer`` and
``server.leaderless_log_reader``.
"""
