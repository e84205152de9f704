"""How each way a proxied request can end is recorded through the request tracer API.

The proxy has no spans or metrics of its own: it drives a :class:`RequestContext` (from
``infersight.instrumentation.tracer``) like any engine or gateway would, and this module maps what
the proxy saw in the response (:class:`ResponseFacts`) onto its endings.

Telemetry must never break traffic: if an ending is refused (say, usage the tracer will not
take), the error is logged and the request still ends, as ``instrumentation_error``, so its
in-flight gauge and span are closed and the client's answer is untouched.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from infersight.instrumentation.proxy.sse import ResponseFacts
from infersight.instrumentation.tracer import RequestContext

# Statuses that mean "not served, try later": recorded as rejections, not errors.
REJECTION_REASONS = {429: "rate_limited", 503: "overloaded"}
log = logging.getLogger(__name__)


def _never_raise(ending: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(ending)
    def guarded(request: RequestContext, *args: Any, **kwargs: Any) -> None:
        try:
            ending(request, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - logged, and the request is still ended below
            log.exception("proxy: recording %s failed; ending the request as instrumentation_error", ending.__name__)
            if not request.finished:
                request.fail("instrumentation_error", message=f"{type(exc).__name__}: {exc}")

    return guarded


def _usage(facts: ResponseFacts | None) -> dict[str, Any]:
    if facts is None:
        return {}
    return {"input_tokens": facts.input_tokens, "output_tokens": facts.output_tokens,
            "cached_input_tokens": facts.cached_input_tokens, "reasoning_tokens": facts.reasoning_tokens,
            "response_model": facts.model,
            "response_id": facts.response_id}


@_never_raise
def completed(request: RequestContext, facts: ResponseFacts, *, streamed: bool) -> None:
    """A 200 answer read to its end: success, unless the body itself says otherwise."""
    if facts.upstream_error:
        request.fail("upstream_error", message=facts.upstream_error, **_usage(facts))
    elif facts.malformed:
        request.fail("malformed_sse" if streamed else "malformed_response", message=facts.malformed,
                     **_usage(facts))
    else:
        reason = next((r for r in reversed(facts.finish_reasons) if r), None)
        request.finish(reason, **_usage(facts))


@_never_raise
def answered_status(request: RequestContext, status: int, message: str) -> None:
    """The upstream answered an error status; the client gets it as is."""
    if status in REJECTION_REASONS:
        request.reject(REJECTION_REASONS[status], status=status)
    else:
        request.fail(str(status), message=message)


@_never_raise
def failed(request: RequestContext, error_type: str, message: str, facts: ResponseFacts | None = None) -> None:
    """The proxy ended the request because the upstream could not be reached or broke off."""
    request.fail(error_type, message=message, **_usage(facts))


@_never_raise
def timed_out(request: RequestContext, kind: str, facts: ResponseFacts | None) -> None:
    request.timeout(kind, **_usage(facts))


@_never_raise
def cancelled(request: RequestContext, facts: ResponseFacts | None) -> None:
    request.cancel(**_usage(facts))
