"""The metadata store seam: a small Protocol, the Oxia adapter, an in-memory fake.

The adapter is the only module that touches the ``oxia`` client. It maps
Oxia outcomes onto ours at the boundary:

- ``KeyNotFound`` on a get           -> ``None``
- ``UnexpectedVersionId`` on a write  -> :class:`VersionConflict`
- anything else (grpc, session, ...)  -> :class:`MetadataStoreError` (retriable)

Versions are Oxia ``version_id`` integers; ``EXPECT_ABSENT`` (-1) asks for
create-if-absent. Every call is counted and timed through ``LlogMetrics``.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Protocol, Sequence

from .._config import OxiaConfig
from .._errors import LlogError, MetadataStoreError, VersionConflict
from .._metrics import LlogMetrics
from .._protocol.keys import oxia_sort_key
from .oxia_read import READ_METHOD, STATUS_KEY_NOT_FOUND, STATUS_OK, decode_read_response, encode_read_request

__all__ = [
    "EXPECT_ABSENT",
    "Record",
    "MetadataStore",
    "OxiaMetadataStore",
    "InMemoryMetadataStore",
]

EXPECT_ABSENT = -1


@dataclass(frozen=True)
class Record:
    key: str
    value: bytes
    version: int


class MetadataStore(Protocol):
    def get(self, key: str, partition_key: str) -> Record | None: ...

    def get_many(self, items: Sequence[tuple[str, str]]) -> list[Record | None]:
        """``get`` of each ``(key, partition_key)``, in order. Not a snapshot: each
        get is its own read, as if called one after another."""
        ...

    def ceiling(self, key: str, partition_key: str) -> Record | None:
        """The first record at or after ``key`` on the partition's shard: may
        belong to another partition or be an internal key; callers check."""
        ...

    def put(
        self,
        key: str,
        value: bytes,
        partition_key: str,
        expected_version: int | None = None,
        ephemeral: bool = False,
    ) -> int: ...

    def delete(self, key: str, partition_key: str, expected_version: int | None = None) -> bool: ...

    def delete_range(self, min_key: str, max_key: str, partition_key: str) -> None: ...

    def range_scan(self, min_key: str, max_key: str, partition_key: str | None) -> Iterator[Record]: ...

    def list_keys(self, min_key: str, max_key: str, partition_key: str | None = None) -> list[str]: ...

    def close(self) -> None: ...


class OxiaMetadataStore:
    """MetadataStore over the real Oxia service (``oxia`` client 0.2.1)."""

    def __init__(self, config: OxiaConfig, metrics: LlogMetrics | None = None) -> None:
        import oxia  # imported here so unit tests with the fake need no grpc

        from . import oxia_channel, oxia_compat

        oxia_compat.apply()
        self._oxia = oxia
        self._metrics = metrics or LlogMetrics()
        self._config = config
        try:
            self._client = oxia_channel.connect(
                config.service_address,
                namespace=config.namespace,
                session_timeout_ms=config.session_timeout_ms,
                client_identifier=config.client_identifier,
                request_timeout_ms=config.request_timeout_ms,
            )
        except Exception as exc:  # grpc raises many types while connecting
            raise MetadataStoreError(
                f"cannot connect to Oxia at {config.service_address}: {exc}. "
                "Is the server running? (LLOG_OXIA_SERVICE_ADDRESS)"
            ) from exc
        from .oxia_batch import OxiaWriteBatcher

        # Concurrent puts (a flush's commit threads) share one WriteRequest per shard.
        self._writes = OxiaWriteBatcher(
            self._client, on_batch=lambda n: self._metrics.observe("oxia_write_batch_puts", n)
        )
        self._closed = False
        self._close_lock = threading.Lock()

    @contextlib.contextmanager
    def _translated(self, op: str, key: str) -> Iterator[None]:
        """Every Oxia call runs in here: the client's and grpc's errors leave
        as VersionConflict or MetadataStoreError naming the call and key."""
        try:
            yield
        except LlogError:  # raised here already, in llog's words
            raise
        except Exception as exc:  # grpc and the client raise many types
            raise self._fail(op, key, exc) from exc

    def _fail(self, op: str, key: str, exc: BaseException) -> LlogError:
        if isinstance(exc, self._oxia.ex.UnexpectedVersionId):
            return VersionConflict(f"Oxia {op} of {key!r}: version changed")
        code, where = _grpc_code(exc), f"the Oxia cluster at {self._config.service_address}"
        if code == "DEADLINE_EXCEEDED":
            return MetadataStoreError(
                f"Oxia {op} of {key!r}: no answer from {where} within {self._config.request_timeout_ms} ms "
                "(LLOG_OXIA_REQUEST_TIMEOUT_MS); is an Oxia server down or paused?"
            )
        if code == "UNAVAILABLE":
            return MetadataStoreError(
                f"Oxia {op} of {key!r}: {where} is unreachable ({exc.details()}); is an Oxia server down or paused?"
            )
        detail = f"{type(exc).__name__}: {exc}" if code is None else f"{code}: {exc.details()}"
        return MetadataStoreError(f"Oxia {op} of {key!r} failed against {where}: {detail}")

    def get(self, key: str, partition_key: str) -> Record | None:
        with self._metrics.oxia_op("get"), self._translated("get", key):
            try:
                k, value, version = self._client.get(key, partition_key=partition_key)
            except self._oxia.ex.KeyNotFound:  # an answer, not an error
                return None
        return Record(k, value, version.version_id())

    def get_many(self, items: Sequence[tuple[str, str]]) -> list[Record | None]:
        """One Oxia read per shard carrying all of its gets (the server answers them
        in order, possibly over several stream messages), instead of a round trip
        per key: a fetch of 64 partitions at their end reads 64 control records."""
        if len(items) <= 1:
            return [self.get(k, pk) for k, pk in items]
        by_shard: dict[int, tuple[Any, list[int]]] = {}
        with self._metrics.oxia_op("get_many"), self._translated("get_many", items[0][0]):
            discovery = self._client._service_discovery
            for i, (key, partition_key) in enumerate(items):
                shard, stub = discovery.get_leader(key, partition_key)
                by_shard.setdefault(shard, (stub, []))[1].append(i)
            out: list[Record | None] = [None] * len(items)
            for shard, (stub, idxs) in by_shard.items():
                read = stub._channel.unary_stream(READ_METHOD, None, decode_read_response)  # oxia_read.py: why
                answers = [g for gets in read(encode_read_request(shard, [items[i][0] for i in idxs])) for g in gets]
                if len(answers) != len(idxs):
                    raise MetadataStoreError(f"Oxia answered {len(answers)} of {len(idxs)} gets")
                for i, got in zip(idxs, answers):
                    if got.status == STATUS_KEY_NOT_FOUND:
                        continue
                    if got.status != STATUS_OK or got.version_id is None:
                        raise MetadataStoreError(f"Oxia get of {items[i][0]!r}: status {got.status}")
                    out[i] = Record(items[i][0] if got.key is None else got.key, got.value, got.version_id)
        return out

    def ceiling(self, key: str, partition_key: str) -> Record | None:
        with self._metrics.oxia_op("get_ceiling"), self._translated("ceiling get", key):
            try:
                k, value, version = self._client.get(
                    key, partition_key=partition_key, comparison_type=self._oxia.ComparisonType.CEILING,
                )
            except self._oxia.ex.KeyNotFound:  # an answer, not an error
                return None
        return Record(k, value, version.version_id())

    def put(
        self,
        key: str,
        value: bytes,
        partition_key: str,
        expected_version: int | None = None,
        ephemeral: bool = False,
    ) -> int:
        op = "put_ephemeral" if ephemeral else ("put" if expected_version is None else "put_cas")
        with self._metrics.oxia_op(op, len(value)), self._translated("put", key):
            if ephemeral:  # needs the client's session: not batched
                _, version = self._client.put(
                    key, value, partition_key=partition_key, expected_version_id=expected_version, ephemeral=True,
                )
            else:
                _, version = self._writes.put(key, value, partition_key, expected_version)
        return version.version_id()

    def delete(self, key: str, partition_key: str, expected_version: int | None = None) -> bool:
        with self._metrics.oxia_op("delete"), self._translated("delete", key):
            return self._client.delete(key, partition_key=partition_key, expected_version_id=expected_version)

    def delete_range(self, min_key: str, max_key: str, partition_key: str) -> None:
        with self._metrics.oxia_op("delete_range"), self._translated("delete_range", min_key):
            self._client.delete_range(min_key, max_key, partition_key=partition_key)

    def range_scan(self, min_key: str, max_key: str, partition_key: str | None) -> Iterator[Record]:
        # Counted, not timed: the stream's duration is the consumer's pace.
        self._metrics.inc("oxia_operations_total", op="range_scan", outcome="ok")
        with self._translated("range_scan", min_key):
            for k, value, version in self._client.range_scan(min_key, max_key, partition_key=partition_key):
                yield Record(k, value, version.version_id())

    def list_keys(self, min_key: str, max_key: str, partition_key: str | None = None) -> list[str]:
        with self._metrics.oxia_op("list"), self._translated("list", min_key):
            return list(self._client.list(min_key, max_key, partition_key=partition_key))

    def close(self) -> None:
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        self._writes.close()
        try:
            self._client.close()
        except Exception:  # closing a broken channel must not mask the caller's error
            pass


def _grpc_code(exc: BaseException) -> str | None:
    """The gRPC status code name of a failed call, if it is one."""
    code = getattr(exc, "code", None)
    try:
        return None if code is None else code().name
    except Exception:  # not a grpc.RpcError after all
        return None


class InMemoryMetadataStore:
    """A single-shard fake with Oxia's ordering and CAS rules, for unit tests.

    ``fail_next(op, key_contains=...)`` injects a MetadataStoreError into the
    next call of a named operation (``"put"``, ``"get"`` ...), optionally only
    for keys containing a substring, to simulate a crash between two steps.
    ``lose_reply_next(op, ...)`` applies the next such call and then raises,
    as a write whose reply the network lost.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._data: dict[str, tuple[bytes, int]] = {}
        self._next_version = 0
        self.calls: dict[str, int] = {}
        self._fail: list[list] = []

    def fail_next(self, op: str, times: int = 1, key_contains: str = "") -> None:
        self._fail.append([op, key_contains, times, False])

    def lose_reply_next(self, op: str, times: int = 1, key_contains: str = "") -> None:
        self._fail.append([op, key_contains, times, True])

    def _enter(self, op: str, key: str = "") -> bool:
        """Count the call; raise an injected failure, or return True when the
        call must be applied and its reply then lost."""
        self.calls[op] = self.calls.get(op, 0) + 1
        for rule in self._fail:
            if rule[0] == op and rule[1] in key and rule[2] > 0:
                rule[2] -= 1
                if rule[3]:
                    return True
                raise MetadataStoreError(f"injected failure in {op} of {key!r}")
        return False

    @staticmethod
    def _reply_lost(op: str, key: str) -> MetadataStoreError:
        return MetadataStoreError(f"injected lost reply of {op} of {key!r} (it was applied)")

    def get(self, key: str, partition_key: str) -> Record | None:
        with self._lock:
            self._enter("get", key)
            hit = self._data.get(key)
            return None if hit is None else Record(key, hit[0], hit[1])

    def get_many(self, items: Sequence[tuple[str, str]]) -> list[Record | None]:
        with self._lock:
            self._enter("get_many", items[0][0] if items else "")
        return [self.get(k, pk) for k, pk in items]

    def ceiling(self, key: str, partition_key: str) -> Record | None:
        with self._lock:
            self._enter("ceiling", key)
            query = oxia_sort_key(key)
            found = min(((sk, k) for k in self._data if (sk := oxia_sort_key(k)) >= query), default=None)
            if found is None:
                return None
            v, ver = self._data[found[1]]
            return Record(found[1], v, ver)

    def put(
        self,
        key: str,
        value: bytes,
        partition_key: str,
        expected_version: int | None = None,
        ephemeral: bool = False,
    ) -> int:
        with self._lock:
            lose_reply = self._enter("put", key)
            current = self._data.get(key)
            if expected_version is not None:
                if expected_version == EXPECT_ABSENT and current is not None:
                    raise VersionConflict(f"{key!r} exists")
                if expected_version != EXPECT_ABSENT and (current is None or current[1] != expected_version):
                    raise VersionConflict(f"{key!r} version changed")
            version = self._next_version
            self._next_version += 1
            self._data[key] = (bytes(value), version)
            if lose_reply:
                raise self._reply_lost("put", key)
            return version

    def delete(self, key: str, partition_key: str, expected_version: int | None = None) -> bool:
        with self._lock:
            lose_reply = self._enter("delete", key)
            current = self._data.get(key)
            if current is None:
                return False
            if expected_version is not None and current[1] != expected_version:
                raise VersionConflict(f"{key!r} version changed")
            del self._data[key]
            if lose_reply:
                raise self._reply_lost("delete", key)
            return True

    def delete_range(self, min_key: str, max_key: str, partition_key: str) -> None:
        with self._lock:
            self._enter("delete_range", min_key)
            for k in self._keys_in(min_key, max_key):
                del self._data[k]

    def range_scan(self, min_key: str, max_key: str, partition_key: str | None) -> Iterator[Record]:
        with self._lock:
            self._enter("range_scan", min_key)
            rows = [Record(k, *self._data[k]) for k in self._keys_in(min_key, max_key)]
        return iter(rows)

    def _keys_in(self, min_key: str, max_key: str) -> list[str]:
        """The keys in ``[min_key, max_key)``, in Oxia's order."""
        lo, hi = oxia_sort_key(min_key), oxia_sort_key(max_key)
        inside = sorted((sk, k) for k in self._data if lo <= (sk := oxia_sort_key(k)) < hi)
        return [k for _, k in inside]

    def list_keys(self, min_key: str, max_key: str, partition_key: str | None = None) -> list[str]:
        return [r.key for r in self.range_scan(min_key, max_key, partition_key)]

    def close(self) -> None:
        pass
