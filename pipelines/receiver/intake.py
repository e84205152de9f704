"""What both receivers do with a body once the transport is done: check, queue, wait, answer.

Transport-neutral: the HTTP and gRPC front ends turn :class:`Answer` kinds into their own status
codes (see ``HTTP_STATUS`` in http_server.py and ``GRPC_CODE`` in grpc_server.py).
"""

from __future__ import annotations

import asyncio
import hmac
from dataclasses import dataclass

from infersight.pipelines.receiver import otlp
from infersight.pipelines.receiver.metrics import PipelineMetrics
from infersight.pipelines.receiver.writer import QueueFull, Refused, Unavailable, Writer
from infersight.signals.pipeline import ExportOutcome


@dataclass(frozen=True)
class Answer:
    kind: ExportOutcome
    message: str = ""
    rejected_spans: int = 0  # per-span rejections inside an accepted request
    retry_after: float = 0.0


class Intake:
    def __init__(self, writer: Writer, metrics: PipelineMetrics, max_attribute_length: int,
                 bearer_token: str | None = None):
        self.writer = writer
        self.metrics = metrics
        self.max_attribute_length = max_attribute_length
        self._expected = f"Bearer {bearer_token}".encode() if bearer_token else None

    def authorized(self, authorization: str | None) -> bool:
        """Constant-time comparison of the Authorization header with the configured token."""
        if self._expected is None:
            return True
        return hmac.compare_digest((authorization or "").encode(), self._expected)

    def refuse_if_full(self, protocol: str, size: int = 0) -> Answer | None:
        """429 for a request whose spans are not known yet, when the queue would refuse even one span of it.

        Asked before a body is read (HTTP) or decoded (both): the refusal then costs neither the body's memory
        nor its decode. Its spans stay uncounted (received and rejected); ``requests_total{outcome="queue_full"}``
        counts the request. ``size``: the bytes it will queue, where known before decoding (0 if not).
        """
        refusal = self.writer.refusal(size=size)
        if refusal is None:
            return None
        return self._count(protocol, Answer(ExportOutcome.QUEUE_FULL, str(refusal), retry_after=refusal.retry_after))

    async def export(self, protocol: str, body: bytes, as_json: bool) -> Answer:
        # A protobuf body is queued as it came; a JSON body's queued size is known only once converted.
        if (full := self.refuse_if_full(protocol, 0 if as_json else len(body))) is not None:
            return full
        try:
            if as_json:
                decoded = otlp.decode_json(body, self.max_attribute_length)
            else:
                decoded = otlp.decode_protobuf(body, self.max_attribute_length)
        except otlp.BadPayload as exc:
            return self.refuse(protocol, ExportOutcome.MALFORMED, str(exc))
        m = self.metrics
        m.received.labels(protocol=protocol).inc(decoded.spans + decoded.invalid_ids)
        m.reject(protocol, "invalid_id", decoded.invalid_ids)
        if decoded.truncated:
            m.truncated.inc(decoded.truncated)
        note = f"{decoded.invalid_ids} spans with an invalid trace or span id" if decoded.invalid_ids else ""
        if decoded.spans == 0:
            return self._count(protocol, Answer(ExportOutcome.OK, note, decoded.invalid_ids))
        try:
            future = self.writer.submit(decoded.payload, decoded.spans)
        except QueueFull as exc:
            m.reject(protocol, "queue_full", decoded.spans)
            return self._count(protocol, Answer(ExportOutcome.QUEUE_FULL, str(exc), retry_after=exc.retry_after))
        except Unavailable as exc:
            m.reject(protocol, "unavailable", decoded.spans)
            return self._count(protocol, Answer(ExportOutcome.UNAVAILABLE, str(exc), retry_after=5.0))
        try:
            await asyncio.wrap_future(future)
        except Refused as exc:
            m.reject(protocol, "refused", decoded.spans)
            return self._count(protocol, Answer(ExportOutcome.REFUSED, str(exc)))
        except Unavailable as exc:
            m.reject(protocol, "unavailable", decoded.spans)
            return self._count(protocol, Answer(ExportOutcome.UNAVAILABLE, str(exc), retry_after=5.0))
        m.accepted.labels(protocol=protocol).inc(decoded.spans)
        return self._count(protocol, Answer(ExportOutcome.OK, note, decoded.invalid_ids))

    def refuse(self, protocol: str, kind: ExportOutcome, message: str, retry_after: float = 0.0) -> Answer:
        """A whole request refused before decoding (its spans are unknown, so only the request counts)."""
        return self._count(protocol, Answer(kind, message, retry_after=retry_after))

    def _count(self, protocol: str, answer: Answer) -> Answer:
        self.metrics.requests.labels(protocol=protocol, outcome=answer.kind.value).inc()
        return answer
