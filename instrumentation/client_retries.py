"""Client retries: requests a caller sends again, recognised from the headers real SDKs send.

A client retry reaches the gateway as a brand-new request, so without this it only grows
``llm_requests_total`` and a retry storm made of client retries hides in the denominator. Two
signs, either one enough:

- ``x-stainless-retry-count`` above 0: the OpenAI Python and Node SDKs (and the other Stainless
  SDKs) send it on every request, ``0`` on the first attempt (openai-python ``_base_client.py``).
- an ``Idempotency-Key`` or ``X-Request-Id`` (or the request id the gateway passes) seen before:
  a caller's own retry that reuses its key. Remembered as hashes, the most recent
  :data:`REMEMBERED_KEYS` of them, so memory stays bounded whatever the callers send.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping

RETRY_COUNT_HEADER = "x-stainless-retry-count"
KEY_HEADERS = ("idempotency-key", "x-request-id")
REMEMBERED_KEYS = 65536


class ClientRetryDetector:
    """Says whether a request is a client's retry; safe to call from several threads."""

    def __init__(self, remembered: int = REMEMBERED_KEYS) -> None:
        self._seen: OrderedDict[int, None] = OrderedDict()
        self._remembered = remembered
        self._lock = threading.Lock()

    def is_retry(self, headers: Mapping[str, str] | None, request_id: str | None = None) -> bool:
        retry = False
        keys = [request_id] if request_id else []
        if headers:
            for name, value in headers.items():
                lowered = name.lower()
                if lowered == RETRY_COUNT_HEADER:
                    retry = retry or _positive(value)
                elif lowered in KEY_HEADERS and value and value not in keys:
                    keys.append(value)  # once: a key sent in two headers is one request, not a retry
        for key in keys:
            retry = self._seen_before(key) or retry
        return retry

    def _seen_before(self, key: str) -> bool:
        digest = hash(key)
        with self._lock:
            if digest in self._seen:
                self._seen.move_to_end(digest)
                return True
            self._seen[digest] = None
            if len(self._seen) > self._remembered:
                self._seen.popitem(last=False)
        return False


def _positive(value: object) -> bool:
    try:
        return int(str(value).strip()) > 0
    except ValueError:
        return False  # a malformed header is not a retry, and never an error
