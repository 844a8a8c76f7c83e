"""``POST /producers``: a producer id and epoch for an idempotent producer (SPEC 4.9, 7.12).

The body (JSON; ``{}`` or empty for a fresh producer):

- ``name`` (string, optional): a named producer (Kafka's ``transactional.id``);
  each call bumps its epoch, fencing the previous instance;
- ``resume`` (boolean, with ``name``): the named producer's current epoch,
  unchanged (a retried task resumes its failed attempt's producer);
- ``producer_id`` and ``producer_epoch`` (integers, together): that
  producer's next epoch (Kafka's KIP-360 epoch bump after an error).

Answer 200 ``{"producer_id": P, "producer_epoch": E}``.
"""

from __future__ import annotations

from .._http_server import Response
from .._log.producer_ids import ProducerIds
from .._protocol.http_json import InvalidField, only_fields, parse_json_body
from .._protocol.keys import validate_producer_name
from .._errors import InvalidRequest

__all__ = ["producers_route"]

_FIELDS = ("name", "resume", "producer_id", "producer_epoch")


def producers_route(ids: ProducerIds, body: bytes) -> Response:
    doc = parse_json_body(body) if body.strip() else {}
    only_fields(doc, _FIELDS)
    name = doc.get("name")
    if name is not None:
        try:
            validate_producer_name(name)
        except InvalidRequest as exc:
            raise InvalidField(exc.message, "name") from None
    resume = doc.get("resume", False)
    if not isinstance(resume, bool):
        raise InvalidField(f"resume must be a boolean, got {resume!r}", "resume")
    if resume and name is None:
        raise InvalidField("resume needs a name: only a named producer can be resumed", "resume")
    pid, epoch = doc.get("producer_id"), doc.get("producer_epoch")
    for field, value in (("producer_id", pid), ("producer_epoch", epoch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise InvalidField(f"{field} must be a non-negative integer, got {value!r}", field)
    if (pid is None) != (epoch is None):
        missing = "producer_epoch" if epoch is None else "producer_id"
        raise InvalidField(f"{missing} is required with {'producer_id' if pid is not None else 'producer_epoch'}",
                           missing)
    if pid is not None and name is not None:
        raise InvalidField("give name, or producer_id and producer_epoch, not both", "producer_id")
    try:
        identity = ids.init(name, bump=not resume, producer_id=pid, producer_epoch=epoch)
    except InvalidRequest as exc:
        raise InvalidField(exc.message, "producer_epoch") from None
    return Response(200, {"producer_id": identity.producer_id, "producer_epoch": identity.producer_epoch})
