"""Fetch sessions (KIP-227): a consumer's partitions kept between its fetches.

A consumer of many partitions names every one of them in every fetch, and
every answer names every one again, even when nothing moved: for 64 idle
partitions, decoding the request and encoding the answer cost more of the
broker's CPU than reading the partitions' state. With a session the broker
keeps the partitions and their fetch offsets, a request names only what
changed, and an answer only the partitions with records or news.

What a request's ``session_id`` and ``session_epoch`` ask (Kafka's rules):

==========  ======  ==========================================================
session id  epoch   meaning
==========  ======  ==========================================================
0           -1      a full fetch, no session (librdkafka's; answered id 0)
0 or S      0       a full fetch that opens a new session (closing S); the
                    answer names every partition and the new id (0 when no
                    slot could be had: the client goes on without one)
S           -1      close S; a full fetch, no session
S           n > 0   an incremental fetch of S at its epoch n: the request's
                    partitions are added or updated, ``forgotten_topics_data``
                    removed, and every partition of S is fetched; the answer
                    names those with records, an error, or a high watermark
                    or log start other than the last answer's
==========  ======  ==========================================================

An unknown S is FETCH_SESSION_ID_NOT_FOUND (70), a wrong n
INVALID_FETCH_SESSION_EPOCH (71); either way the client starts again with a
full fetch. Sessions live in the broker's memory, at most ``slots`` of them;
opening one beyond evicts the least recently used (its client gets 70 and
opens another). Partitions that returned records move to the end of their
session, so a byte budget smaller than the data rotates over them, as in
Kafka. Offsets here are Kafka's.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from .errors import Code

__all__ = ["FetchContext", "FetchSessions", "SessionPartition", "DEFAULT_SLOTS", "forgotten_of"]

DEFAULT_SLOTS = 1000
"""Kafka's ``max.incremental.fetch.session.cache.slots``."""

_FINAL, _INITIAL = -1, 0
TP = tuple[str, int]


@dataclass
class SessionPartition:
    """One partition of a session: where the client fetches, and what it was last told."""

    fetch_offset: int
    max_bytes: int
    high_watermark: int | None = None
    log_start_offset: int | None = None


@dataclass
class _Session:
    id: int
    epoch: int
    partitions: OrderedDict[TP, SessionPartition] = field(default_factory=OrderedDict)


@dataclass
class FetchContext:
    """What one fetch request means under the session rules (module docstring)."""

    kind: str
    """For the metrics: sessionless, opened, incremental, closed (a full fetch closing one), not_found or
    bad_epoch."""
    error: int
    """Code.NONE, or the session error the whole answer carries (no partitions)."""
    session_id: int
    """The id the answer carries (0: no session)."""
    partitions: list[tuple[TP, SessionPartition]]
    """The partitions to fetch, in order."""
    session: _Session | None = None
    incremental: bool = False
    lock: threading.Lock | None = None
    """The sessions' lock, held while the answer is recorded."""

    def answered(self, answers: Iterable[tuple[TP, int, int, int, bool]]) -> set[TP]:
        """Record ``(partition, error code, high watermark, log start, has records)`` of each answer;
        the partitions the answer names: all for a full fetch, the changed ones for an incremental one."""
        answers = list(answers)
        if self.session is None or self.lock is None:
            return {tp for tp, *_ in answers}
        with self.lock:
            return self._record(self.session, answers)

    def _record(self, session: _Session, answers: list[tuple[TP, int, int, int, bool]]) -> set[TP]:
        named: set[TP] = set()
        moved: list[TP] = []
        for tp, code, hw, log_start, has_records in answers:
            part = session.partitions.get(tp)
            if part is None:  # forgotten meanwhile (a client's concurrent request)
                continue
            news = code != Code.NONE or hw != part.high_watermark or log_start != part.log_start_offset
            if not self.incremental or has_records or news:
                named.add(tp)
                part.high_watermark, part.log_start_offset = hw, log_start
            if has_records:
                moved.append(tp)
        for tp in moved:
            session.partitions.move_to_end(tp)
        return named


class FetchSessions:
    """The broker's fetch sessions (module docstring). Thread-safe."""

    def __init__(self, slots: int = DEFAULT_SLOTS, *, new_id: Callable[[], int]) -> None:
        """``new_id``: a random positive int32 (the runtime's randomness seam)."""
        self._slots = slots
        self._new_id = new_id
        self._sessions: OrderedDict[int, _Session] = OrderedDict()
        self._lock = threading.Lock()
        self.evictions = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def begin(self, session_id: int, epoch: int, wanted: list[tuple[TP, SessionPartition]],
              forgotten: Iterable[TP]) -> FetchContext:
        """The context of a request naming ``wanted`` (its partitions, in order) and ``forgotten``."""
        with self._lock:
            if epoch in (_FINAL, _INITIAL):
                if session_id:
                    self._sessions.pop(session_id, None)
                if epoch == _FINAL or self._slots == 0:
                    return FetchContext("closed" if session_id else "sessionless", Code.NONE, 0, wanted)
                session = self._open(wanted)
                return FetchContext("opened", Code.NONE, session.id, wanted, session, lock=self._lock)
            session = self._sessions.get(session_id)
            if session is None:
                return FetchContext("not_found", Code.FETCH_SESSION_ID_NOT_FOUND, 0, [])
            if epoch != session.epoch:
                return FetchContext("bad_epoch", Code.INVALID_FETCH_SESSION_EPOCH, 0, [])
            self._sessions.move_to_end(session_id)
            session.epoch = _next(epoch)
            for tp, part in wanted:
                kept = session.partitions.get(tp)
                if kept is None:
                    session.partitions[tp] = part
                else:
                    kept.fetch_offset, kept.max_bytes = part.fetch_offset, part.max_bytes
            for tp in forgotten:
                session.partitions.pop(tp, None)
            return FetchContext("incremental", Code.NONE, session.id, list(session.partitions.items()), session,
                                incremental=True, lock=self._lock)

    def _open(self, wanted: list[tuple[TP, SessionPartition]]) -> _Session:
        while len(self._sessions) >= self._slots:
            self._sessions.popitem(last=False)
            self.evictions += 1
        session_id = self._new_id()
        while session_id in self._sessions or session_id <= 0:
            session_id = self._new_id()
        session = self._sessions[session_id] = _Session(session_id, _next(_INITIAL), OrderedDict(wanted))
        return session


def _next(epoch: int) -> int:
    """The epoch after ``epoch``: wraps to 1 after int32's maximum, as Kafka's."""
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


def forgotten_of(body: Any, version: int) -> list[TP]:
    """The partitions a fetch request asks its session to forget (v7+)."""
    if version < 7 or not body.forgotten_topics_data:
        return []
    return [(t.topic, p) for t in body.forgotten_topics_data for p in t.partitions]
