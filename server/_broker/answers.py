"""How a broker route answers the errors it expects (the one place a route's error becomes a Response)."""

from __future__ import annotations

import functools
import logging
import re
from typing import Any, Callable

from .._errors import InvalidRequest, LlogError
from .._http_server import Response, error_response
from .._protocol.http_json import InvalidField, TooLarge
from .._protocol.outcomes import INVALID_REQUEST, REQUEST_TOO_LARGE, outcome_of_error

__all__ = ["answers_errors"]

log = logging.getLogger(__name__)

_Route = Callable[..., Response]
_INDEX = re.compile(r"\[\d+\]")


def answers_errors(route: _Route) -> _Route:
    """A route method answers every error it expects with a Response: 400 a
    malformed request (naming the field), 413 one over a limit, a log error as
    its row of ``_protocol/outcomes.py`` says (503 or 500 by whether a retry can
    help when the row has no status). Only a bug escapes (the HTTP handler
    answers it 500). ``self.metrics`` counts the refusals by route and field."""
    path = "/" + route.__name__.removesuffix("_route")

    @functools.wraps(route)
    def answer(self: Any, body: bytes, *args: Any) -> Response:
        try:
            return route(self, body, *args)
        except TooLarge as exc:
            self.metrics.inc("http_validation_failures_total", path=path, field=_field_label(exc.field))
            return error_response(REQUEST_TOO_LARGE, exc.message, exc.field)
        except InvalidField as exc:
            self.metrics.inc("http_validation_failures_total", path=path, field=_field_label(exc.field))
            return error_response(INVALID_REQUEST, exc.message, exc.field)
        except InvalidRequest as exc:
            self.metrics.inc("http_validation_failures_total", path=path, field="body")
            return error_response(INVALID_REQUEST, str(exc))
        except LlogError as exc:
            log.warning("%s failed: %s", route.__name__, exc)
            return error_response(outcome_of_error(exc), str(exc), retriable=exc.retriable)

    return answer


def _field_label(field: str | None) -> str:
    """A request field as a metric label: indices dropped (``records[]``), so
    the label takes a bounded set of values; ``body`` for the body as a whole."""
    return _INDEX.sub("[]", field) if field else "body"
