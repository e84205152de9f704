"""Which headers the proxy forwards, in each direction."""

from __future__ import annotations

from multidict import CIMultiDict

from infersight.instrumentation.proxy.headers import to_client, to_upstream


def test_upstream_headers_drop_hop_by_hop_and_carry_the_proxy_trace():
    incoming = CIMultiDict([
        ("Host", "proxy:8081"), ("Authorization", "Bearer k"), ("Connection", "keep-alive, X-Hop"),
        ("X-Hop", "1"), ("Content-Length", "12"), ("traceparent", "00-aaaa-bbbb-01"), ("tracestate", "v=1"),
        ("Accept-Encoding", "gzip"), ("X-Custom", "a"), ("X-Custom", "b"),
    ])
    out = to_upstream(incoming, {"traceparent": "00-cccc-dddd-01"}, instrumented=True)
    assert out["Authorization"] == "Bearer k"
    assert out.getall("X-Custom") == ["a", "b"]
    assert out["traceparent"] == "00-cccc-dddd-01"  # the proxy's span, child of the caller's
    assert "tracestate" not in out  # the caller's state goes with the caller's traceparent
    assert out["Accept-Encoding"] == "identity"  # the proxy must read the events it relays
    for gone in ("Host", "Connection", "X-Hop", "Content-Length"):
        assert gone not in out


def test_passthrough_keeps_the_clients_encoding_and_trace():
    incoming = CIMultiDict([("Accept-Encoding", "gzip"), ("traceparent", "00-aaaa-bbbb-01")])
    out = to_upstream(incoming, {}, instrumented=False)
    assert out["Accept-Encoding"] == "gzip"
    assert out["traceparent"] == "00-aaaa-bbbb-01"


def test_client_headers():
    upstream = CIMultiDict([("Content-Type", "text/event-stream"), ("Transfer-Encoding", "chunked"),
                            ("Content-Length", "5"), ("X-Request-Id", "r1"), ("Keep-Alive", "timeout=5")])
    out = to_client(upstream)
    assert dict(out) == {"Content-Type": "text/event-stream", "X-Request-Id": "r1"}
