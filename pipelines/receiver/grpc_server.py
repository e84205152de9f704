"""OTLP/gRPC on 4317: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

The handler receives the raw request bytes (no deserializer): they are checked once by the intake
and forwarded to ClickHouse as they are. gRPC itself handles gzip and enforces the message size
limit. Codes: OK, INVALID_ARGUMENT (malformed or refused data), UNAUTHENTICATED, RESOURCE_EXHAUSTED
with a RetryInfo detail (queue full: the OTel SDK exporters back off and retry), UNAVAILABLE.
"""

from __future__ import annotations

import grpc
from google.protobuf import duration_pb2
from google.rpc import error_details_pb2, status_pb2

from infersight.pipelines.receiver import otlp
from infersight.pipelines.receiver.intake import Intake
from infersight.signals.pipeline import ExportOutcome

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
GRPC_CODE = {
    ExportOutcome.MALFORMED: grpc.StatusCode.INVALID_ARGUMENT,
    ExportOutcome.REFUSED: grpc.StatusCode.INVALID_ARGUMENT,
    ExportOutcome.UNSUPPORTED: grpc.StatusCode.INVALID_ARGUMENT,
    ExportOutcome.TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ExportOutcome.UNAUTHORIZED: grpc.StatusCode.UNAUTHENTICATED,
    ExportOutcome.QUEUE_FULL: grpc.StatusCode.RESOURCE_EXHAUSTED,
    ExportOutcome.UNAVAILABLE: grpc.StatusCode.UNAVAILABLE,
}


def build_server(intake: Intake, max_body_bytes: int) -> grpc.aio.Server:
    async def export(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        metadata = dict(context.invocation_metadata() or ())
        if not intake.authorized(metadata.get("authorization")):
            answer = intake.refuse("grpc", ExportOutcome.UNAUTHORIZED, "missing or wrong bearer token")
        else:
            answer = await intake.export("grpc", request, as_json=False)
        if answer.kind is ExportOutcome.OK:
            return otlp.response_bytes(answer.rejected_spans, answer.message)
        code = GRPC_CODE[answer.kind]
        trailing = ()
        if answer.retry_after:
            trailing = (("grpc-status-details-bin", _retry_status(code, answer.message, answer.retry_after)),)
        await context.abort(code, answer.message, trailing_metadata=trailing)

    handler = grpc.method_handlers_generic_handler(SERVICE, {
        "Export": grpc.unary_unary_rpc_method_handler(export),  # bytes in, bytes out
    })
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", max_body_bytes),
        ("grpc.max_send_message_length", 4 * 1024 * 1024),
    ])
    server.add_generic_rpc_handlers((handler,))
    return server


def _retry_status(code: grpc.StatusCode, message: str, seconds: float) -> bytes:
    """A google.rpc.Status with RetryInfo: what OTLP exporters read to wait before retrying."""
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=max(1, round(seconds))))
    status = status_pb2.Status(code=code.value[0], message=message)
    status.details.add().Pack(retry)
    return status.SerializeToString()
