"""The JSON error body both HTTP services answer with (broker and compactor).

Every non-2xx answer of either service has this shape (``server/HTTP_API.md``,
``server/openapi.yaml``: ``Error``): ``error`` (a message), ``error_type``
(a stable class name), ``field`` when one request field is at fault, plus any
keyword extras. It lives in the protocol package because it is part of the
wire format and both services import it without importing each other.
"""

from __future__ import annotations

from typing import Any

__all__ = ["error_body"]


def error_body(error: str, error_type: str, field: str | None = None, **extra: Any) -> dict[str, Any]:
    """The JSON body of every non-2xx answer."""
    body: dict[str, Any] = {"error": error, "error_type": error_type}
    if field is not None:
        body["field"] = field
    body.update(extra)
    return body
