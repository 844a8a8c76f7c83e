"""Reading the fields the broker's binary layouts share: a length-checked
cursor over the bytes, the topic (u16 length + UTF-8 name), and an embedded
``bytes-batch-v1`` batch.

The binary produce body (``binary.py``, read by the broker) and the binary
consume answer (``consume_binary.py``, read by clients) lay these fields out
the same way; each names its own error class (``InvalidField``: HTTP 400;
``MalformedAnswer``), called as ``error(message, field)``. Every error names
the field and the byte offset where it lies.
"""

from __future__ import annotations

import struct
from typing import Callable

from .._errors import CorruptBatch, InvalidRequest, LlogError
from .codec import BATCH_HEADER_SIZE, BatchBounds, decode_batch_bounds
from .stored_batches import StoredBatches
from .keys import MAX_TOPIC_LENGTH, validate_topic

__all__ = ["FieldError", "Frame"]

FieldError = Callable[[str, str], LlogError]
"""Makes the error of a malformed field from ``(message, field)``."""

_U16 = struct.Struct(">H")
_BATCH_LENGTH = struct.Struct(">I")  # records_length, at offset 12 of a batch header


class Frame:
    """The bytes of one body or answer, read front to back (``what``: "body", "answer")."""

    def __init__(self, data: bytes | memoryview, error: FieldError, what: str) -> None:
        self.view = memoryview(data)
        self.error = error
        self.what = what

    def need(self, pos: int, size: int, field: str) -> None:
        if pos + size > len(self.view):
            raise self.error(
                f"{field}: the {self.what} ends at byte {len(self.view)}, inside this field "
                f"({size} bytes at offset {pos})", field,
            )

    def header(self, layout: struct.Struct, magic: bytes, version: int) -> tuple[int, ...]:
        """The header at offset 0, ``layout`` starting with magic (4 bytes),
        version and flags (u16 each): checks the magic and the version and
        returns the flags and the fields after them (each layout defines its
        own flags)."""
        self.need(0, layout.size, "header")
        got_magic, got_version, *rest = layout.unpack_from(self.view, 0)
        if got_magic != magic:
            raise self.error(f"header.magic is {bytes(got_magic)!r} at offset 0, expected {magic!r}", "header.magic")
        if got_version != version:
            raise self.error(
                f"header.version {got_version} at offset 4 is not supported (only {version})", "header.version"
            )
        return tuple(rest)

    def topic(self, pos: int, where: str) -> tuple[str, int]:
        """The valid topic name at ``pos`` and where the next field begins."""
        self.need(pos, 2, f"{where}.topic_length")
        (tlen,) = _U16.unpack_from(self.view, pos)
        if not 1 <= tlen <= MAX_TOPIC_LENGTH:
            raise self.error(
                f"{where}.topic_length must be 1..{MAX_TOPIC_LENGTH}, got {tlen} at offset {pos}",
                f"{where}.topic_length",
            )
        pos += 2
        self.need(pos, tlen, f"{where}.topic")
        try:
            topic = validate_topic(bytes(self.view[pos:pos + tlen]).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise self.error(f"{where}.topic at offset {pos} is not UTF-8: {exc.reason}", f"{where}.topic") from None
        except InvalidRequest as exc:
            raise self.error(f"{where}.topic at offset {pos}: {exc.message}", f"{where}.topic") from None
        return topic, pos + tlen

    def batch(self, pos: int, field: str) -> tuple[BatchBounds, int]:
        """The verified bytes-batch-v1 batch at ``pos`` (length, CRC, length
        prefixes) and where the next field begins."""
        self.need(pos, BATCH_HEADER_SIZE, f"{field} header")
        (length,) = _BATCH_LENGTH.unpack_from(self.view, pos + 12)
        end = pos + BATCH_HEADER_SIZE + length
        if end > len(self.view):
            raise self.error(
                f"{field} at offset {pos}: records_length {length} runs past the {self.what}'s end "
                f"at byte {len(self.view)}", field,
            )
        try:
            return decode_batch_bounds(self.view[pos:end]), end
        except CorruptBatch as exc:
            raise self.error(f"{field} at offset {pos}: {exc.message}", field) from None

    def kafka_batches(self, pos: int, field: str) -> tuple[StoredBatches, int]:
        """The u32 length at ``pos`` and that many bytes of whole RecordBatch v2
        batches after it, checked (magic, lengths, CRC-32C), and where the next field begins."""
        self.need(pos, 4, f"{field}_length")
        (length,) = _BATCH_LENGTH.unpack_from(self.view, pos)
        end = pos + 4 + length
        if end > len(self.view):
            raise self.error(
                f"{field}_length {length} at offset {pos} runs past the {self.what}'s end at byte {len(self.view)}",
                f"{field}_length",
            )
        try:
            return StoredBatches.check(self.view[pos + 4:end]), end
        except CorruptBatch as exc:
            raise self.error(f"{field} at offset {pos + 4}: {exc.message}", field) from None

    def trailing(self, pos: int, after: str, field: str) -> None:
        """Refuse bytes after the last field (``after`` says what ended there)."""
        if pos != len(self.view):
            raise self.error(f"{len(self.view) - pos} trailing bytes at offset {pos} after {after}", field)
