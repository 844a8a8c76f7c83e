"""A deterministic simulation tester for the llog protocol.

In the style of FoundationDB's simulator and TigerBeetle's VOPR: the real
writer, compactor, fencer, vacuum and reader code runs as several actors
over the in-memory stores, one store call at a time, in an order and with
faults drawn from one seed; invariants are checked after every step, and a
failing seed replays exactly. Modules, one job each:

- ``_clock``: simulated time, uuids and jitter: the run's ``Runtime``, which
  every protocol object is built with (nothing is patched);
- ``_pools``: thread pools that run each task in the actor's own thread;
- ``_faults``: which fault strikes at a step;
- ``_scheduler``: the baton between actor threads, the trace;
- ``_stores``: store wrappers that make each call a scheduling point;
- ``_actors``: what each simulated process does;
- ``_history``: append attempts, their outcomes and reads, for the checker;
- ``_checker``: after every step and at the end, SPEC 8 on the raw metadata
  (``testing/invariants.py``) and the history against reads
  (``testing/history.py``);
- ``_run``: one seed from start to verdict.
"""

from ._faults import FaultRates
from ..history import is_unknown_outcome
from ._run import RunResult, SimConfig, SimFailure, run_seed

__all__ = ["FaultRates", "RunResult", "SimConfig", "SimFailure", "is_unknown_outcome", "run_seed"]
