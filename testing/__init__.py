"""llog's correctness tooling, beside the product and outside its package.

In the spirit of TigerBeetle's ``src/testing/``: everything that hunts for
protocol bugs lives here, and the product never imports it.

- ``sim/`` and ``simulate``: the deterministic simulator (one seeded
  scheduler runs writers, compactors, vacuum and readers over fault-injecting
  in-memory stores; invariants checked after every step).
  ``python -m testing.simulate --seeds 2000``
- ``chaos``: the fault run on real processes (brokers, compactor services,
  Oxia and MinIO killed and paused), its history checked for lost and
  duplicated records. ``python -m testing.chaos --seconds 60``
- ``invariants``: SPEC 8 on a log's metadata, for the simulator and the tests.
- ``history``: the produce history and its Jepsen-style checker, for the
  simulator and the chaos run.
"""
