"""Body decoding for the gate: every frame read, pieces bounded, anything else refused with its status."""

import os

import pytest

from infersight.pipelines.content_encoding import STEP, BodyRefused, Inflater
from tests.pipelines.encodings import COMPRESS


def _inflate(encoding: str, body: bytes, chunk: int | None = None) -> list[bytes]:
    inflater, pieces = Inflater(encoding), []
    for start in range(0, len(body), chunk or max(len(body), 1)):
        pieces += inflater.feed(body[start:start + (chunk or len(body))])
    inflater.finish()
    return pieces


@pytest.mark.parametrize("encoding", sorted(COMPRESS))
def test_concatenated_frames_are_all_read_in_bounded_pieces(encoding):
    compress = COMPRESS[encoding]
    text, noise = b"a" * (5 * STEP), os.urandom(3 * STEP)  # a 1000:1 ratio, then incompressible bytes
    body = compress(text) + compress(noise) + compress(b"end")
    for chunk in (None, 7777):
        pieces = _inflate(encoding, body, chunk)
        assert b"".join(pieces) == text + noise + b"end"
        assert max(len(p) for p in pieces) <= STEP


@pytest.mark.parametrize("encoding", sorted(COMPRESS))
def test_truncated_foreign_and_trailing_bytes_are_refused(encoding):
    good = COMPRESS[encoding](b"SELECT 1")
    for bad in (good[:-3], b"", good + b"\x00not a frame"):
        with pytest.raises(BodyRefused) as refused:
            _inflate(encoding, bad)
        assert refused.value.status == 400 and encoding in str(refused.value)


@pytest.mark.parametrize("encoding", ["br", "xz", "snappy", "gzip, lz4"])
def test_an_encoding_without_a_decoder_is_refused_as_unsupported(encoding):
    with pytest.raises(BodyRefused) as refused:
        Inflater(encoding)
    assert refused.value.status == 415 and "lz4" in str(refused.value)
