"""Paths the proxy does not instrument (``/v1/models``, ``/health``, ...): relayed as raw bytes.

The body, compressed or not, streams through chunk by chunk; only the total timeout applies,
and a client that leaves closes the upstream connection.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web

from infersight.attributes import TimeoutKind
from infersight.instrumentation.proxy import errors, headers
from infersight.instrumentation.proxy.exchange import let_go

if TYPE_CHECKING:
    from infersight.instrumentation.proxy.app import ProxyContext


async def relay(context: ProxyContext, request: web.Request, body: bytes) -> web.StreamResponse:
    total = context.timeouts.total
    deadline = asyncio.get_running_loop().time() + total if total else None
    upstream: aiohttp.ClientResponse | None = None
    response: web.StreamResponse | None = None
    try:
        async with asyncio.timeout_at(deadline):
            upstream = await context.session.request(
                request.method, context.upstream_url(request), data=body or None,
                headers=headers.to_upstream(request.headers, {}, instrumented=False))
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason,
                                          headers=headers.to_client(upstream.headers))
            await response.prepare(request)
            async for data in upstream.content.iter_any():
                await response.write(data)
        await response.write_eof()
        return response
    except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:  # before TimeoutError
        error = errors.upstream_unreachable(context.upstream_label, exc)
    except TimeoutError:
        error = errors.timeout_error(TimeoutKind.TOTAL, total or 0)
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
        error = errors.upstream_broke(str(exc) or type(exc).__name__)
    except ConnectionError:  # the client went away; ``finally`` closes the upstream connection
        return response or web.Response(status=499)
    finally:
        let_go(upstream)
    if response is None:
        return web.Response(status=error.status, body=error.body(), content_type="application/json")
    return response  # already started: the body ends where the upstream's broke off
