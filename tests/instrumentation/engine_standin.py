"""A STAND-IN for an OpenAI-compatible inference engine (vLLM-style SSE), for proxy tests and benchmarks.

No model runs here: it streams numbered fake tokens on a schedule the request asks for, so tests
can provoke a slow first token, a stall, a crash, an error status or garbage on purpose. The
simulator brings a richer engine; this one is deliberately small.

Each request may carry a ``standin`` object in its JSON body (``extra_body`` in the openai client):

    tokens (5)  first_token_delay (0)  interval (0)  stall_after (None)  stall (0)
    status (200: else answer that status with an OpenAI error body)
    garbage (false: answer 200 text/event-stream with bytes that are not SSE)
    crash_after (None: drop the connection after that many tokens)
    half_event_after (None: after that many tokens, send half an event and hang)
    stamp (false: each token's text is the monotonic_ns time it was sent, for latency benchmarks)
    linger_after_done (0: seconds between ``data: [DONE]`` and the end of the body)
    refuse_continuous_usage (false: answer 400 to stream_options.continuous_usage_stats, as OpenAI's API does)
    continuous_usage (false: honour stream_options.continuous_usage_stats as vLLM does, the running
        usage on every chunk; off, the stand-in ignores it)

Every request is logged as a :class:`Served` with the exact bytes written, whether the client
(the proxy) went away before the end, and the headers it arrived with (to check traceparent).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field

from aiohttp import web
from multidict import CIMultiDict

MODELS = ("standin-model",)


@dataclass
class Served:
    path: str
    headers: CIMultiDict[str]  # as received (names case-insensitive)
    body: dict
    sent: bytearray = field(default_factory=bytearray)
    cancelled: bool = False
    done: threading.Event = field(default_factory=threading.Event)


class EngineStandin:
    def __init__(self) -> None:
        self.served: list[Served] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        response = web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in MODELS]})
        response.enable_compression()  # gzip when the client accepts it, as servers behind nginx do
        return response

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except ValueError:  # as vLLM does: a 400 with the OpenAI error shape
            return web.json_response({"error": {"message": "request body is not JSON", "type": "BadRequestError",
                                                "param": None, "code": 400}}, status=400)
        served = Served(request.path, CIMultiDict(request.headers), body)
        self.served.append(served)
        plan = body.get("standin", {})
        if plan.get("refuse_continuous_usage") and "continuous_usage_stats" in (body.get("stream_options") or {}):
            return web.json_response({"error": {"message": "Unrecognized request argument supplied: "
                                                 "continuous_usage_stats", "type": "invalid_request_error",
                                                 "param": None, "code": None}}, status=400)
        try:
            if plan.get("status", 200) != 200:
                error = {"error": {"message": f"stand-in failure {plan['status']}", "type": "server_error",
                                   "param": None, "code": plan["status"]}}
                payload = json.dumps(error).encode()
                served.sent += payload
                return web.Response(status=plan["status"], body=payload, content_type="application/json")
            if body.get("stream"):
                return await self._stream(request, served, plan)
            return await self._whole(served, plan)
        except asyncio.CancelledError:
            served.cancelled = True
            raise
        finally:
            served.done.set()

    async def _whole(self, served: Served, plan: dict) -> web.Response:
        tokens = plan.get("tokens", 5)
        await asyncio.sleep(plan.get("first_token_delay", 0) + tokens * plan.get("interval", 0))
        chat = served.path.endswith("chat/completions")
        text = "".join(f"tok{i} " for i in range(tokens))
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                  if chat else {"index": 0, "text": text, "finish_reason": "length"})
        payload = json.dumps({
            "id": "cmpl-standin", "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()), "model": served.body.get("model"), "choices": [choice],
            "usage": _usage(served.body, tokens),
        }).encode()
        served.sent += payload
        return web.Response(body=payload, content_type="application/json")

    async def _stream(self, request: web.Request, served: Served, plan: dict) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)

        async def send(data: bytes) -> None:
            await response.write(data)
            served.sent += data

        if plan.get("garbage"):
            await send(b"<html>502 Bad Gateway</html>\n\nthis is not an event stream\n\n")
            await response.write_eof()
            return response
        chat = served.path.endswith("chat/completions")
        model = served.body.get("model")
        options = served.body.get("stream_options") or {}
        running = plan.get("continuous_usage") and options.get("include_usage") and options.get(
            "continuous_usage_stats")

        def chunk(delta, finish_reason: str | None, generated: int) -> dict:
            payload = _chunk(chat, model, delta, finish_reason)
            if running:
                payload["usage"] = _usage(served.body, generated)
            return payload

        await send(_event(chunk({"role": "assistant", "content": ""} if chat else "", None, 0)))
        await asyncio.sleep(plan.get("first_token_delay", 0))
        tokens = plan.get("tokens", 5)
        for index in range(tokens):
            if index == plan.get("half_event_after"):
                await send(_event(_chunk(chat, model, {"content": "cut"}, None))[:20])
                await asyncio.sleep(3600)  # until the proxy gives up and cancels us
            if index == plan.get("crash_after"):
                request.transport.close()  # an engine dying mid-stream
                return response
            if index == plan.get("stall_after"):
                await asyncio.sleep(plan.get("stall", 0))
            elif index and plan.get("interval"):
                await asyncio.sleep(plan["interval"])
            text = str(time.monotonic_ns()) if plan.get("stamp") else f"tok{index} "
            await send(_event(chunk({"content": text} if chat else text, None, index + 1)))
        await send(_event(chunk({} if chat else "", "length", tokens)))
        if (served.body.get("stream_options") or {}).get("include_usage"):
            await send(_event({"id": "cmpl-standin", "object": "chat.completion.chunk", "created": 0,
                               "model": model, "choices": [], "usage": _usage(served.body, tokens)}))
        await send(b"data: [DONE]\n\n")
        await asyncio.sleep(plan.get("linger_after_done", 0))
        await response.write_eof()
        return response


def _chunk(chat: bool, model: str | None, delta, finish_reason: str | None) -> dict:
    choice = ({"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason} if chat
              else {"index": 0, "text": delta, "logprobs": None, "finish_reason": finish_reason})
    return {"id": "cmpl-standin", "object": "chat.completion.chunk" if chat else "text_completion",
            "created": 0, "model": model, "choices": [choice]}


def _event(payload: dict) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _usage(body: dict, completion_tokens: int) -> dict:
    return {"prompt_tokens": 7, "completion_tokens": completion_tokens, "total_tokens": 7 + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": 3}}
