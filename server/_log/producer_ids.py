"""Producer ids and epochs (Kafka's ``InitProducerId``), allocated in Oxia.

``{root}/__llog/producer-ids`` holds ``{"next_id": N}``: an id is taken by a
compare-and-set from N to N + 1, so ids are unique across every broker and
process (a lost reply wastes an id, never repeats one). A named producer
(Kafka's ``transactional.id``; the Spark sink's per-task name) has a record
``{root}/__llog/producers/{name}`` = ``{"producer_id": P, "epoch": E}``:

- the first init of a name allocates an id, epoch 0;
- each later init bumps the epoch by a compare-and-set, so a batch of the
  older instance is refused as fenced in every log where the newer one has
  written (SPEC 7.12); after epoch 32767 the name gets a fresh id;
- ``bump=False`` returns the record as it is: a retried Spark task resumes
  its failed attempt's producer, so the sequences it sends again are
  recognized as duplicates.

An unnamed init takes a fresh id, epoch 0; an explicit bump of an id
(``producer_id`` and ``producer_epoch`` given, Kafka's KIP-360) returns the
next epoch of that id.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import ConcurrencyConflict, CorruptBatch, InvalidRequest, VersionConflict
from .._protocol.keys import PRODUCERS_PARTITION_KEY, LogLayout
from .._protocol.producer_state import MAX_EPOCH
from .._protocol.records import dumps, loads
from .._retry import Backoff
from .._runtime import REAL_RUNTIME, Runtime
from .._storage.metastore import EXPECT_ABSENT, MetadataStore

__all__ = ["ProducerIdentity", "ProducerIds", "encode_next_id", "decode_next_id", "encode_named", "decode_named"]


@dataclass(frozen=True)
class ProducerIdentity:
    """An idempotent producer's id and epoch."""

    producer_id: int
    producer_epoch: int


class ProducerIds:
    """Allocates producer ids and bumps epochs (module docstring)."""

    def __init__(self, meta: MetadataStore, layout: LogLayout, *, runtime: Runtime = REAL_RUNTIME) -> None:
        self._meta = meta
        self._layout = layout
        self._runtime = runtime

    def init(self, name: str | None = None, *, bump: bool = True, producer_id: int | None = None,
             producer_epoch: int | None = None) -> ProducerIdentity:
        """A producer's id and epoch (module docstring). Raises InvalidRequest
        for a bad name or a half-given id/epoch, ConcurrencyConflict when the
        compare-and-sets keep losing, MetadataStoreError when Oxia fails."""
        if (producer_id is None) != (producer_epoch is None):
            raise InvalidRequest("give producer_id and producer_epoch together, or neither")
        if name is not None:
            return self._init_named(name, bump)
        if producer_id is not None:
            if producer_id < 0 or not 0 <= producer_epoch <= MAX_EPOCH:  # type: ignore[operator]
                raise InvalidRequest(f"producer_id {producer_id}, producer_epoch {producer_epoch} "
                                     f"is not a producer's (id >= 0, epoch 0..{MAX_EPOCH})")
            if producer_epoch < MAX_EPOCH:  # type: ignore[operator]
                return ProducerIdentity(producer_id, producer_epoch + 1)  # type: ignore[operator]
        return ProducerIdentity(self._allocate(), 0)

    def _init_named(self, name: str, bump: bool) -> ProducerIdentity:
        key = self._layout.producer_name_key(name)
        backoff = Backoff(runtime=self._runtime)
        while True:
            rec = self._meta.get(key, PRODUCERS_PARTITION_KEY)
            if rec is not None:
                current = decode_named(rec.value)
                if not bump:
                    return current
                nxt = (ProducerIdentity(current.producer_id, current.producer_epoch + 1)
                       if current.producer_epoch < MAX_EPOCH else ProducerIdentity(self._allocate(), 0))
                expected = rec.version
            else:
                nxt, expected = ProducerIdentity(self._allocate(), 0), EXPECT_ABSENT
            try:
                self._meta.put(key, encode_named(nxt), PRODUCERS_PARTITION_KEY, expected_version=expected)
                return nxt
            except VersionConflict:
                backoff = _next(backoff, f"initialize producer {name!r}")

    def _allocate(self) -> int:
        key = self._layout.producer_ids_key
        backoff = Backoff(runtime=self._runtime)
        while True:
            rec = self._meta.get(key, PRODUCERS_PARTITION_KEY)
            if rec is None:
                next_id, expected = 0, EXPECT_ABSENT
            else:
                next_id, expected = decode_next_id(rec.value), rec.version
            try:
                self._meta.put(key, encode_next_id(next_id + 1), PRODUCERS_PARTITION_KEY,
                               expected_version=expected)
                return next_id
            except VersionConflict:
                backoff = _next(backoff, "allocate a producer id")


def _next(backoff: Backoff, what: str) -> Backoff:
    backoff = backoff.next()
    if backoff.exhausted:
        raise ConcurrencyConflict(f"gave up to {what} after {backoff.attempt} version conflicts")
    backoff.sleep()
    return backoff


def encode_next_id(next_id: int) -> bytes:
    """``{root}/__llog/producer-ids``: the next id to allocate."""
    return dumps({"next_id": next_id})


def encode_named(identity: ProducerIdentity) -> bytes:
    return dumps({"producer_id": identity.producer_id, "epoch": identity.producer_epoch})


def decode_named(raw: bytes) -> ProducerIdentity:
    doc = loads(raw, "producer")
    try:
        return ProducerIdentity(int(doc["producer_id"]), int(doc["epoch"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptBatch(f"unreadable producer record: {exc!r}") from exc


def decode_next_id(raw: bytes) -> int:
    doc = loads(raw, "producer-ids")
    try:
        return int(doc["next_id"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CorruptBatch(f"unreadable producer-ids record: {exc!r}") from exc
