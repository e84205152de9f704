"""The three proxy timeouts and which one is due next.

- ``ttft``: from request arrival to the first chunk that carries an output token. For a
  non-streaming request the whole response is its first token, so this bounds the full body.
- ``idle``: after the first token, the longest wait for the next token-carrying chunk.
- ``total``: from request arrival to the end of the response.

Zero or ``None`` disables a timeout. Times are event-loop times (``loop.time()``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from infersight.attributes import TimeoutKind


@dataclass(frozen=True)
class Timeouts:
    ttft: float | None = 60.0
    idle: float | None = 30.0
    total: float | None = 600.0

    def __post_init__(self) -> None:
        for kind in TimeoutKind:
            value = getattr(self, kind)
            if value is not None and value < 0:
                raise ValueError(f"{kind} timeout must be >= 0 seconds (0 disables it), got {value}")

    def seconds(self, kind: str) -> float:
        return float(getattr(self, kind) or 0)


class Deadlines:
    """Tracks one request: ``next(first_token_seen)`` gives (deadline or None, kind)."""

    def __init__(self, timeouts: Timeouts, start: float) -> None:
        self.timeouts = timeouts
        self.start = start
        self.last_token = start
        self.total_at = start + timeouts.total if timeouts.total else None

    def token(self, now: float) -> None:
        self.last_token = now

    def next(self, first_token_seen: bool) -> tuple[float | None, TimeoutKind]:
        if first_token_seen:
            kind, limit, since = TimeoutKind.IDLE, self.timeouts.idle, self.last_token
        else:
            kind, limit, since = TimeoutKind.TTFT, self.timeouts.ttft, self.start
        phase_at = since + limit if limit else None
        if phase_at is None or (self.total_at is not None and self.total_at <= phase_at):
            return self.total_at, TimeoutKind.TOTAL
        return phase_at, kind


class Watchdog:
    """Enforces a request's deadlines with one timer, instead of a new timer around every read.

    A token only moves the deadline (two attribute writes, on the hot path). When the timer fires
    before the moved deadline it re-arms itself there; when a deadline has truly passed it records
    which one (``expired``) and cancels the request's task, which turns that into a timeout answer.
    The first token re-arms at once: the idle deadline after it may come before the ttft one.
    """

    def __init__(self, deadlines: Deadlines, loop: asyncio.AbstractEventLoop, task: asyncio.Task) -> None:
        self.deadlines = deadlines
        self.loop = loop
        self.task = task
        self.first_token = False
        self.expired: str | None = None
        self._handle: asyncio.TimerHandle | None = None
        self._arm()

    def token(self) -> None:
        self.deadlines.token(self.loop.time())
        if not self.first_token:
            self.first_token = True
            self.stop()
            self._arm()

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self) -> None:
        deadline, _ = self.deadlines.next(self.first_token)
        if deadline is not None:
            self._handle = self.loop.call_at(deadline, self._fire)

    def _fire(self) -> None:
        self._handle = None
        deadline, kind = self.deadlines.next(self.first_token)
        if deadline is None:
            return
        if self.loop.time() < deadline:  # tokens moved it on since this timer was set
            self._handle = self.loop.call_at(deadline, self._fire)
            return
        self.expired = kind
        self.task.cancel()
