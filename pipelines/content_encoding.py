"""Decompress an HTTP body the way ClickHouse reads it from its ``Content-Encoding``, in bounded steps.

The gate must check a SQL body as the text ClickHouse will run, not the bytes on the wire: a compressor
can turn a forbidden call into a back-reference the plain bytes never show. These are the encodings
ClickHouse's HTTP interface reads that clickhouse-connect sends (lz4 is its default, with the INSERT
statement inside the compressed body) plus gzip and deflate; their decoders come with clickhouse-connect
(lz4, zstd) or Python (zlib). Concatenated streams (gzip members, lz4 or zstd frames) are read one after
another, as a client that compresses block by block sends them.
"""

from __future__ import annotations

import sys
import zlib
from collections.abc import Iterator

import lz4.frame

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

# Content-Encoding (lower case) -> a fresh one-stream decompressor. ClickHouse's `deflate` is zlib's
# format (RFC 1950), as Python's zlib.compress writes it.
DECOMPRESSORS = {
    "gzip": lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
    "x-gzip": lambda: zlib.decompressobj(16 + zlib.MAX_WBITS),
    "deflate": lambda: zlib.decompressobj(zlib.MAX_WBITS),
    "lz4": lz4.frame.LZ4FrameDecompressor,
    "zstd": zstd.ZstdDecompressor,
}
ACCEPTED = ", ".join(sorted(DECOMPRESSORS))  # for error messages
_ERRORS = (zlib.error, RuntimeError, ValueError, EOFError, zstd.ZstdError)
STEP = 1 << 20  # the most one decompress call returns: memory stays bounded whatever the ratio


class BodyRefused(Exception):
    """A body that cannot be read as its encoding says; ``status`` is the HTTP answer."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def is_identity(encoding: str) -> bool:
    return encoding.strip().lower() in ("", "identity")


class Inflater:
    """Feed compressed chunks, get decompressed pieces of at most ``STEP`` bytes; ``finish`` at the end."""

    def __init__(self, encoding: str) -> None:
        self.name = encoding.strip().lower()
        factory = DECOMPRESSORS.get(self.name)
        if factory is None:
            raise BodyRefused(415, f"Content-Encoding {encoding!r} on a query body is not accepted by the "
                                   f"infersight gate; send the SQL uncompressed or as one of {ACCEPTED}")
        self._factory = factory
        self._stream = factory()
        self._fed = False

    def feed(self, data: bytes) -> Iterator[bytes]:
        self._fed = self._fed or bool(data)
        stream = self._stream
        while True:
            if stream.eof:  # the next member or frame, if any bytes follow this one
                data = (stream.unused_data or b"") + data
                if not data:
                    return
                stream = self._stream = self._factory()
            try:
                piece = stream.decompress(data, STEP)
            except _ERRORS as exc:
                raise BodyRefused(400, f"query body is not valid {self.name}: {exc}") from None
            if piece:
                yield piece
            if stream.eof:
                # What follows the stream is in unused_data (zlib may also leave it in unconsumed_tail).
                data = b""
                continue
            # Input the decompressor has not used yet: zlib hands it back, lz4 and zstd keep it inside.
            if hasattr(stream, "unconsumed_tail"):
                data = stream.unconsumed_tail
                if not data:
                    return
            elif stream.needs_input:
                return
            else:
                data = b""

    def finish(self) -> None:
        if not self._fed or not self._stream.eof:
            raise BodyRefused(400, f"query body ends inside a {self.name} stream (truncated)")
