"""DescribeAcls, CreateAcls, DeleteAcls: answered as a Kafka broker without an authorizer answers them.

llog's listener authorizes nothing (no SASL, no ACLs: KAFKA_API.md), so it
answers the ACL APIs with SECURITY_DISABLED (54) and "No Authorizer is
configured", as Kafka does when ``authorizer.class.name`` is empty: an admin
tool or a UI that lists ACLs learns at once that there are none to manage,
where a closed connection would leave it retrying until its timeout.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka.protocol.admin import CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse

from .errors import Code

if TYPE_CHECKING:
    from .codec import KafkaRequest
    from .service import KafkaService

__all__ = ["HANDLERS"]

NO_AUTHORIZER = "No Authorizer is configured."


def describe_acls(svc: KafkaService, req: KafkaRequest) -> Any:
    return DescribeAclsResponse[req.version](throttle_time_ms=0, error_code=Code.SECURITY_DISABLED,
                                             error_message=NO_AUTHORIZER, resources=[])


def create_acls(svc: KafkaService, req: KafkaRequest) -> Any:
    R = CreateAclsResponse
    return R[req.version](throttle_time_ms=0, results=[
        R.AclCreationResult(error_code=Code.SECURITY_DISABLED, error_message=NO_AUTHORIZER)
        for _ in req.body.creations])


def delete_acls(svc: KafkaService, req: KafkaRequest) -> Any:
    R = DeleteAclsResponse
    return R[req.version](throttle_time_ms=0, filter_results=[
        R.DeleteAclsFilterResult(error_code=Code.SECURITY_DISABLED, error_message=NO_AUTHORIZER, matching_acls=[])
        for _ in req.body.filters])


HANDLERS = {29: describe_acls, 30: create_acls, 31: delete_acls}
