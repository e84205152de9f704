"""Fetch one /metrics URL with a hard deadline and a size limit.

http.client directly (not urllib) so that the socket timeout can shrink to the time left before
each read: a target that trickles bytes cannot hold a collection cycle past its deadline. No
proxy from the environment is used, as with Prometheus' own scrapes.
"""

from __future__ import annotations

import http.client
import ssl
import time
import urllib.parse
from dataclasses import dataclass

ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"  # the classic text format, not protobuf/OpenMetrics
CHUNK = 64 * 1024


class ScrapeError(Exception):
    """A failed fetch; ``reason`` is the scrape-error label value (down, timeout, too_large, http_status)."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


class TargetError(ValueError):
    """A target specification that cannot be used; the message says what to change."""


def check_url(url: str, example: str = "http://10.0.0.5:8000/metrics") -> str:
    """``url`` if :func:`fetch` can use it (http(s), a host, a valid port), else :class:`TargetError`
    naming ``example``. Engine, gateway and dcgm-exporter targets are all checked here."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise TargetError(f"{url!r} is not an http(s) URL with a host, e.g. {example}")
    try:
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise TargetError(f"{url!r} has an invalid port") from None
    return url


@dataclass(frozen=True)
class Fetched:
    text: str
    seconds: float


def fetch(url: str, timeout: float, max_bytes: int) -> Fetched:
    """GET ``url``; raise :class:`ScrapeError` on any failure, never return a partial body."""
    start = time.monotonic()
    deadline = start + timeout
    parts = urllib.parse.urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        conn = http.client.HTTPSConnection(parts.hostname, parts.port, timeout=timeout,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        conn.connect()
        # Keep our own handle: the connection hands its socket to the response (conn.sock = None)
        # when the server closes after the body.
        sock = conn.sock
        sock.settimeout(_left(deadline))
        conn.request("GET", path, headers={"Accept": ACCEPT, "Accept-Encoding": "identity",
                                           "User-Agent": "infersight-engine-collector"})
        response = conn.getresponse()
        if response.status != 200:
            raise ScrapeError("http_status", f"HTTP {response.status} {response.reason}")
        length = response.getheader("Content-Length")
        if length and length.isdigit() and int(length) > max_bytes:
            raise ScrapeError("too_large", f"Content-Length {length} exceeds the limit of {max_bytes} bytes")
        body = bytearray()
        while True:
            sock.settimeout(_left(deadline))
            chunk = response.read1(CHUNK)
            if not chunk:
                break
            body += chunk
            if len(body) > max_bytes:
                raise ScrapeError("too_large", f"body exceeds the limit of {max_bytes} bytes")
            if time.monotonic() > deadline:
                raise TimeoutError()
    except ScrapeError:
        raise
    except TimeoutError:
        raise ScrapeError("timeout", f"no complete answer within {timeout:g}s") from None
    except (OSError, http.client.HTTPException) as exc:
        raise ScrapeError("down", f"{type(exc).__name__}: {exc}"[:300]) from None
    finally:
        conn.close()
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError("malformed", f"body is not UTF-8: {exc}"[:300]) from None
    return Fetched(text, time.monotonic() - start)


def _left(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError()
    return left
