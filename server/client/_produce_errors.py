"""Errors of the produce client; their place in the one error tree is
drawn in ``server/_errors.py``."""

from __future__ import annotations

from .._errors import LlogError

__all__ = ["ProduceError", "ProduceFailed", "BrokerUnreachable"]


class ProduceError(LlogError):
    """Base of the produce client's errors."""


class ProduceFailed(ProduceError):
    """A batch could not be acknowledged.

    ``broker`` is the URL of the last broker tried, ``status`` its HTTP
    status (None for a connection failure), ``error_type``/``last_error`` the
    last error it reported (``error_type`` names a row of the outcome table,
    ``server/_protocol/outcomes.py``, or is the answer's own) and ``attempts``
    how many times the batch was sent.
    """

    def __init__(
        self,
        message: str,
        *,
        broker: str,
        topic: str,
        partition: int,
        last_error: str,
        error_type: str | None = None,
        status: int | None = None,
        attempts: int = 1,
        retriable: bool = False,
    ) -> None:
        super().__init__(message, topic=topic, partition=partition, retriable=retriable)
        self.broker = broker
        self.last_error = last_error
        self.error_type = error_type
        self.status = status
        self.attempts = attempts

    def __str__(self) -> str:
        status = f"HTTP {self.status}" if self.status is not None else "no answer"
        kind = f" {self.error_type}" if self.error_type else ""
        return (
            f"{self.message}: broker {self.broker}, topic-partition {self.topic}:{self.partition}, "
            f"after {self.attempts} attempt(s); last error ({status}{kind}): {self.last_error}"
        )


class BrokerUnreachable(ProduceFailed):
    """The last attempt could not connect to any broker."""
