"""The on-disk spool: batches that could not reach ClickHouse, kept until it comes back.

One file per batch, named by a sequence number so replay runs in arrival order. A file is written
to a temporary name, fsync'd, renamed and the folder fsync'd: after :meth:`Spool.append` returns,
the batch survives a crash or power loss, and the receiver may acknowledge its spans. Each file
carries a CRC32 of its contents; a file that fails the check (a torn or damaged disk write) is
moved aside to ``corrupt/`` and counted, never inserted. The total size is bounded: a batch that
would exceed ``max_bytes`` is refused (its requests are not acknowledged, so clients retry).

File layout: ``MAGIC | header length (u32) | header JSON | payload``, with ``crc32`` in the header
covering the payload. The header keeps the deduplication token, so a replay after a crash that
happened mid-insert cannot write the batch twice.
"""

from __future__ import annotations

import json
import os
import struct
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path

MAGIC = b"ISPOOL1\n"
SUFFIX = ".batch"


class SpoolFull(RuntimeError):
    """The spool has no room for this batch."""


class SpoolCorrupt(RuntimeError):
    """A spooled file failed its checksum or could not be parsed."""


@dataclass(frozen=True)
class SpooledBatch:
    path: Path
    sequence: int
    token: str
    spans: int
    payload: bytes  # length-delimited ExportTraceServiceRequest messages


class Spool:
    def __init__(self, directory: str | os.PathLike[str], max_bytes: int):
        self.dir = Path(directory)
        self.max_bytes = max_bytes
        self.corrupt_dir = self.dir / "corrupt"
        self.rejected_dir = self.dir / "rejected"
        self._lock = threading.Lock()
        self.corrupted = 0  # files moved to corrupt/ since start
        self.dir.mkdir(parents=True, exist_ok=True)
        for leftover in self.dir.glob("*.tmp"):  # a write interrupted before its rename: never acknowledged
            leftover.unlink(missing_ok=True)
        self._sizes = {p: p.stat().st_size for p in self._files()}
        self._next = max((self._sequence(p) for p in self._sizes), default=0) + 1

    # -- state ------------------------------------------------------------------------
    @property
    def bytes(self) -> int:
        with self._lock:
            return sum(self._sizes.values())

    @property
    def batches(self) -> int:
        with self._lock:
            return len(self._sizes)

    @property
    def has_backlog(self) -> bool:
        """Batches wait here for ClickHouse (newer ones must queue behind them)."""
        return self.batches > 0

    # -- write ------------------------------------------------------------------------
    def append(self, token: str, spans: int, payload: bytes) -> Path:
        """Durably store one batch; raise :class:`SpoolFull` when it does not fit."""
        header = json.dumps({"token": token, "spans": spans, "crc32": zlib.crc32(payload),
                             "length": len(payload)}).encode()
        size = len(MAGIC) + 4 + len(header) + len(payload)
        with self._lock:
            used = sum(self._sizes.values())
            if used + size > self.max_bytes:
                raise SpoolFull(f"spool {self.dir} holds {used} bytes; a {size}-byte batch would exceed "
                                f"pipeline.spool_max_bytes={self.max_bytes}")
            sequence = self._next
            self._next += 1
        path = self.dir / f"{sequence:016d}{SUFFIX}"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            f.write(MAGIC + struct.pack(">I", len(header)) + header)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._fsync_dir()
        with self._lock:
            self._sizes[path] = size
        return path

    # -- read -------------------------------------------------------------------------
    def oldest(self) -> SpooledBatch | None:
        """The oldest intact batch; damaged files met on the way are moved to ``corrupt/``."""
        while True:
            with self._lock:
                paths = sorted(self._sizes, key=self._sequence)
            if not paths:
                return None
            try:
                return self.read(paths[0])
            except SpoolCorrupt:
                self._move(paths[0], self.corrupt_dir)
                self.corrupted += 1

    def read(self, path: Path) -> SpooledBatch:
        try:
            data = path.read_bytes()
            if not data.startswith(MAGIC):
                raise SpoolCorrupt(f"{path}: not a spool file")
            (header_length,) = struct.unpack(">I", data[len(MAGIC):len(MAGIC) + 4])
            start = len(MAGIC) + 4
            header = json.loads(data[start:start + header_length])
            payload = data[start + header_length:]
            if len(payload) != header["length"] or zlib.crc32(payload) != header["crc32"]:
                raise SpoolCorrupt(f"{path}: checksum mismatch (torn or damaged write)")
            return SpooledBatch(path, self._sequence(path), str(header["token"]), int(header["spans"]), payload)
        except (OSError, ValueError, KeyError, struct.error) as exc:
            raise SpoolCorrupt(f"{path}: unreadable: {exc}") from None

    def remove(self, batch: SpooledBatch) -> None:
        """Forget a batch that is now in ClickHouse."""
        batch.path.unlink(missing_ok=True)
        self._fsync_dir()
        with self._lock:
            self._sizes.pop(batch.path, None)

    def reject(self, batch: SpooledBatch, reason: str) -> Path:
        """Move a batch ClickHouse refuses outright aside (kept for inspection, never retried)."""
        target = self._move(batch.path, self.rejected_dir)
        target.with_suffix(".reason").write_text(reason + "\n")
        return target

    # -- helpers ----------------------------------------------------------------------
    def _files(self) -> list[Path]:
        return sorted(self.dir.glob(f"*{SUFFIX}"), key=self._sequence)

    @staticmethod
    def _sequence(path: Path) -> int:
        try:
            return int(path.stem)
        except ValueError:
            return 0

    def _move(self, path: Path, folder: Path) -> Path:
        folder.mkdir(exist_ok=True)
        target = folder / path.name
        os.replace(path, target)
        self._fsync_dir()
        with self._lock:
            self._sizes.pop(path, None)
        return target

    def _fsync_dir(self) -> None:
        fd = os.open(self.dir, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
