"""OTLP/HTTP on 4318: ``POST /v1/traces`` (protobuf or JSON, optionally gzip), plus ``/metrics``.

Answers: 200 (with ``partial_success`` when spans were rejected), 400 malformed, 401 bad token,
413 body over ``pipeline.max_body_bytes`` (before or after gunzip), 415 content type or encoding,
429 + Retry-After when the queue is full (before the body is read, when even one span would be
refused), 503 + Retry-After when neither ClickHouse nor the spool can take the data. Error bodies carry
the reason (as a google.rpc.Status, per the OTLP spec).
"""

from __future__ import annotations

import zlib

from aiohttp import web
from google.protobuf import json_format
from google.rpc import status_pb2

from infersight.exposition import CONTENT_TYPE_LATEST, generate
from infersight.pipelines.receiver import otlp
from infersight.pipelines.receiver.intake import Answer, Intake
from infersight.signals.pipeline import ExportOutcome

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
HTTP_STATUS = {
    ExportOutcome.OK: 200, ExportOutcome.MALFORMED: 400, ExportOutcome.REFUSED: 400, ExportOutcome.UNAUTHORIZED: 401,
    ExportOutcome.TOO_LARGE: 413, ExportOutcome.UNSUPPORTED: 415, ExportOutcome.QUEUE_FULL: 429,
    ExportOutcome.UNAVAILABLE: 503,
}
RPC_CODE = {400: 3, 401: 16, 413: 8, 415: 3, 429: 8, 503: 14}  # google.rpc.Code for the error body


def build_app(intake: Intake, max_body_bytes: int, max_held_bytes: int) -> web.Application:
    """``max_held_bytes``: bytes of request bodies held in memory while they arrive, across all connections
    (pipeline.queue_max_bytes; once read, a body is decoded and queued without yielding to another request, and
    the queue holds as much again). Beyond it a request is answered 429 and what it sent so far dropped, so
    many connections sending large bodies at once cannot exhaust the receiver's memory."""
    app = web.Application(client_max_size=max_body_bytes + 1)
    arriving = app[ARRIVING] = Arriving(max_held_bytes)

    async def traces(request: web.Request) -> web.Response:
        as_json = request.content_type == JSON
        if not intake.authorized(request.headers.get("Authorization")):
            return _answer(intake.refuse("http", ExportOutcome.UNAUTHORIZED, "missing or wrong bearer token"), as_json)
        if request.content_type not in (PROTOBUF, JSON):
            return _answer(intake.refuse("http", ExportOutcome.UNSUPPORTED,
                                         f"content type {request.content_type!r} is not supported; "
                                         f"send {PROTOBUF} or {JSON}"), as_json)
        encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in ("identity", "gzip", ""):
            return _answer(intake.refuse("http", ExportOutcome.UNSUPPORTED,
                                         f"content encoding {encoding!r} is not supported; send gzip or none"),
                           as_json)
        if request.content_length is not None and request.content_length > max_body_bytes:
            return _answer(intake.refuse("http", ExportOutcome.TOO_LARGE,
                                         _too_large(request.content_length, max_body_bytes)), as_json)
        # A full queue refuses before the body is read: a flood of retries then costs neither memory nor CPU.
        queued_size = (request.content_length or 0) if encoding != "gzip" and not as_json else 0
        if (full := intake.refuse_if_full("http", queued_size)) is not None:
            return _answer(full, as_json)
        return _answer(await _receive(request, intake, arriving, encoding, as_json, max_body_bytes), as_json)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate(intake.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthy(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    app.router.add_post("/v1/traces", traces)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthy)
    return app


async def _receive(request: web.Request, intake: Intake, arriving: Arriving, encoding: str, as_json: bool,
                   max_body_bytes: int) -> Answer:
    try:
        body = await _read_body(request, max_body_bytes, arriving)
    except _OverBudget:
        # No drain rate tells when bodies in flight will have arrived: the shortest hint HTTP can give.
        return intake.refuse("http", ExportOutcome.QUEUE_FULL, arriving.refusal(), retry_after=1.0)
    if body is None:
        return intake.refuse("http", ExportOutcome.TOO_LARGE, _too_large(max_body_bytes + 1, max_body_bytes))
    if encoding == "gzip":
        try:
            body = _gunzip(body, max_body_bytes)
        except _TooLarge:
            return intake.refuse("http", ExportOutcome.TOO_LARGE,
                                 f"body over {max_body_bytes} bytes once decompressed (pipeline.max_body_bytes)")
        except zlib.error as exc:
            return intake.refuse("http", ExportOutcome.MALFORMED, f"bad gzip body: {exc}")
    return await intake.export("http", body, as_json)


class _TooLarge(Exception):
    pass


class _OverBudget(Exception):
    pass


class Arriving:
    """Bytes of request bodies still arriving, across connections, against one bound (the event loop is one
    thread). Counted as they arrive, not as announced: a client that announces much and sends little holds
    nothing."""

    def __init__(self, limit: int):
        self.limit = limit
        self.bytes = 0

    def take(self, mine: int, size: int) -> bool:
        """``size`` more bytes for a body that holds ``mine`` already; a body alone is always taken
        (max_body_bytes bounds it)."""
        if self.bytes > mine and self.bytes + size > self.limit:
            return False
        self.bytes += size
        return True

    def refusal(self) -> str:
        return (f"{self.bytes} bytes of request bodies already arriving (pipeline.queue_max_bytes={self.limit}); "
                "retry later")


ARRIVING = web.AppKey("arriving", Arriving)


async def _read_body(request: web.Request, limit: int, arriving: Arriving) -> bytes | None:
    """The whole body, or None once it passes ``limit`` (chunked bodies have no Content-Length); raises
    _OverBudget when the bodies arriving would pass their bound. Its bytes are released once it has arrived:
    from there to the queue nothing awaits, so no other body arrives meanwhile, and the queue bounds it.

    ``StreamReader.read(n)`` returns what has arrived so far, not n bytes: read until EOF.
    """
    chunks, size = [], 0
    try:
        while chunk := await request.content.read(1 << 20):
            if size + len(chunk) > limit:
                return None
            if not arriving.take(size, len(chunk)):
                raise _OverBudget()
            size += len(chunk)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        arriving.bytes -= size


def _gunzip(body: bytes, limit: int) -> bytes:
    """Decompress without ever holding more than ``limit`` bytes (a gzip bomb stops at the limit)."""
    decompressor = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    out = decompressor.decompress(body, limit + 1)
    if len(out) > limit or decompressor.unconsumed_tail:
        raise _TooLarge()
    if not decompressor.eof:
        raise zlib.error("truncated gzip stream")
    return out


def _too_large(size: int, limit: int) -> str:
    return f"body of {size}+ bytes is over the {limit}-byte limit (pipeline.max_body_bytes); send smaller batches"


def _answer(answer: Answer, as_json: bool) -> web.Response:
    status = HTTP_STATUS[answer.kind]
    content_type = JSON if as_json else PROTOBUF
    headers = {}
    if answer.retry_after:
        headers["Retry-After"] = str(max(1, round(answer.retry_after)))
    if status == 200:
        body = otlp.response_bytes(answer.rejected_spans, answer.message, as_json)
    else:
        error = status_pb2.Status(code=RPC_CODE.get(status, 2), message=answer.message)
        body = json_format.MessageToJson(error, indent=None).encode() if as_json else error.SerializeToString()
    return web.Response(status=status, body=body, content_type=content_type, headers=headers)
