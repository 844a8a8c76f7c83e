"""The Go hammer's records, byte for byte, and a read-back decoder that checks them.

Every record ``http_hammer`` sends is ``record_bytes`` long: 16 lowercase hex
digits of its send time (Unix nanoseconds), ``|``, then a filler that only
the seed and the length decide (``fillerLetter[(i + seed % 62) % 62]``, see
``newHammer`` in ``loadtest/http_hammer.go``). A JSON body carries it as a
string of ASCII letters, which the broker stores as those same bytes.

:class:`PayloadCheck` is a ``BatchDecoder`` (``server/_log/reader.py``) for
:class:`~.readback.LibraryReadBack`: it takes each stored slice's checked
batches (length, CRC and record count, as the reader always does) and
checks every record: its length, its header and send time (inside the run), its filler.
A batch with a record that differs raises ``CorruptBatch``, so the
read-back counts the batch missing; what differed is kept in
:attr:`PayloadCheck.problems`.
"""

from __future__ import annotations

import re
import threading
from typing import Sequence

from server._errors import CorruptBatch
from server._protocol.stored_batches import StoredBatches

__all__ = ["FILLER_LETTERS", "HEADER_BYTES", "PayloadCheck", "hammer_filler", "hammer_record"]

FILLER_LETTERS = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
HEADER_BYTES = 17
_HEADER = re.compile(rb"[0-9a-f]{16}\|")
MAX_PROBLEMS = 20
"""Problems kept word for word; the rest are only counted."""


def hammer_filler(record_bytes: int, seed: int) -> bytes:
    """The bytes after the header of every record of a hammer run."""
    offset = seed % len(FILLER_LETTERS)
    return bytes(FILLER_LETTERS[(i + offset) % len(FILLER_LETTERS)] for i in range(record_bytes - HEADER_BYTES))


def hammer_record(send_time_ns: int, record_bytes: int, seed: int) -> bytes:
    """One record as the hammer sends it (for tests)."""
    return b"%016x|" % send_time_ns + hammer_filler(record_bytes, seed)


class PayloadCheck:
    """Decodes a batch and checks that each record is one the hammer sent
    between ``not_before_ns`` and ``not_after_ns``. Thread-safe: the reader
    decodes on its read-ahead threads."""

    def __init__(self, record_bytes: int, seed: int, not_before_ns: int, not_after_ns: int) -> None:
        self.record_bytes = record_bytes
        self.filler = hammer_filler(record_bytes, seed)
        self.not_before_ns = not_before_ns
        self.not_after_ns = not_after_ns
        self.records_checked = 0
        self.bad_batches = 0
        self.problems: list[str] = []
        self._lock = threading.Lock()

    def __call__(self, batches: StoredBatches) -> list[bytes | None]:
        records = batches.values()
        problem = self.problem_of(records)
        with self._lock:
            self.records_checked += len(records)
            if problem is not None:
                self.bad_batches += 1
                if len(self.problems) < MAX_PROBLEMS:
                    self.problems.append(problem)
        if problem is not None:
            raise CorruptBatch(f"a record is not one the hammer sent: {problem}")
        return records

    def problem_of(self, records: Sequence[bytes | None]) -> str | None:
        """What is wrong with the first bad record of a batch, or None."""
        if None in records:
            return f"record {records.index(None)} of the batch has a null value"
        # Set-wise first (C loops over the whole batch); the record is looked for only on failure.
        lengths = set(map(len, records))
        if lengths - {self.record_bytes}:
            i = next(i for i, r in enumerate(records) if len(r) != self.record_bytes)
            return f"record {i} of the batch has {len(records[i])} bytes, not {self.record_bytes}"
        if {r[HEADER_BYTES:] for r in records} - {self.filler}:
            i = next(i for i, r in enumerate(records) if r[HEADER_BYTES:] != self.filler)
            return f"record {i} of the batch has another filler: {bytes(records[i][HEADER_BYTES:48])!r}..."
        for header in {r[:HEADER_BYTES] for r in records}:
            if not _HEADER.fullmatch(header):
                return f"a record of the batch has the header {header!r}, not 16 hex digits and '|'"
            sent_ns = int(header[:16], 16)
            if not self.not_before_ns <= sent_ns <= self.not_after_ns:
                return (f"a record of the batch was sent at {sent_ns} ns, outside the run "
                        f"({self.not_before_ns}..{self.not_after_ns})")
        return None
