"""One instrumented request through the proxy: forward it, relay the answer, record what happened.

The client gets the upstream's bytes unchanged. Only when the proxy itself ends a request (a
timeout, an unreachable or broken upstream) does it write something of its own: an OpenAI-style
error, as an HTTP status while nothing has been sent yet, else as a final SSE ``error`` event.
Whatever ends the request (the stream's end, a timeout, the client leaving) closes the upstream
connection when its body was not read to the end, which is how engines learn to stop generating.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

from infersight.instrumentation.proxy import errors, headers, recording
from infersight.instrumentation.proxy.deadlines import Deadlines, Watchdog
from infersight.instrumentation.proxy.sse import ResponseFacts, StreamInspector, inspect_json_body
from infersight.instrumentation.tracer import RequestContext

if TYPE_CHECKING:
    from infersight.instrumentation.proxy.app import ProxyContext

# The OpenAI-compatible endpoints the proxy instruments, and their GenAI operation names.
INSTRUMENTED_PATHS = {"/v1/chat/completions": "chat", "/v1/completions": "text_completion"}
# A gateway's request id (X-Request-Id) goes on the span as llm.request.id; bounded, it is caller data.
MAX_REQUEST_ID_CHARS = 128
# A failed write to the client (aiohttp raises ClientConnectionResetError, a ConnectionResetError):
# the client went away.
CLIENT_GONE = ConnectionError


class ResponseTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"upstream answer over {limit:,} bytes")
        self.limit = limit


@dataclass(frozen=True)
class RequestInfo:
    """What the request body says, for labels and span attributes (never the prompt)."""

    operation: str
    model: str
    stream: bool
    max_tokens: int | None
    # The body with per-chunk usage asked for (stream_options include_usage + continuous_usage_stats),
    # or None when the request asks for it already, is not a JSON streaming request, or the proxy
    # does not ask (``ask_usage`` false).
    counted_body: bytes | None = None
    client_wants_usage: bool = False  # the client asked for include_usage itself

    @classmethod
    def parse(cls, operation: str, body: bytes, *, ask_usage: bool = True) -> RequestInfo:
        """Read the body; with ``ask_usage`` also build the body that asks for per-chunk usage (a
        second serialization of the whole request: only when it will be sent)."""
        try:
            payload: Any = json.loads(body)
        except ValueError:
            payload = None
        if not isinstance(payload, dict):  # forwarded anyway: the upstream answers the 400
            return cls(operation, "unknown", False, None)
        model = payload.get("model")
        max_tokens = payload.get("max_completion_tokens", payload.get("max_tokens"))
        stream = payload.get("stream") is True
        options = payload.get("stream_options")
        options = options if isinstance(options, dict) else {}
        wants_usage = options.get("include_usage") is True
        counted = None
        if ask_usage and stream and not (wants_usage and options.get("continuous_usage_stats") is True):
            payload["stream_options"] = {**options, "include_usage": True, "continuous_usage_stats": True}
            counted = json.dumps(payload, separators=(",", ":")).encode()
        return cls(operation, model if isinstance(model, str) and model else "unknown", stream,
                   max_tokens if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) else None,
                   counted, wants_usage)


class Exchange:
    """Forwards one request on an instrumented path and records it through ``context.tracer``."""

    def __init__(self, context: ProxyContext, request: web.Request, operation: str) -> None:
        self.context = context
        self.request = request
        self.operation = operation
        loop = asyncio.get_running_loop()
        self.task = asyncio.current_task()
        self.watchdog = Watchdog(Deadlines(context.timeouts, loop.time()), loop, self.task)
        self.response: web.StreamResponse | None = None  # set once the client response has started
        self.inspector: StreamInspector | None = None

    async def run(self, body: bytes) -> web.StreamResponse:
        context = self.context
        info = RequestInfo.parse(self.operation, body, ask_usage=context.stream_usage)
        request_id = self.request.headers.get("X-Request-Id", "")[:MAX_REQUEST_ID_CHARS] or None
        record = context.tracer.start(info.model, operation=info.operation, headers=self.request.headers,
                                      request_id=request_id, instance=context.upstream_label, pool=context.pool,
                                      max_tokens=info.max_tokens, stream=info.stream)
        record.upstream()
        upstream: aiohttp.ClientResponse | None = None
        counted = info.counted_body
        try:
            upstream = await self._send(counted or body, record.inject({}))
            if counted is not None and upstream.status in (400, 422):
                # Refused: the proxy's ask, or the client's own request (a prompt over the context
                # length is a 400 too). Send the client's body as it came; only when that one gets
                # through was it the ask that the engine refused: then never ask it again.
                let_go(upstream)
                upstream = None
                counted = None
                upstream = await self._send(body, record.inject({}))
                if 200 <= upstream.status < 300:
                    context.refuse_stream_usage()
            if not 200 <= upstream.status < 300:
                return await self._relay_unsuccessful(upstream, record)
            content_type = upstream.headers.get("Content-Type", "")
            if content_type.startswith("text/event-stream") or (info.stream and "json" not in content_type):
                # What the proxy added and the client did not ask for does not reach the client: the
                # running usage on every chunk, and the usage chunk itself unless the client asked for it.
                added = counted is not None
                return await self._relay_stream(upstream, record, strip_chunk_usage=added,
                                                drop_usage_chunk=added and not info.client_wants_usage)
            return await self._relay_json(upstream, record)
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:  # before TimeoutError
            error = errors.upstream_unreachable(context.upstream_label, exc)
            recording.failed(record, error.code, error.message)
            return await self._answer_error(error, upstream)
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            error = errors.upstream_broke(str(exc) or type(exc).__name__)
            recording.failed(record, error.code, error.message, self._facts())
            return await self._answer_error(error, upstream)
        except ResponseTooLarge as exc:
            error = errors.upstream_too_large(exc.limit)
            recording.failed(record, error.code, error.message)
            return await self._answer_error(error, upstream)
        except CLIENT_GONE:  # a write to the client failed: it went away
            if self._delivered():
                recording.completed(record, self.inspector.facts, streamed=True)
            else:
                recording.cancelled(record, self._facts())
            return self.response or web.Response(status=499)
        except asyncio.CancelledError:
            kind = self.watchdog.expired
            if kind is not None and self.task.cancelling() == 1:  # the watchdog's cancel, nobody else's
                self.task.uncancel()
                recording.timed_out(record, kind, self._facts())
                return await self._answer_error(errors.timeout_error(kind, context.timeouts.seconds(kind)), upstream)
            # The client went away while we waited (aiohttp cancels the handler): the upstream
            # connection is closed in ``finally``, which aborts the generation. A client that leaves
            # once it has read [DONE] (the openai client closes the connection there, before the
            # end of the chunked body) got everything: that request completed.
            if self._delivered():
                recording.completed(record, self.inspector.facts, streamed=True)
            else:
                recording.cancelled(record, self._facts())
            raise
        finally:
            self.watchdog.stop()
            let_go(upstream)

    # -- the upstream call ----------------------------------------------------------------
    async def _send(self, body: bytes, trace_headers: dict[str, str]) -> aiohttp.ClientResponse:
        return await self.context.session.request(
            self.request.method, self.context.upstream_url(self.request), data=body,
            headers=headers.to_upstream(self.request.headers, trace_headers, instrumented=True))

    # -- relaying the three kinds of answer -----------------------------------------------
    async def _relay_stream(self, upstream: aiohttp.ClientResponse, record: RequestContext, *,
                            drop_usage_chunk: bool = False, strip_chunk_usage: bool = False) -> web.StreamResponse:
        inspector = self.inspector = StreamInspector(drop_usage_chunk, strip_chunk_usage)
        while data := await upstream.content.readany():
            if self.response is None:
                await self._start_response(upstream)
            if inspector.filtering:  # whole events, minus what the client did not ask for
                carried = inspector.feed(data)
                out = inspector.take()
                if out:
                    await self.response.write(out)
            else:
                await self.response.write(data)  # forward first: the client never waits on our parsing
                carried = inspector.feed(data)
            if carried:  # the tokens this read carried, timed now
                record.tokens(carried)
                self.watchdog.token()
            if inspector.done:
                self.watchdog.stop()  # everything is delivered: no deadline can end this request now
        if self.response is None:  # an empty body
            await self._start_response(upstream)
        inspector.finish()
        if inspector.filtering and (rest := inspector.take()):
            await self.response.write(rest)
        await self.response.write_eof()
        recording.completed(record, inspector.facts, streamed=True)
        return self.response

    async def _relay_json(self, upstream: aiohttp.ClientResponse, record: RequestContext) -> web.StreamResponse:
        # Not streamed: no token times and no TTFT (the client sees every token at once).
        body = await self._read_body(upstream)  # a non-streaming answer is its own first token: ttft bounds it
        self.response = self._buffered_response(upstream, body)
        recording.completed(record, inspect_json_body(body), streamed=False)
        return self.response

    async def _relay_unsuccessful(self, upstream: aiohttp.ClientResponse,
                                  record: RequestContext) -> web.StreamResponse:
        body = await self._read_body(upstream)
        message = inspect_json_body(body).upstream_error or body[:200].decode("utf-8", "replace")
        recording.answered_status(record, upstream.status, message)
        self.response = self._buffered_response(upstream, body)
        return self.response

    async def _read_body(self, upstream: aiohttp.ClientResponse) -> bytes:
        """The whole body, for answers relayed in one piece; bounded, so memory is."""
        limit = self.context.max_buffered_response_bytes
        chunks: list[bytes] = []
        size = 0
        async for data in upstream.content.iter_any():
            size += len(data)
            if size > limit:
                raise ResponseTooLarge(limit)
            chunks.append(data)
        return b"".join(chunks)

    # -- writing to the client ------------------------------------------------------------
    @staticmethod
    def _buffered_response(upstream: aiohttp.ClientResponse, body: bytes) -> web.Response:
        return web.Response(status=upstream.status, reason=upstream.reason, body=body,
                            headers=headers.to_client(upstream.headers))

    async def _start_response(self, upstream: aiohttp.ClientResponse) -> None:
        self.response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                           headers=headers.to_client(upstream.headers))
        await self.response.prepare(self.request)

    async def _answer_error(self, error: errors.ProxyError,
                            upstream: aiohttp.ClientResponse | None) -> web.StreamResponse:
        self.watchdog.stop()  # the request is ending: no deadline may interrupt the error answer
        let_go(upstream)  # stop the engine before anything else
        if self.response is None:
            return web.Response(status=error.status, body=error.body(), content_type="application/json")
        try:
            # Terminate a half-forwarded event first, so the error event parses on its own.
            prefix = b"\n\n" if self.inspector is not None and self.inspector.partial else b""
            held = self.inspector.held() if self.inspector is not None else b""
            await self.response.write(held + prefix + error.sse_event())
            await self.response.write_eof()
        except CLIENT_GONE:
            pass
        return self.response

    def _delivered(self) -> bool:
        """The client has been sent the whole answer ([DONE] included)."""
        return self.inspector is not None and self.inspector.done

    def _facts(self) -> ResponseFacts | None:
        return self.inspector.facts if self.inspector is not None else None


def let_go(upstream: aiohttp.ClientResponse | None) -> None:
    """Reuse the upstream connection after a full read; otherwise close it, aborting the request."""
    if upstream is None or upstream.closed:
        return
    if upstream.content.at_eof():
        upstream.release()
    else:
        upstream.close()
