"""The Content-Encodings ClickHouse's HTTP interface reads and the gate decodes, as a client writes them."""

import gzip
import zlib

import lz4.frame

try:
    from compression import zstd  # Python 3.14 and newer
except ImportError:
    from backports import zstd

COMPRESS = {"gzip": gzip.compress, "deflate": zlib.compress, "lz4": lz4.frame.compress, "zstd": zstd.compress}


def encoded(name: str, text: str | bytes) -> bytes:
    return COMPRESS[name](text.encode() if isinstance(text, str) else text)
