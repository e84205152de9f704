"""Errors the proxy itself produces, in the OpenAI error shape clients already understand.

Before the response has started, an error is an HTTP status with a JSON body
``{"error": {"message", "type", "param", "code"}}``. Once a stream has started (status 200 and
some events already sent) the only well-formed way left is an SSE event carrying the same object,
which the ``openai`` client raises as ``APIError`` (vLLM reports mid-stream failures this way too).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from infersight.attributes import TimeoutKind, UpstreamError


@dataclass(frozen=True)
class ProxyError:
    """An error the proxy answers with, and how it is recorded on the span."""

    status: int  # HTTP status when the response has not started yet
    code: str  # machine-readable: ttft_timeout, idle_timeout, total_timeout, upstream_unreachable ...
    message: str
    type: str = "proxy_error"

    def body(self) -> bytes:
        return json.dumps({"error": {"message": self.message, "type": self.type, "param": None,
                                     "code": self.code}}).encode()

    def sse_event(self) -> bytes:
        return b"data: " + self.body() + b"\n\n"


def timeout_error(kind: str, seconds: float) -> ProxyError:
    what = {
        TimeoutKind.TTFT: "no output token from the upstream within the first-token timeout",
        TimeoutKind.IDLE: "the upstream stream stalled: no new token within the idle timeout",
        TimeoutKind.TOTAL: "the request exceeded the total timeout",
    }[kind]
    return ProxyError(504, f"{kind}_timeout", f"{what} ({seconds:g}s); the upstream request was cancelled",
                      type="timeout")


def upstream_unreachable(upstream: str, exc: Exception) -> ProxyError:
    os_error = getattr(exc, "os_error", None)
    errno = getattr(os_error, "errno", None)
    # "Connection refused" reads better than asyncio's "Connect call failed ('10.0.0.5', 8000)".
    reason = os.strerror(errno) if errno else str(os_error or exc)
    return ProxyError(502, UpstreamError.UNREACHABLE, f"cannot reach upstream {upstream}: {reason} "
                      "(is the engine running, and is --upstream right?)", type="upstream_error")


def upstream_broke(reason: str) -> ProxyError:
    return ProxyError(502, UpstreamError.DISCONNECTED, f"the upstream response broke off: {reason}",
                      type="upstream_error")


def request_too_large(limit: int) -> ProxyError:
    return ProxyError(413, "request_too_large", f"the request body is larger than the proxy accepts ({limit:,} "
                      "bytes); raise it with --max-request-mb", type="invalid_request_error")


def upstream_too_large(limit: int) -> ProxyError:
    return ProxyError(502, "upstream_response_too_large", f"the upstream's non-streaming answer is larger than "
                      f"the proxy buffers ({limit:,} bytes)", type="upstream_error")
