"""The on-disk spool: durable, ordered, checksummed, bounded."""

from __future__ import annotations

import pytest

from infersight.pipelines.receiver.spool import Spool, SpoolFull


def test_batches_come_back_in_order_and_survive_a_new_instance(tmp_path):
    spool = Spool(tmp_path, 10_000)
    for i in range(5):
        spool.append(f"token-{i}", i + 1, f"payload-{i}".encode())
    assert spool.batches == 5 and spool.bytes > 0
    reopened = Spool(tmp_path, 10_000)  # a restarted receiver
    seen = []
    while (batch := reopened.oldest()) is not None:
        seen.append((batch.token, batch.spans, batch.payload))
        reopened.remove(batch)
    assert seen == [(f"token-{i}", i + 1, f"payload-{i}".encode()) for i in range(5)]
    assert reopened.batches == 0 and reopened.bytes == 0
    # sequence numbers keep growing after a restart, so new batches sort after old ones
    first = reopened.append("a", 1, b"x")
    assert int(first.stem) > 5


def test_a_damaged_file_is_set_aside_not_replayed(tmp_path):
    spool = Spool(tmp_path, 10_000)
    bad = spool.append("bad", 1, b"will be damaged")
    spool.append("good", 1, b"intact")
    data = bytearray(bad.read_bytes())
    data[-3] ^= 0xFF  # flip a payload byte: the CRC no longer matches
    bad.write_bytes(bytes(data))
    batch = spool.oldest()
    assert batch.token == "good"
    assert spool.corrupted == 1
    assert (tmp_path / "corrupt" / bad.name).exists()


def test_a_truncated_file_is_set_aside(tmp_path):
    spool = Spool(tmp_path, 10_000)
    torn = spool.append("torn", 1, b"0123456789" * 10)
    torn.write_bytes(torn.read_bytes()[:30])
    assert spool.oldest() is None and spool.corrupted == 1


def test_the_spool_is_bounded(tmp_path):
    spool = Spool(tmp_path, 400)
    spool.append("a", 1, b"x" * 200)
    with pytest.raises(SpoolFull, match="spool_max_bytes=400"):
        spool.append("b", 1, b"y" * 200)
    assert spool.batches == 1


def test_interrupted_writes_are_discarded_at_start(tmp_path):
    (tmp_path / "0000000000000007.tmp").write_bytes(b"half a batch, never acknowledged")
    spool = Spool(tmp_path, 10_000)
    assert spool.batches == 0
    assert not list(tmp_path.glob("*.tmp"))


def test_rejected_batches_keep_their_reason(tmp_path):
    spool = Spool(tmp_path, 10_000)
    spool.append("t", 1, b"data")
    batch = spool.oldest()
    moved = spool.reject(batch, "ClickHouse refused it")
    assert moved.parent.name == "rejected"
    assert "refused" in moved.with_suffix(".reason").read_text()
    assert spool.batches == 0
