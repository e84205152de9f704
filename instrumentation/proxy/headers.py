"""Which headers cross the proxy, in each direction.

Hop-by-hop headers (RFC 9110 section 7.6.1) belong to one connection and are never forwarded;
length and host are recomputed by aiohttp for the new connection. Everything else passes as is,
so auth, content type and vendor headers reach the engine and the client unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping

from multidict import CIMultiDict

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "transfer-encoding", "upgrade",
})
RECOMPUTED = frozenset({"host", "content-length"})
TRACE_HEADERS = frozenset({"traceparent", "tracestate"})


def _connection_listed(headers: Mapping[str, str]) -> set[str]:
    """Headers named in ``Connection:`` are hop-by-hop for this message too."""
    listed = headers.get("Connection", "")
    return {name.strip().lower() for name in listed.split(",") if name.strip()}


def to_upstream(headers: Mapping[str, str], trace_headers: Mapping[str, str],
                instrumented: bool) -> CIMultiDict[str]:
    """Request headers for the upstream call, carrying the proxy's own trace context.

    On instrumented paths the proxy asks for an uncompressed body (``Accept-Encoding:
    identity``): it must read the SSE events it forwards. Other paths keep the client's choice.
    """
    drop = HOP_BY_HOP | RECOMPUTED | _connection_listed(headers)
    if trace_headers:
        drop = drop | TRACE_HEADERS
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in drop:
            out.add(name, value)
    out.update(trace_headers)
    if instrumented:
        out["Accept-Encoding"] = "identity"
    return out


def to_client(headers: Mapping[str, str]) -> CIMultiDict[str]:
    """Response headers for the client: the upstream's, minus this connection's own."""
    drop = HOP_BY_HOP | RECOMPUTED | _connection_listed(headers)
    out: CIMultiDict[str] = CIMultiDict()
    for name, value in headers.items():
        if name.lower() not in drop:
            out.add(name, value)
    return out
